"""What the CLI tells its user: usage of the right command, `python -m ratc`, announced writes, a capped out-of-memory report, help texts, wording, the other-platform
warning and readable sub-second plan times."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ratc import __version__
from ratc.cli.main import build_parser, main
from ratc.errors import LocatedError

ROOT = Path(__file__).parents[1]
GOLDEN = Path(__file__).parent / "golden"
LLAMA = str(ROOT / "examples" / "llama.py")
# Buffered stdout, as for a user's shell (as tests/test_cli_entry.py runs the command).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def ratc(*args, module="ratc.cli.main"):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=ENV,
                          cwd=ROOT)


def run_cli(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def subparser(name):
    import argparse

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def option_help(command, option):
    return next(a.help for a in subparser(command)._actions if option in a.option_strings)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """A tiny program compiled for mt3000 (P=1, D=4), with its graph IR for --plan."""
    out = tmp_path_factory.mktemp("polish") / "tiny"
    assert main(["compile", LLAMA, "--preset", "tiny", "--clusters", "4", "--no-run", "-o", str(out)]) == 0
    return out


# 1. a mistyped option is reported with the usage of the command it was given to

def test_unknown_option_shows_the_commands_usage():
    proc = ratc("compile", "examples/llama.py", "--preset", "tiny", "--clusers", "8")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("usage: ratc compile ")
    assert proc.stderr.endswith("ratc compile: error: unrecognized arguments: --clusers 8\n")
    assert "usage: ratc [-h]" not in proc.stderr


def test_unknown_option_before_the_command_shows_the_top_level_usage():
    proc = ratc("--bogus", "passes")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("usage: ratc [-h] [--version]")
    assert proc.stderr.endswith("ratc: error: unrecognized arguments: --bogus\n")


# 2. python -m ratc

def test_python_m_ratc_is_the_ratc_command(tmp_path):
    proc = ratc("--version", module="ratc")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith(f"ratc {__version__} (torch ")
    proc = ratc("opt", str(tmp_path / "missing.ir"), module="ratc")
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"ratc: error: {tmp_path / 'missing.ir'}: no such file\n"


# 3. every file written on request is announced on stderr, stdout untouched

def test_kernel_and_asm_say_what_they_wrote(tmp_path, capsys):
    rasm, canonical = tmp_path / "k.rasm", tmp_path / "c.rasm"
    assert run_cli(capsys, "kernel", "gemm", "64", "64", "64", "-o", rasm) == (
        0, "", f"wrote {rasm}: kernel gemm_64x64x64_f16\n")
    assert rasm.read_text().strip()
    assert run_cli(capsys, "asm", rasm, "-o", canonical) == (
        0, "", f"wrote {canonical}: kernel gemm_64x64x64_f16 in canonical form\n")
    code, out, err = run_cli(capsys, "kernel", "gemm", "64", "64", "64")     # to stdout: nothing said
    assert (code, err) == (0, "") and out == rasm.read_text()


def test_opt_says_what_it_wrote_and_keeps_stdout_for_ir(tmp_path, capsys):
    src, dst = tmp_path / "p.ir", tmp_path / "o.ir"
    src.write_text((GOLDEN / "life" / "tiny_p2_d2_z2_fsr.all.expected").read_text())
    assert run_cli(capsys, "opt", src, "-p", "verify", "-o", dst) == (
        0, "", f"wrote {dst}: the module after -p 'verify'\n")
    assert run_cli(capsys, "opt", src, "-o", dst) == (0, "", f"wrote {dst}: the module as parsed (no passes)\n")
    code, out, err = run_cli(capsys, "opt", src, "-p", "verify")
    assert (code, err) == (0, "") and out == dst.read_text()


def test_run_says_it_wrote_the_trace(program, tmp_path, capsys):
    trace = tmp_path / "step.json"
    code, out, err = run_cli(capsys, "run", program, "--trace", trace)
    assert code == 0
    tasks = int(re.search(r"^simulated (\d+) tasks on", out, re.M)[1])
    assert err == f"wrote {trace}: Chrome trace of {tasks} tasks (open it in Perfetto)\n"
    assert json.loads(trace.read_text())["traceEvents"]
    code, out, err = run_cli(capsys, "run", program, "--json", "--trace", trace)
    assert code == 0 and json.loads(out)["results"]["tasks"] == tasks      # stdout: the JSON only
    assert err == f"wrote {trace}: Chrome trace of {tasks} tasks (open it in Perfetto)\n"


def test_run_and_plan_reports_in_files_are_announced_and_a_trace_can_go_to_stdout(program, tmp_path, capsys):
    report = tmp_path / "run.txt"
    code, out, err = run_cli(capsys, "run", program, "-o", report)
    assert (code, out) == (0, "") and err == f"wrote {report}: the simulation's report (text)\n"
    assert report.read_text().startswith("tiny on 4 clusters")
    code, out, err = run_cli(capsys, "run", program, "-o", report, "--trace", "-")
    assert code == 0 and json.loads(out)["traceEvents"]           # stdout: the trace only
    code, _, err = run_cli(capsys, "run", program, "--trace", "-")
    assert code == 1 and "--trace - writes the trace to stdout, where the report goes too" in err
    assert not (Path.cwd() / "-").exists()
    plan = tmp_path / "plan.txt"
    code, out, err = run_cli(capsys, "plan", "--preset", "tiny", "--clusters", "4", "--global-batch", "16",
                             "-o", plan)
    assert (code, out) == (0, "") and err.startswith(f"wrote {plan}: the plan (text, top 5)\n")


def test_train_says_what_it_wrote(tmp_path, capsys):
    program, csv = tmp_path / "exec.ir", tmp_path / "loss.csv"
    code, out, err = run_cli(capsys, "train", LLAMA, "--preset", "tiny", "--steps", "1", "--no-reference",
                             "--emit-program", program, "--csv", csv)
    assert code == 0
    assert err == (f"wrote {program}: the executed life program (P=1 D=1 Z=0 fsr state-pipeline=on M=4 b=2)\n"
                   f"wrote {csv}: losses of 1 step\n")
    assert "wrote" not in out and "life.pipeline" in program.read_text()
    assert csv.read_text().count("\n") == 2


# 4. the out-of-memory report lists the largest live values only

def test_out_of_memory_message_lists_the_eight_largest():
    from ratc.vm.system.memory import OutOfMemory

    live = {f"v{i}": 1000 * (i + 1) for i in range(11)}
    oom = OutOfMemory(0, 0, 3, 1e9, 10_000, "0F1", live)
    assert str(oom).split("\n")[1:] == [
        "live values:",
        *(f"  {f'v{i}':40s} {i + 1}.00 KB" for i in range(10, 2, -1)),
        "  ... and 3 more (6.00 KB)"]
    assert len(oom.as_dict()["live"]) == 11          # --json keeps every value
    small = OutOfMemory(0, 0, 3, 1e9, 10, "0F1", {"a": 20, "b": 10})
    assert str(small).split("\n")[1:] == ["live values:", f"  {'a':40s} 20 B", f"  {'b':40s} 10 B"]


def test_run_out_of_memory_is_capped_and_hints_at_no_memory_limit(program, tmp_path, capsys):
    from ratc.units import format_bytes

    small = tmp_path / "small.toml"
    small.write_text((ROOT / "ratc/platform/profiles/mt3000.toml").read_text()
                     .replace('memory_budget = "20GB"', 'memory_budget = "4MB"'))
    argv = ["run", program, "--platform", small, "--plan", "P=2,D=2,A=4,full"]
    code, out, _ = run_cli(capsys, *argv, "--json")
    assert code == 1
    live = [(v["value"], v["bytes"]) for v in json.loads(out)["out_of_memory"]["live"]]
    assert len(live) > 8
    code, out, err = run_cli(capsys, *argv)
    assert (code, out) == (1, "")
    lines = err.rstrip("\n").split("\n")
    assert lines[0].startswith("ratc: error: out of memory on stage 0 (replica 0)")
    assert lines[1:] == [
        "live values:",
        *(f"  {name:40s} {format_bytes(n)}" for name, n in live[:8]),
        f"  ... and {len(live) - 8} more ({format_bytes(sum(n for _, n in live[8:]))})",
        f"`ratc run {program} --plan P=2,D=2,A=4,full --platform {small} --no-memory-limit` runs it anyway "
        "and reports each stage's peak memory"]
    code, out, _ = run_cli(capsys, *argv, "--no-memory-limit")
    assert code == 0 and "per-stage peak memory: s0 " in out


# 5. help texts

def test_run_kernel_help_names_both_kernel_kinds():
    text = option_help("run", "--kernel")
    assert "GEMM kernels" not in text
    assert text.startswith("instead of simulating, run the kernels one task calls (GEMM and attention-backward")


def test_mode_help_says_the_default_and_what_each_mode_does():
    assert option_help("asm", "--mode") == (
        "with --run: full (default) executes every DSP's instructions with real numerics (the DDR buffers "
        "hold results); timing counts cycles, bundles and traffic without computing any value (fast)")
    assert option_help("kernel", "--mode") == (
        "with --run: full executes every DSP's instructions with real numerics (the DDR buffers hold "
        "results); timing (default) counts cycles, bundles and traffic without computing any value (fast)")
    assert subparser("asm").get_default("mode") == "full" and subparser("kernel").get_default("mode") == "timing"


def test_kernel_report_says_which_mode_ran(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "kernel", "gemm", "32", "32", "32", "--run")
    assert code == 0
    lines = out.split("\n")
    assert lines[1].startswith("Platform:") and lines[2] == "Mode:                timing (cycles only, no values)"
    rasm = tmp_path / "k.rasm"
    run_cli(capsys, "kernel", "gemm", "32", "32", "32", "-o", rasm)
    code, out, _ = run_cli(capsys, "asm", rasm, "--run")
    assert code == 0 and out.split("\n")[2] == "Mode:                full (real numerics)"


# 6. benchmark scripts describe themselves in whole sentences

BENCHMARKS = sorted((ROOT / "benchmarks").rglob("*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_benchmark_description_is_a_whole_sentence(script):
    source = script.read_text()
    assert "splitlines()[0]" not in source, "a docstring's first line may stop mid-sentence"
    doc = ast.get_docstring(ast.parse(source), clean=False)
    assert doc, script
    assert doc.split("\n\n")[0].rstrip().endswith((".", ")", ".)")), doc.split("\n\n")[0]


@pytest.mark.parametrize("script, ending", [
    ("benchmarks/paper/scaling.py", "the planner's choice at each size, run on the system VM."),
    ("benchmarks/paper/seq_sweep.py", "sequence lengths 512-4096, the planner's choice at each length."),
])
def test_benchmark_help_shows_the_whole_description(script, ending):
    proc = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    description = " ".join(proc.stdout.split("\n\n")[1].split())
    assert description.endswith(ending)


# 7. wording

def test_run_summary_counts_in_the_singular_and_plural(program, capsys):
    code, out, _ = run_cli(capsys, "run", program)
    assert code == 0
    assert re.search(r"^simulated \d+ tasks on 1 stage x 4 replicas \(by symmetry\)$", out, re.M), out
    # the prediction in the step time's own units
    step = re.search(r"^step time +([0-9.]+ [mun]?s) ", out, re.M)[1]
    assert re.search(rf"^planner \(Eq. 12\) predicted [0-9.]+ {step.split()[1]}; error", out, re.M), out


@pytest.mark.parametrize("text, where, what", [
    ("", "1:1", ""),
    ("  \n\n", "1:3", " (only whitespace)"),
    ("// nothing here\n", "1:16", " (only comments)"),
])
def test_empty_ir_says_it_is_empty(text, where, what):
    from ratc.ir import parse_module

    with pytest.raises(LocatedError) as info:
        parse_module(text, "f.ir")
    assert str(info.value).split("\n")[0] == f"f.ir:{where}: error: empty input{what}: expected a module ('module {{ ... }}')"


def test_empty_ir_file_on_the_command_line(tmp_path, capsys):
    empty = tmp_path / "empty.ir"
    empty.write_text("")
    code, out, err = run_cli(capsys, "opt", empty)
    assert (code, out) == (1, "")
    assert err.startswith(f"{empty}:1:1: error: empty input: expected a module ('module {{ ... }}')\n")
    truncated = tmp_path / "t.ir"
    truncated.write_text("module {\n")       # not empty: still the missing '}'
    code, _, err = run_cli(capsys, "opt", truncated)
    assert code == 1 and "unexpected end of input (missing '}'?)" in err


# 9. another platform than the program's

def test_run_on_another_platform_warns_once(program, capsys):
    config = json.loads((program / "manifest.json").read_text())["meta"]["config"]
    code, _, err = run_cli(capsys, "run", program, "--platform", "a800")
    assert code == 0
    assert err == (f"ratc run: warning: the program was compiled for mt3000; simulating it on a800 keeps its "
                   f"kernel cycle counts from mt3000 (at a800's clock); --plan {config} recompiles it for a800\n")
    assert run_cli(capsys, "run", program, "--platform", "mt3000")[2] == ""
    # a platform file that keeps the name but changes a number is another machine too
    from ratc.platform import load_platform
    edited = program.parent / "mt3000_slow.toml"
    edited.write_text(load_platform("mt3000").text.replace('ddr_bandwidth = "30GB/s"', 'ddr_bandwidth = "20GB/s"'))
    code, _, err = run_cli(capsys, "run", program, "--platform", edited)
    assert code == 0 and err.startswith("ratc run: warning: the program was compiled for mt3000 (its platform.toml); "
                                        f"simulating it on mt3000 ({edited})")
    # --plan recompiles for the platform given: its kernels are that platform's
    assert run_cli(capsys, "run", program, "--platform", "a800", "--plan", config)[2] == ""


# 10. plan text with sub-second step times

def test_plan_text_of_a_small_model_shows_units(capsys):
    code, out, _ = run_cli(capsys, "plan", "--preset", "tiny", "--clusters", "4", "--global-batch", "16", "--explain")
    assert code == 0
    assert "0.00 s" not in out and "a tie within 0.01 s" not in out
    rows = [line for line in out.split("\n") if re.match(r" ?\d+\. P=", line)]
    assert len(rows) == 5
    for row in rows:
        assert re.search(r" \d+\.\d{3} (ms|us)   +\d+\.\d tok/s", row), row
    assert re.search(r"^    T_1F1B \d+\.\d{3} (ms|us) \+ E_comm \d+\.\d+ (ms|us|ns) \+ ", out, re.M), out
    code, text, _ = run_cli(capsys, "plan", "--preset", "tiny", "--clusters", "4", "--global-batch", "16", "--json")
    assert code == 0 and all(isinstance(ev["step_time_s"], float) for ev in json.loads(text)["top"])


def test_plan_times_of_a_second_or_more_print_as_before():
    from ratc.planner.report import SECONDS, Times

    real, small = Times(117.13), Times(0.0027)
    for times in (SECONDS, real):           # a real model's plan: seconds, two decimals, as ever
        assert (times(117.134), times(0.09, False), times.column(117.134), times.delta(0.7712)) == (
            "117.13 s", "0.09", "    117.13 s", "+0.77 s")
        assert times.tie == 0.005
    assert (small(0.002714), small(1.5), small.column(0.002714), small.column(2.5), small.delta(0.000472)) == (
        "2.714 ms", "1.50 s", "    2.714 ms", "      2.50 s", "+472.000 us")


def test_plan_text_of_a_real_model_keeps_its_format(capsys):
    code, out, _ = run_cli(capsys, "plan", "--preset", "llama2-7b", "--clusters", "8", "--global-batch", "32")
    assert code == 0
    assert re.search(r"^ 1\. P=\S+ +\d+\.\d\d s +\d+\.\d tok/s  peak ", out, re.M), out
    assert re.search(r"^    T_1F1B \d+\.\d\d s \+ E_comm \d+\.\d\d \+ E_upd \d+\.\d\d \+ E_pref \d+\.\d\d "
                     r"\+ E_rec \d+\.\d\d = \d+\.\d\d s$", out, re.M), out


def test_run_plan_keeps_the_programs_memory_budget(tmp_path, capsys):
    """`run --plan` recompiles under the budget the program was compiled with (--memory-budget
    20MB here), as `compile --plan` does, --platform naming the same machine too; another
    machine brings its own budget."""
    out = tmp_path / "small"
    assert main(["compile", LLAMA, "--preset", "tiny", "--clusters", "4", "--global-batch", "64",
                 "--memory-budget", "20MB", "--no-run", "-o", str(out)]) == 0
    big = "P=1,D=4,Z=0,b=16,A=1,Full,deadline"
    code, _, err = run_cli(capsys, "run", out, "--plan", big)
    assert code == 1 and "live > budget 20.00 MB" in err
    code, _, err = run_cli(capsys, "run", out, "--plan", big, "--platform", "mt3000")
    assert code == 1 and "live > budget 20.00 MB" in err
    code, _, err = run_cli(capsys, "run", out, "--plan", big, "--platform", "a800")
    assert code == 0, err

"""`ratc compile` end to end: trace, plan, schedule, program directory, VM run, tamper checks."""

import io
import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from ratc.cli.main import main
from ratc.ir import parse_module, verify
from ratc.program import load_program

EXAMPLE = str(Path(__file__).parents[1] / "examples" / "llama.py")
TINY = ["compile", EXAMPLE, "--preset", "tiny", "--clusters", "4", "--global-batch", "16"]


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("prog") / "tiny"
    assert main(TINY + ["-o", str(out), "--no-run"]) == 0
    return out


def test_program_directory_holds_the_whole_program(program):
    prog = load_program(program)
    kernels = prog.names("kernels/")
    assert set(prog.names()) - set(kernels) == {"model.ir", "program.ir", "plan.json", "platform.toml",
                                                "schedule.txt", "kernels.json"}
    assert prog.meta["exec_profile"] == "kernel-vm"
    life = parse_module(prog.text("program.ir"), "program.ir")
    verify(life)
    assert "life.pipeline" in prog.text("program.ir") and "graph.layer" in prog.text("model.ir")
    plan = json.loads(prog.text("plan.json"))
    assert prog.meta["config"] == plan["top"][0]["label"]
    # Each stage's order is printed in action notation, after its legend.
    schedule = prog.text("schedule.txt")
    assert schedule.startswith("# ") and "\nstage 0: 0F0@0" in schedule
    # The manifest records the whole command as typed.
    assert prog.meta["command"] == "ratc " + shlex.join(TINY + ["-o", str(program), "--no-run"])


def test_compile_dumps_replay_with_their_reproduce_lines(tmp_path, capsys):
    """Each --dump-dir file says how to remake it from the dumped input; doing so gives its IR."""
    dumps = tmp_path / "dumps"
    assert main(TINY + ["-o", str(tmp_path / "p"), "--no-run", "--dump-dir", str(dumps)]) == 0
    last = sorted(dumps.glob("*_after_*.ir"))[-1]
    repro = last.read_text().splitlines()[1]
    assert repro.startswith(f"// reproduce: ratc opt {dumps / '00_input.ir'} -p ")
    argv = shlex.split(repro.removeprefix("// reproduce: ratc "))
    out = tmp_path / "again.ir"
    assert main(argv + ["-o", str(out)]) == 0
    body = lambda text: "\n".join(line for line in text.splitlines() if not line.startswith("//"))  # noqa: E731
    assert body(out.read_text()) == body(last.read_text()) == body((tmp_path / "p" / "program.ir").read_text())


def test_compile_is_deterministic(program, tmp_path):
    again = tmp_path / "again"
    assert main(TINY + ["-o", str(again), "--no-run"]) == 0
    for name in ("program.ir", "model.ir", "schedule.txt"):
        assert (again / name).read_bytes() == (program / name).read_bytes(), name


def test_run_simulates_and_compares_with_the_planner(program, capsys):
    assert main(["run", str(program), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["results"]["step_time_s"] > 0
    assert abs(out["prediction_error"]) < 0.02


def test_compile_then_run_and_report_in_one_command(program, tmp_path, capsys):
    """--report, --json and --trace-out hand the compiled program to `ratc run` and `ratc report`
    in the same process: the same results as running those commands on the directory."""
    out = tmp_path / "tiny"
    argv = TINY + ["-o", str(out), "--report", "--json", "--trace-out", str(tmp_path / "step.json")]
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    results = json.loads(stdout[:stdout.index("\n}\n") + 3])
    assert main(["run", str(program), "--json"]) == 0
    assert results == json.loads(capsys.readouterr().out)
    assert json.loads((tmp_path / "step.json").read_text())["traceEvents"]
    html = (out / "report.html").read_text()
    assert main(["report", str(out), "-o", str(tmp_path / "again.html")]) == 0
    assert (tmp_path / "again.html").read_text() == html


def test_compile_simulates_its_program_without_reading_its_ir_back(program, tmp_path, monkeypatch, capsys):
    """The module `ratc compile` holds is the one it wrote: its `ratc run` step takes it as it
    is (the other files are still checked), and reports what running the directory does."""
    import ratc.program_check as program_check

    def refuse(*args):
        raise AssertionError("compile parsed an IR file it had just written")
    monkeypatch.setattr(program_check, "_parse", refuse)
    assert main(TINY + ["-o", str(tmp_path / "tiny"), "--json"]) == 0
    compiled = json.loads(capsys.readouterr().out)
    monkeypatch.undo()
    assert main(["run", str(program), "--json"]) == 0
    assert compiled == json.loads(capsys.readouterr().out)


def test_run_with_the_programs_own_plan_changes_nothing(program, capsys):
    """`ratc run DIR --plan` recompiles with the program's execution profile (kernel-VM: with
    its kernels), so forcing the plan the program was compiled with gives its results."""
    config = load_program(program).meta["config"]
    assert main(["run", str(program), "--json"]) == 0
    own = json.loads(capsys.readouterr().out)
    assert main(["run", str(program), "--json", "--plan", config]) == 0
    assert json.loads(capsys.readouterr().out) == own
    assert main(["run", str(program), "--plan", config]) == 0
    forced = capsys.readouterr().out
    assert main(["run", str(program)]) == 0
    assert forced == capsys.readouterr().out


def test_kernels_and_their_calls(program, capsys):
    prog = load_program(program)
    table = json.loads(prog.text("kernels.json"))
    names = {e["kernel"] for e in table["kernels"]}
    assert {f"kernels/{n}.rasm" for n in names} == set(prog.names("kernels/"))
    # tiny: hidden 128, 4 heads of 32 and 2 KV heads (k/v project to 64), FFN 344, vocab 512,
    # sequence 64, 4 decoder layers. The compiled plan is full-save with b=4, A=1 on one stage:
    # 4 sequences per step. A matmul C[m,n] = A[m,k] B[k,n] runs its forward (m,n,k), the
    # input gradient (m,k,n) and the weight gradient (k,n,m); attention runs per head
    # Q K^T (64,64,32) and P V (64,32,64) forward and one attention-backward kernel, its
    # head_dim padded to the 64-lane vector width.
    plan = json.loads(prog.text("plan.json"))["top"][0]["config"]
    assert (plan["P"], plan["b"], plan["A"], plan["act"]) == (1, 4, 1, "full")
    per_layer = {(64, 128, 128): 2 + 2,           # q_proj, o_proj forward; their input gradients
                 (128, 128, 64): 2,               # q_proj, o_proj weight gradients
                 (64, 64, 128): 2, (64, 128, 64): 2, (128, 64, 64): 2,   # k_proj, v_proj
                 (64, 344, 128): 2 + 1,           # gate/up forward; down_proj input gradient
                 (64, 128, 344): 1 + 2,           # down_proj forward; gate/up input gradients
                 (128, 344, 64): 2, (344, 128, 64): 1,                   # weight gradients
                 (64, 64, 32): 4, (64, 32, 64): 4}                       # attention forward, per head
    want = {f"gemm_{m}x{n}x{k}_f16": 4 * 4 * c for (m, n, k), c in per_layer.items()}
    for m, n, k in ((64, 512, 128), (64, 128, 512), (128, 512, 64)):   # lm_head
        want[f"gemm_{m}x{n}x{k}_f16"] = 4
    want["attn_bwd_h4_s64_d64_kv2_f16"] = 4 * 4
    assert {e["kernel"]: e["calls_per_step"]["0"] for e in table["kernels"]} == want
    assert main(["run", str(program)]) == 0
    out = capsys.readouterr().out
    for name in names:
        assert name in out


def test_edited_kernel_is_refused(program, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(program, copy)
    rasm = sorted((copy / "kernels").glob("*.rasm"))[0]
    rasm.write_text(rasm.read_text() + "\n")
    assert main(["run", str(copy)]) == 1
    assert f"{rasm.name}: content does not match the manifest" in capsys.readouterr().err


def test_tampered_program_is_refused(program, tmp_path, capsys):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(program, copy)
    path = copy / "program.ir"
    path.write_text(path.read_text().replace("life.step_end", "life.step_end ", 1))
    assert main(["run", str(copy)]) == 1
    assert "does not match the manifest" in capsys.readouterr().err
    (copy / "program.ir").unlink()
    assert main(["run", str(copy)]) == 1
    assert "listed in the manifest is missing" in capsys.readouterr().err


def _edited_copy(program, tmp_path, name, edit):
    """A copy of the program with one file edited and the manifest's hash of it updated, so
    what reads the file sees the edit (the manifest check passes)."""
    import hashlib

    copy = tmp_path / "edited"
    shutil.copytree(program, copy)
    path = copy / name
    text = path.read_text()
    assert edit(text) != text, "the edit must change the file"
    path.write_text(edit(text))
    manifest = json.loads((copy / "manifest.json").read_text())
    if name in manifest["files"]:
        manifest["files"][name] = hashlib.sha256(path.read_bytes()).hexdigest()
        (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.parametrize("name, edit, message", [
    ("kernels.json", lambda t: "{not json", "kernels.json: malformed kernel table: not JSON"),
    ("kernels.json", lambda t: "[]", "malformed kernel table: expected an object with a 'kernels' list"),
    ("kernels.json", lambda t: json.dumps({"kernels": [{"kernel": "k"}]}),
         "malformed kernel table: kernels[0].cycles: None is not an integer in 1.."),
    ("manifest.json", lambda t: json.dumps({**json.loads(t), "files": []}), "malformed manifest: 'files' must map"),
    ("manifest.json", lambda t: json.dumps({**json.loads(t), "files": {"../x": "0"}}), "is not a plain relative path inside the program directory"),
    ("program.ir", lambda t: re.sub(r"(life.plan @plan \{A = \d+, )D = \d+", r"\1D = 0", t, count=1),
     "error: 'life.plan' D must be at least 1, got 0"),
    ("program.ir", lambda t: re.sub(r", P = \d+,", ", P = 0,", t, count=1), "error: 'life.plan' P must be at least 1, got 0"),
])
def test_edited_program_files_are_refused_by_name(program, tmp_path, capsys, name, edit, message):
    """Files that pass the manifest (its hash updated) but are not what ratc writes."""
    copy = _edited_copy(program, tmp_path, name, edit)
    assert main(["run", str(copy)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_a_plan_too_many_micro_batches_to_compile_is_refused_at_once(capsys):
    """The planner ranks any accumulation count; a program of more micro-batches than ratc
    compiles (16,384) is refused before it is built, with what to change."""
    import time

    from ratc.limits import MAX_MICRO_BATCHES

    # 4 clusters and micro-batches of at most 16 sequences: A >= batch / 64 micro-batches
    batch = 64 * (MAX_MICRO_BATCHES + 1)
    start = time.perf_counter()
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--clusters", "4", "--global-batch", str(batch), "--no-run"]) == 1
    err = capsys.readouterr().err
    assert f"every configuration that fits runs more than {MAX_MICRO_BATCHES} micro-batches per step" in err
    assert "--micro-batch" in err
    assert time.perf_counter() - start < 30
    # A forced plan reaches the compiler's own check.
    plan = f"P=1,D=4,Z=0,b=1,A={MAX_MICRO_BATCHES + 1},FSR"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--plan", plan, "--no-run"]) == 1
    err = capsys.readouterr().err
    assert f"micro-batches per step; ratc compiles programs of at most {MAX_MICRO_BATCHES}" in err


def test_compile_builds_the_fastest_plan_it_can(monkeypatch, tmp_path, capsys):
    """When the planner's fastest needs more micro-batches than ratc compiles, compile takes
    the fastest feasible plan within the limit, and says so."""
    from ratc.cli.main import build_parser
    from ratc.cli.plan import make_planner
    from ratc.cli.model_source import load_model
    from ratc import limits

    monkeypatch.setattr(limits, "MAX_MICRO_BATCHES", 8)
    # two stages: more micro-batches make a shorter pipeline bubble
    argv = ["compile", EXAMPLE, "--preset", "tiny", "--clusters", "2", "--pipeline", "2", "--global-batch", "64"]
    args = build_parser().parse_args(argv)
    ranked = make_planner(args, load_model(args)).plan(2, 64, pipeline=2).feasible
    assert ranked[0].cand.A > 8            # the premise: the planner's fastest is not compilable
    expect = next(e.cand for e in ranked if e.cand.A <= 8)
    out = tmp_path / "prog"
    assert main(argv + ["--no-run", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"the planner's fastest, {ranked[0].cand.label()}, runs A={ranked[0].cand.A}" in err
    assert f"compiling the fastest that it can, {expect.label()}" in err
    assert json.loads((out / "manifest.json").read_text())["meta"]["config"] == expect.label()


@pytest.mark.parametrize("extra, message", [
    (["--plan", "P=2,D=2,Z=2,b=3,A=3,FSR", "--global-batch", "16"], "trains 18 sequences per step (D x b x A), "
     "but --global-batch is 16"),
    (["--plan", ""], "--plan is empty"),
    (["-o", ""], "-o needs a path"),
])
def test_compile_refuses_contradictory_or_empty_options(extra, message, capsys):
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--clusters", "4", "--no-run", *extra]) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("edit, message", [
    (lambda t: re.sub(r"dur = [0-9.e+-]+", "dur = nan", t, count=1), "duration must be finite and not negative"),
    (lambda t: re.sub(r"tier = \[\"(\w+)\"", 'tier = ["eternal"', t, count=1), "tier must name long, medium"),
    # the pipeline repeats nothing of its plan (every reader takes P, A, Z from the plan)
    (lambda t: t.replace("life.pipeline @step {", "life.pipeline @step {M = 3, ", 1),
     "'life.pipeline' has unknown attribute 'M'"),
    # annotations the VM or the report read
    (lambda t: re.sub(r"(life.fwd\(.*?cycles = )\d+", r"\g<1>-5", t, count=1), "cycles must not be negative, got -5"),
    (lambda t: re.sub(r"buf = \[\d+\]", "buf = [999]", t, count=1), "names buffer 999, but the stage has"),
    (lambda t: re.sub(r"(life.pipeline @step \{.*?peak = )\[\d+\]", r"\g<1>[1, 2]", t),
     "'life.pipeline' peak needs one entry per stage (1), got 2"),
    (lambda t: re.sub(r"(life.stage @s0 \{.*?peak_at = )\d+", r"\g<1>9999", t), "peak_at 9999 is not an op of the stage"),
    (lambda t: re.sub(r"(life.kernel @attn_bwd\w* \{.*?shape = )\[[\d, ]+\]", r"\g<1>[64]", t),
     "kind attn_bwd takes a shape of 4 positive integers, got [64]"),
    (lambda t: re.sub(r"(life.stage @s0 \{.*?units = \[)0, ", r"\g<1>", t),
     "the stages' units must be its plan's 0..5 in order, got [1, 2, 3, 4, 5]"),
    (lambda t: re.sub(r"(life.kernel @attn_bwd\w* \{.*?shape = )\[[\d, ]+\]", r"\g<1>[4, 0, 64, 2]", t),
     "kind attn_bwd takes a shape of 4 positive integers, got [4, 0, 64, 2]"),
    (lambda t: re.sub(r"buf = \[\d+\]", "buf = [" + re.search(r"buffers = (\d+)", t).group(1) + "]", t, count=1),
     "names buffer"),
    (lambda t: t.replace("life.pipeline @step {", "life.pipeline @step {fsr = true, ", 1),
     "'life.pipeline' fsr = true needs act = \"fsr\", got \"full\""),
])
def test_verifier_refuses_values_no_pass_writes(program, tmp_path, capsys, edit, message):
    copy = _edited_copy(program, tmp_path, "program.ir", edit)
    assert main(["run", str(copy)]) == 1
    assert message in capsys.readouterr().err


def test_outputs_never_overwrite_the_programs_own_files(program, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(program, copy)
    link = tmp_path / "link.ir"
    link.symlink_to(copy / "schedule.txt")
    for argv in (["run", str(copy), "--trace", str(copy / "program.ir")],
                 ["report", str(copy), "-o", "program.ir"], ["report", str(copy), "-o", "manifest.json"],
                 # every command's outputs: ratc opt -o, through a symlink too, and a nested file
                 ["opt", str(copy / "program.ir"), "-p", "verify", "-o", str(copy / "manifest.json")],
                 ["opt", str(copy / "program.ir"), "-p", "verify", "-o", str(link)],
                 ["plan", "--preset", "tiny", "--clusters", "4", "--global-batch", "16", "-o",
                  str(next(copy.glob("kernels/*.rasm")))]):
        assert main(argv) == 1
        assert "would overwrite the program's own" in capsys.readouterr().err
    assert main(["run", str(copy), "--json"]) == 0           # still intact
    assert main(["opt", str(copy / "program.ir"), "-p", "verify", "-o", str(copy / "edited.ir")]) == 0


def _limits():
    from ratc.cli.run import MAX_STEPS
    from ratc.vm.system.life import MAX_EXPLICIT_REPLICAS as X
    return MAX_STEPS, X


@pytest.mark.parametrize("extra, message", [
    (["--steps", str(_limits()[0] + 1)], f"--steps must be 1..{_limits()[0]}"),
    (["--explicit-replicas", "--plan", f"P=1,D={2 * _limits()[1]},Z=2,b=1,A=1,Full,deadline"],
     f"D = {2 * _limits()[1]} data-parallel replicas: the VM simulates at most {_limits()[1]} with --explicit-replicas"),
])
def test_run_refuses_simulations_it_cannot_hold(program, extra, message, capsys):
    assert main(["run", str(program), *extra]) == 1
    assert message in capsys.readouterr().err


def test_compile_needs_clusters(capsys):
    assert main(["compile", EXAMPLE, "--preset", "tiny"]) == 1
    assert "give --clusters" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["no/such/model.py"], "no/such/model.py: no such file"),
    (["--hf-config", "no/such/config.json"], "no/such/config.json: no such file"),
    ([EXAMPLE, "--hf-config", "config.json"], "not both"),
    (["--hf-config", "config.json", "--preset", "tiny"], "--preset applies to model files"),
    ([], "no model"),
])
def test_compile_names_the_bad_source_before_the_missing_clusters(argv, message, capsys):
    """What the user typed wrong about the model comes first, even with --clusters missing too."""
    assert main(["compile", *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and "--clusters" not in err


def test_forced_plan_over_budget_reports_out_of_memory(tmp_path, capsys):
    out = tmp_path / "oom"
    argv = TINY + ["-o", str(out), "--memory-budget", "2MB", "--plan", "P=1,D=4,Z=0,b=4,A=1,Full,deadline"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "out of memory" in err.lower() and "stage 0" in err


def test_kernel_spot_check_runs_a_task_against_numpy(program, capsys):
    assert main(["run", str(program), "--kernel", "0:F0"]) == 0
    out = capsys.readouterr().out
    table = json.loads(load_program(program).text("kernels.json"))
    # Stage 0 holds every unit, so F0 and B0 together run every kernel of the program.
    assert main(["run", str(program), "--kernel", "0:B0"]) == 0
    out += capsys.readouterr().out
    checked = {line.split()[0] for line in out.splitlines() if line.endswith(" ok")}
    assert checked == {e["kernel"] for e in table["kernels"]}
    assert "MISMATCH" not in out
    # a layer or a range of layers as schedule.txt names them
    assert main(["run", str(program), "--kernel", "0:F0@2"]) == 0
    assert "task 0:F0@2: stage 0, units [2]" in capsys.readouterr().out
    assert main(["run", str(program), "--kernel", "0:0B0@3-1"]) == 0
    assert "stage 0, units [1, 2, 3]" in capsys.readouterr().out
    for bad in ("0:G1", "0:G@1", "0:F0@1#2", "F0"):
        assert main(["run", str(program), "--kernel", bad]) == 1
        assert "expected STAGE:TASK" in capsys.readouterr().err
    assert main(["run", str(program), "--kernel", "0:1F0"]) == 1
    assert "names stage 1, not 0" in capsys.readouterr().err
    assert main(["run", str(program), "--kernel", "0:F0", "--json", "--plan", "P=1,D=4,A=1"]) == 1
    assert "--json, --plan apply only to the simulation" in capsys.readouterr().err
    assert main(["run", str(program), "--kernel", "3:F0"]) == 1
    assert "stages 0..0" in capsys.readouterr().err


def test_attention_spot_check_detects_wrong_gradients(monkeypatch):
    import numpy as np

    from ratc.codegen.attention import generate_attention_backward
    from ratc.codegen.spot_check import check_kernel
    from ratc.platform import load_platform
    from ratc.vm import kernel_vm

    platform = load_platform("mt3000")
    kernel = generate_attention_backward(platform, 2, 64, 64, 1)
    assert check_kernel(kernel.program, platform, (2, 64, 64, 1), seed=3, kind="attn_bwd").ok
    real = kernel_vm.run_program

    def scaled_dk(program, platform, inputs, mode):
        result = real(program, platform, inputs, mode)
        result.ddr["dK"] = result.ddr["dK"] * np.float16(1.1)
        return result

    monkeypatch.setattr(kernel_vm, "run_program", scaled_dk)
    assert not check_kernel(kernel.program, platform, (2, 64, 64, 1), seed=3, kind="attn_bwd").ok


def test_kernel_spot_check_detects_wrong_numbers(monkeypatch):
    import numpy as np

    from ratc.codegen.gemm import generate_gemm
    from ratc.codegen.spot_check import check_kernel
    from ratc.platform import load_platform
    from ratc.vm import kernel_vm

    platform = load_platform("mt3000")
    kernel = generate_gemm(platform, 32, 16, 24)
    assert check_kernel(kernel.program, platform, (32, 16, 24), seed=1).ok
    real = kernel_vm.run_program

    def off_by_one(program, platform, inputs, mode):
        result = real(program, platform, inputs, mode)
        result.ddr["C"] = result.ddr["C"] + np.float16(1)
        return result

    monkeypatch.setattr(kernel_vm, "run_program", off_by_one)
    assert not check_kernel(kernel.program, platform, (32, 16, 24), seed=1).ok


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self):
        return True


def test_compile_shows_its_phases_on_a_terminal(tmp_path, monkeypatch, capsys):
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(TINY + ["-o", str(tmp_path / "p")]) == 0
    shown = term.getvalue()
    passes = ["lower-to-life", "schedule-1f1b", "codegen", "state-pipeline", "update-prefetch", "fsr", "memory-plan"]
    at = [shown.index(f"pass {i}/7, {name} ...") for i, name in enumerate(passes, 1)]
    assert at == sorted(at)
    for text in (f"tracing {EXAMPLE} ...", f"writing {tmp_path / 'p'} ...", "on the system VM ..."):
        assert text in shown
    assert shown.index("tracing") < at[0] < shown.index("writing") < shown.index("on the system VM")


def test_no_status_line_over_ir_dumps(tmp_path, monkeypatch):
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(TINY + ["-o", str(tmp_path / "p"), "--no-run", "--print-ir-after-all"]) == 0
    shown = term.getvalue()
    assert "IR Dump After memory-plan" in shown and "pass 1/7" not in shown
    assert shown.index("tracing") < shown.index("IR Dump After lower-to-life")


def test_no_status_lines_off_a_terminal(tmp_path, capsys):
    assert main(TINY + ["-o", str(tmp_path / "p"), "--no-run"]) == 0
    err = capsys.readouterr().err
    assert " ..." not in err and "\r" not in err
    assert err == f"compiled tiny: {json.loads((tmp_path / 'p' / 'plan.json').read_text())['top'][0]['label']} " \
                  f"-> {tmp_path / 'p'}\nwrote {tmp_path / 'p'}; simulate it with `ratc run {tmp_path / 'p'}`\n"

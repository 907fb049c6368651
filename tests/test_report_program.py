"""`ratc report OUTDIR` on a compiled program directory, and the report of the bundled
LLaMA-2-7B example in headless Chromium, offline, with every image loaded (skipped where
Chromium, Debian package `chromium`, is not installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ratc.cli.main import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr",
         # Offline: no host name resolves, so any request the page made would fail and be counted.
         "--host-resolver-rules=MAP * ~NOTFOUND",
         # Let the page's load handler run before the DOM is dumped.
         "--virtual-time-budget=10000"]


def compiled_program(outdir, preset: str, seq_len: int, clusters: int, batch: int):
    """A program directory as `ratc compile --exec-profile paper-table5` writes it: the graph
    IR and the scheduled life program of the planner's best candidate."""
    from ratc.frontend.presets import trace_preset
    from ratc.ir import print_module
    from ratc.frontend.graph_ir import module_from_profile
    from ratc.planner.search import Planner
    from ratc.platform import load_platform
    from ratc.program import write_program
    from ratc.vm.system.driver import compile_candidate

    profile = trace_preset(preset, seq_len)
    planner = Planner(profile, load_platform("mt3000"))
    best = planner.plan(clusters, batch).best.cand
    files = {"model.ir": print_module(module_from_profile(profile)),
             "program.ir": print_module(compile_candidate(profile, best, planner.platform, planner))}
    write_program(outdir, files)
    return best


EXAMPLE = str(Path(__file__).parents[1] / "examples" / "llama.py")


def test_report_of_a_compiled_program(tmp_path, capsys):
    out = tmp_path / "prog"
    best = compiled_program(out, "tiny", 64, 4, 16)
    assert main(["report", str(out), "--simulate-top", "2"]) == 0
    captured = capsys.readouterr()
    summary = captured.out
    assert len(summary.splitlines()) <= 24
    assert f"plan                     {best.label()}" in summary
    # stdout is the same for the same program (how long it took goes to stderr)
    assert re.fullmatch(r"ratc report: \d+\.\d s\n", captured.err)
    assert main(["report", str(out), "--simulate-top", "2"]) == 0
    assert capsys.readouterr().out == summary
    page = (out / "report.html").read_text()
    assert {p.name for p in out.iterdir()} >= {"report.html", "pipeline.png", "memory.png", "breakdown.png",
                                               "manifest.json"}
    assert page.count("<img ") == 3
    assert "<h2>Kernels</h2>" not in page      # this program's tasks are costed without generated kernels
    # the compiled plan is the planner's best, and it was simulated
    row = re.search(r'<tr class="best">(.*?)</tr>', page).group(1)
    assert best.label() in row and "not simulated" not in row
    # the program directory is still a valid program after the report was added to it, and
    # the report's files are listed as ratc's, so recompiling into it may replace them
    from ratc.program import check_replaceable, load_program
    load_program(out)
    derived = json.loads((out / "manifest.json").read_text())["derived"]
    assert set(derived) == {p.name for p in out.iterdir()} - {"manifest.json", "model.ir", "program.ir"}
    check_replaceable(out)


def test_report_lists_the_programs_kernels(tmp_path, capsys):
    """The kernels table is the program's kernels.json (as `ratc compile` writes it), each
    kernel's calls on its busiest stage and their share of the step `ratc run` simulates."""
    out = tmp_path / "prog"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--clusters", "4", "--global-batch", "16",
                 "--no-run", "-o", str(out)]) == 0
    table = json.loads((out / "kernels.json").read_text())["kernels"]
    assert {e["kind"] for e in table} == {"gemm", "attn_bwd"}
    capsys.readouterr()
    assert main(["run", str(out), "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["results"]["step_time_s"]
    assert main(["report", str(out), "--simulate-top", "0"]) == 0
    page = (out / "report.html").read_text()
    section = page[page.index("<h2>Kernels</h2>"):]
    rows = re.findall(r"<tr>(.*?)</tr>", section[:section.index("</table>")], re.S)
    cells = [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r) for r in rows]
    assert cells[0] == ["kernel", "shape", "cycles", "MAC utilization", "DDR bytes", "calls per step",
                        "share of step"]
    assert len(cells) == 1 + len(table)
    for e, row in zip(table, cells[1:]):
        calls = max(e["calls_per_step"].values())
        assert row[0] == e["kernel"] and row[2] == f"{e['cycles']:,}"
        assert row[3] == f"{100 * e['mac_utilization']:.2f} %"
        assert row[5] == f"{calls:,}" and row[6] == f"{100 * calls * e['seconds'] / step:.2f} %"
        heads_or_m, seq_or_n, d_or_k, *kv = e["shape"]
        assert row[1] == (f"{heads_or_m}x{seq_or_n}x{d_or_k}" if e["kind"] == "gemm" else
                          f"heads {heads_or_m}, seq {seq_or_n}, head dim {d_or_k}, kv heads {kv[0]}")


def test_report_uses_the_programs_own_platform_file(tmp_path, capsys):
    """A program compiled for a platform file (not a shipped profile) carries it: the report
    reads its platform.toml, as `ratc run` does, not the shipped profile of that name."""
    from ratc.platform import load_platform

    text = load_platform("mt3000").text.replace('name = "mt3000"', 'name = "lab-mt3000"', 1)
    text = text.replace('memory_budget = "20GB"', 'memory_budget = "24GB"', 1)
    assert 'name = "lab-mt3000"' in text and '"24GB"' in text
    plat = tmp_path / "lab.toml"
    plat.write_text(text)
    out = tmp_path / "prog"
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--clusters", "4", "--global-batch", "16",
                 "--platform", str(plat), "--no-run", "-o", str(out)]) == 0
    plat.unlink()                      # the program alone must suffice
    capsys.readouterr()
    assert main(["run", str(out), "--json"]) == 0
    step = json.loads(capsys.readouterr().out)["results"]["step_time_s"]
    assert main(["report", str(out), "--simulate-top", "0"]) == 0
    summary = capsys.readouterr().out
    assert "4 x lab-mt3000 clusters, budget 24.00 GB per cluster" in summary
    from ratc.units import format_time
    assert f"simulated step           {format_time(step)}" in summary


def test_report_needs_a_program_or_a_model(tmp_path, capsys):
    assert main(["report", str(tmp_path / "empty")]) == 1
    err = capsys.readouterr().err
    assert "holds no compiled program" in err and "--global-batch" in err
    out = tmp_path / "prog"
    compiled_program(out, "tiny", 64, 4, 16)
    assert main(["report", str(out), "--preset", "tiny"]) == 1
    assert "holds a compiled program" in capsys.readouterr().err
    assert main(["report", str(out), "--pipeline", "3"]) == 1     # tiny on 4 clusters: P in 1, 2, 4
    assert "pipeline degree P=3 has no ratrain candidate" in capsys.readouterr().err
    (out / "model.ir").write_text("edited\n")
    assert main(["report", str(out)]) == 1
    assert "does not match the manifest" in capsys.readouterr().err


def test_plan_and_report_in_one_go_reports_what_compile_report_does(tmp_path, capsys):
    """Without a program the report plans with compile's kernel-VM profile: the same plan,
    the same simulated step and a kernels table as `ratc compile --report`."""
    def rows(text):
        return {k: v for k, v in (line.split(None, 1) for line in text.splitlines()
                                  if line.startswith(("  plan ", "  simulated step", "  predicted step")))}

    common = ["--preset", "tiny", "--clusters", "4", "--global-batch", "16"]
    assert main(["report", str(tmp_path / "one"), *common]) == 0
    one = capsys.readouterr().out
    assert main(["compile", *common, "-o", str(tmp_path / "two"), "--report"]) == 0
    two = capsys.readouterr().out
    assert rows(one) and rows(one) == rows(two)
    assert "Kernels" in (tmp_path / "one" / "report.html").read_text()
    assert main(["report", str(tmp_path / "three"), *common, "--exec-profile", "paper-table5"]) == 0
    assert "Kernels" not in (tmp_path / "three" / "report.html").read_text()


def dom_check(dom: str, name: str) -> str:
    m = re.search(rf'id="ratc-image-check"[^>]*\b{name}="([^"]*)"', dom)
    assert m, f"the page's self-check did not run ({name} missing)"
    return m.group(1)


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
def test_llama2_7b_report_opens_offline_and_every_image_loads(tmp_path):
    out = tmp_path / "llama2-7b"
    compiled_program(out, "llama2-7b", 2048, 8, 32)
    assert main(["report", str(out), "--simulate-top", "1"]) == 0
    proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                           (out / "report.html").as_uri()], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert int(dom_check(dom, "data-total")) == 3
    assert dom_check(dom, "data-loaded") == "3"
    assert dom_check(dom, "data-errors") == ""
    assert dom_check(dom, "data-fetched") == "0"
    assert "Uncaught" not in proc.stderr


def test_the_plan_records_its_layer_balance():
    """life.plan names the balance when it is not `time` (the default); Plan.from_ir reads it back."""
    from ratc.frontend.presets import trace_preset
    from ratc.lifecycle.lowering import find_plan
    from ratc.platform import load_platform
    from ratc.step.config import Candidate
    from ratc.step.plan import Plan
    from ratc.vm.system.driver import compile_candidate

    for balance in ("time", "memory"):
        cand = Candidate(P=2, D=2, T=1, Z=2, b=1, A=4, act="fsr", pref="deadline", balance=balance)
        plan_op = find_plan(compile_candidate(trace_preset("tiny", 64), cand, load_platform("mt3000")))
        assert Plan.from_ir(plan_op).config == cand
        assert plan_op.attributes.get("balance") == (None if balance == "time" else "memory")

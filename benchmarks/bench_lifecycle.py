"""Benchmark the lifecycle pipeline: compile time of LLaMA-2-70B at P=48 (A=16), and memory-plan
peaks against the planner's Eq. 9 on the paper's Table 2 / Table 3 configurations.

    python benchmarks/bench_lifecycle.py [--runs 5] [--no-memory-table] [--vm] [--doc docs/lifecycle.md]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "paper"))

import table2  # noqa: E402
import table3  # noqa: E402

from ratc.frontend import trace_preset  # noqa: E402
from ratc.lifecycle.compile import default_pipeline  # noqa: E402
from ratc.lifecycle.lowering import find_pipeline  # noqa: E402
from ratc.lifecycle.plan_ir import plan_module  # noqa: E402
from ratc.passes import PassContext, PassManager, parse_pipeline  # noqa: E402
from ratc.step.config import Candidate, parse_config  # noqa: E402
from ratc.planner.search import Planner  # noqa: E402
from ratc.platform import load_platform  # noqa: E402

MARK = "<!-- memory table: python benchmarks/bench_lifecycle.py --vm --doc docs/lifecycle.md -->"


def paper_configs() -> list:
    """(row, model, candidate) for the paper's own configurations, read from the paper-table scripts.

    Table 2's rows give no A: its 4096 sequences per step over D replicas at b = 1. Full-save has
    no configuration in the paper (out of memory); it is RATrain's with full-save activations.
    """
    rows = []
    for model, (_, cfg, _, _, _) in table3.PAPER.items():
        rows.append(("Table 3", model, parse_config(cfg)))
    for model, strategies in table2.PAPER.items():
        batch = table2.implied_batch(strategies)
        for strategy, (cfg, *_rest) in strategies.items():
            full_save = cfg == "-"
            cfg = strategies["ratrain"][0] if full_save else cfg
            D = parse_config(cfg + ",A=1").D
            cand = parse_config(f"{cfg},A={batch // D}")
            pref = "bulk" if strategy == "tuned-pp-dp-zero" else "deadline"
            rows.append((f"Table 2 {strategy}", model,
                         dataclasses.replace(cand, pref=pref, act="full" if full_save else cand.act)))
    return rows


def chosen_configs(platform) -> list:
    """(row, model, candidate) for the plans ratc's planner picks at the same settings."""
    rows = []
    for model, (_, best, free, _) in table2.run(platform).items():
        rows += [(f"Table 2 {s} (ratc)", model, ev.cand) for s, ev in best.items() if ev is not None]
        rows += [(f"Table 2 {s} (ratc, every P)", model, ev.cand) for s, ev in free.items()
                 if ev is not None and (best[s] is None or ev.cand != best[s].cand)]
    for model, (_, res, _, _) in table3.run(platform).items():
        rows.append(("Table 3 (ratc)", model, res.best.cand))
    return rows


def compare(model: str, cand: Candidate, platform, vm: bool = False) -> dict:
    """Per-stage Eq. 9 and memory-plan peaks of one configuration (and the system VM's, T = 1)."""
    profile = trace_preset(model, 2048)
    planner = Planner(profile, platform)
    _, mem, _ = planner.detail(cand)
    module = plan_module(profile, cand, platform, planner)
    PassManager(parse_pipeline(default_pipeline(cand.pref, budget="none")), verify="none").run(module)
    out = {"eq9": [float(x) for x in mem.total[0]], "plan": list(find_pipeline(module).attributes["peak"])}
    if vm and cand.T == 1:
        from ratc.vm.system.driver import run_module
        out["vm"] = list(run_module(module, platform, memory_limit=False)[1].stage_peak_bytes)
    return out


def memory_table(vm: bool = False) -> str:
    """The markdown table: peaks, their difference, the stage that differs most (and the VM's peak)."""
    platform = load_platform("mt3000")
    lines = ["| row | model | config | Eq. 9 peak | memory-plan peak | diff | worst stage | VM peak |",
             "|---|---|---|---|---|---|---|---|"]
    for row, model, cand in paper_configs() + chosen_configs(platform):
        r = compare(model, cand, platform, vm)
        eq9, plan = r["eq9"], r["plan"]
        diffs = [(a - b) / b * 100 for a, b in zip(plan, eq9)]
        worst = max(range(len(diffs)), key=lambda p: (abs(diffs[p]), -p))
        peak = (max(plan) - max(eq9)) / max(eq9) * 100
        vm_cell = (f"{max(r['vm']) / 1e9:.2f} GB ({(max(r['vm']) - max(eq9)) / max(eq9) * 100:+.1f} %)"
                   if "vm" in r else "-")
        line = (f"| {row} | {model} | {cand.label()} | {max(eq9) / 1e9:.2f} GB | {max(plan) / 1e9:.2f} GB | "
                f"{peak:+.2f} % | {worst} of {len(diffs)}: {diffs[worst]:+.2f} % | {vm_cell} |")
        print(line, flush=True)
        lines.append(line)
    return "\n".join(lines)


def write_doc(path: str, table: str) -> None:
    """Replace the table after MARK in the doc (up to the next blank line)."""
    text = Path(path).read_text()
    pattern = re.compile(re.escape(MARK) + r"\n(\|.*\n)*")
    if not pattern.search(text):
        raise SystemExit(f"{path}: no line '{MARK}' to put the table after")
    Path(path).write_text(pattern.sub(lambda _: MARK + "\n" + table + "\n", text, count=1))


def bench_compile(runs: int) -> None:
    platform = load_platform("mt3000")
    profile = trace_preset("llama2-70b", 2048)
    # The paper's Table 3 plan with FSR (the fsr pass co-schedules every Recover). Its second
    # recovery buffer takes it to 20.9 GB, over the budget (the planner picks checkpointing
    # there), so memory-plan only plans and reports.
    cand = Candidate(P=48, D=2, T=1, Z=1, b=1, A=16, act="fsr", pref="deadline")
    planner = Planner(profile, platform)
    planner.units(1)
    totals, per_pass, size = [], {}, 0
    for _ in range(runs):
        start = time.perf_counter()
        module = plan_module(profile, cand, platform, planner)
        pm = PassManager(parse_pipeline(default_pipeline(cand.pref, budget="none")), ctx=PassContext(platform=platform))
        module = pm.run(module)
        totals.append(time.perf_counter() - start)
        for name, t in pm.timings:
            per_pass.setdefault(name.split("{")[0], []).append(t)
        size = sum(len(s.region.ops) for s in find_pipeline(module).region.ops)
    print(f"LLaMA-2-70B {cand.label()}: {size} ops in 48 stage programs; all passes with verification "
          f"after each: median {statistics.median(totals):.2f} s over {runs} runs "
          f"(min {min(totals):.2f}, max {max(totals):.2f}); pass bodies alone (median, verification excluded):")
    for name, ts in per_pass.items():
        print(f"  {name:<16} {statistics.median(ts):.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-memory-table", action="store_true")
    ap.add_argument("--vm", action="store_true", help="also simulate each T = 1 configuration on the system VM")
    ap.add_argument("--doc", help="write the memory table into this markdown file (after its marker line)")
    args = ap.parse_args()
    if args.runs > 0:
        bench_compile(args.runs)
    if not args.no_memory_table:
        table = memory_table(args.vm)
        if args.doc:
            write_doc(args.doc, table)


if __name__ == "__main__":
    main()

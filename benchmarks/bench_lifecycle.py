"""Benchmark the lifecycle pipeline: compile time of LLaMA-2-70B at P=48 (A=16), and memory-plan
peaks against the planner's Eq. 9 on the paper's Table 2 / Table 3 configurations.

    python benchmarks/bench_lifecycle.py [--runs 5] [--no-memory-table]
"""

from __future__ import annotations

import argparse
import statistics
import time

from ratc.frontend import trace_preset
from ratc.lifecycle.compile import default_pipeline
from ratc.lifecycle.lowering import find_pipeline
from ratc.lifecycle.plan_ir import plan_module
from ratc.passes import PassContext, PassManager, parse_pipeline
from ratc.planner.config import Candidate
from ratc.planner.search import Planner
from ratc.platform import load_platform

# (model, P, D, T, Z, A, act, pref): Table 3 rows, then Table 2 rows. Table 2 does not give
# A; 4096 sequences per step (its tokens/s x step time / 2048) over D replicas at b = 1.
CONFIGS = [
    ("llama2-7b", 2, 4, 1, 2, 128, "fsr", "deadline"),
    ("baichuan2-13b", 8, 2, 1, 2, 128, "fsr", "deadline"),
    ("qwen2.5-32b", 16, 4, 1, 2, 128, "fsr", "deadline"),
    ("llama2-70b", 48, 2, 1, 2, 16, "fsr", "deadline"),
    ("llama2-13b", 2, 128, 1, 2, 32, "fsr", "deadline"),
    ("llama2-13b", 2, 64, 2, 2, 64, "fsr", "deadline"),
    ("llama2-13b", 2, 128, 1, 3, 32, "fsr", "deadline"),
    ("llama2-13b", 2, 128, 1, 2, 32, "ckpt", "deadline"),
    ("llama2-13b", 2, 128, 1, 2, 32, "ckpt", "bulk"),
    ("qwen2.5-32b", 8, 32, 1, 2, 16, "fsr", "deadline"),
    ("qwen2.5-32b", 8, 16, 2, 2, 32, "fsr", "deadline"),
    ("qwen2.5-32b", 8, 32, 1, 3, 16, "fsr", "deadline"),
    ("qwen2.5-32b", 8, 32, 1, 2, 16, "ckpt", "deadline"),
    ("qwen2.5-32b", 8, 32, 1, 2, 16, "ckpt", "bulk"),
]


def bench_compile(runs: int) -> None:
    platform = load_platform("mt3000")
    profile = trace_preset("llama2-70b", 2048)
    cand = Candidate(P=48, D=2, T=1, Z=2, b=1, A=16, act="fsr", pref="deadline")
    planner = Planner(profile, platform)
    planner.units(1)
    totals, per_pass, size = [], {}, 0
    for _ in range(runs):
        start = time.perf_counter()
        module = plan_module(profile, cand, platform, planner)
        pm = PassManager(parse_pipeline(default_pipeline(cand.pref)), ctx=PassContext(platform=platform))
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


def memory_table() -> None:
    platform = load_platform("mt3000")
    print("\nmodel          config                               Eq.9 peak  memory-plan  diff   "
          "decoder-only stages")
    for model, P, D, T, Z, A, act, pref in CONFIGS:
        profile = trace_preset(model, 2048)
        cand = Candidate(P=P, D=D, T=T, Z=Z, b=1, A=A, act=act, pref=pref)
        planner = Planner(profile, platform)
        _, mem, _ = planner.detail(cand)
        eq9 = [float(x) for x in mem.total[0]]
        module = plan_module(profile, cand, platform, planner)
        PassManager(parse_pipeline(default_pipeline(pref, budget="none")), verify_each=False).run(module)
        mine = find_pipeline(module).attributes["peak"]
        inner = [abs(a - b) / b * 100 for a, b in list(zip(mine, eq9))[1:-1]]
        print(f"{model:<14} {cand.label():<36} {max(eq9) / 1e9:8.2f}GB {max(mine) / 1e9:9.2f}GB "
              f"{(max(mine) - max(eq9)) / max(eq9) * 100:+6.2f}%  "
              + (f"max |diff| {max(inner):.2f}%" if inner else "-"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-memory-table", action="store_true")
    args = ap.parse_args()
    bench_compile(args.runs)
    if not args.no_memory_table:
        memory_table()


if __name__ == "__main__":
    main()

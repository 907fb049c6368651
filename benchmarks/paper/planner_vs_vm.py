"""Planner (Eq. 12) against the system VM on the paper's Table 2 and Table 3 settings.

For each (model, clusters, global batch) the planner's chosen plan is compiled by the
lifecycle passes and simulated; the relative error of the prediction is reported, and the
Kendall tau between predicted and simulated step times over the planner's top candidates.
The global batches are implied by the paper's tables (tokens/s x step time / 2048).

A second simulation lays the same plan out with `ratc.vm.system.from_plan` instead: each
layer's work split into its compute-bound and DDR-bound phases, and FSR recovery as
background work that fills the compute engine's DDR-bound phases with two recovery
buffers — the overlap the planner's FSR term assumes.

    python benchmarks/paper/planner_vs_vm.py [--top 20] [--tau-rows llama2-7b@8,qwen2.5-32b@256]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ratc.frontend.presets import trace_preset  # noqa: E402
from ratc.planner.search import Planner  # noqa: E402
from ratc.platform import load_platform  # noqa: E402
from ratc.vm.system.driver import compare, kendall_tau  # noqa: E402
from ratc.vm.system.engine import simulate  # noqa: E402
from ratc.vm.system.from_plan import program_for  # noqa: E402
from ratc.vm.system.results import summarize  # noqa: E402

# (table, model, clusters, global batch)
ROWS = (
    ("Table 2", "llama2-13b", 256, 4096),
    ("Table 2", "qwen2.5-32b", 256, 4096),
    ("Table 3", "llama2-7b", 8, 512),
    ("Table 3", "baichuan2-13b", 16, 256),
    ("Table 3", "qwen2.5-32b", 64, 512),
    ("Table 3", "llama2-70b", 96, 32),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=20, help="candidates for the rank agreement (default 20)")
    ap.add_argument("--tau-rows", default="llama2-7b@8,qwen2.5-32b@256",
                    help="rows (model@clusters) whose top candidates are all simulated for Kendall tau")
    args = ap.parse_args()
    tau_rows = set(args.tau_rows.split(",")) if args.tau_rows else set()
    platform = load_platform("mt3000")
    print("| table | model | clusters | batch | chosen plan | predicted s | simulated s | error | VM peak GB "
          "| overlap layout s | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    taus = []
    for table, model, clusters, batch in ROWS:
        t0 = time.perf_counter()
        planner = Planner(trace_preset(model, 2048), platform)
        result = planner.require_feasible(planner.plan(clusters, batch))
        top = result.feasible[:args.top] if f"{model}@{clusters}" in tau_rows else result.feasible[:1]
        comps = compare(planner, top)
        best = comps[0]
        prog = program_for(planner, best.cand)
        prog.memory_budget = None
        overlap = summarize(simulate(prog)).step_seconds
        print(f"| {table} | {model} | {clusters} | {batch} | {best.cand.label()} | {best.predicted:.2f} | "
              f"{best.simulated:.2f} | {100 * best.error:+.2f} % | {best.peak / 1e9:.2f} | {overlap:.2f} | "
              f"{100 * (best.predicted - overlap) / overlap:+.2f} % |", flush=True)
        if len(comps) > 1:
            tau = kendall_tau([c.predicted for c in comps], [c.simulated for c in comps])
            taus.append((model, clusters, len(comps), tau, max(abs(c.error) for c in comps)))
        print(f"  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    for model, clusters, n, tau, worst in taus:
        print(f"\nKendall tau over the top {n} of {model} at {clusters} clusters: {tau:.3f} "
              f"(worst |error| among them {100 * worst:.2f} %)")


if __name__ == "__main__":
    main()

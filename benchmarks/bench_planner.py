"""Planner speed: candidates evaluated per second, and planning LLaMA-2-70B on 1024 clusters.

    python benchmarks/bench_planner.py [--repeat 5]

Profiles are traced once beforehand (tracing is the frontend's cost, not the planner's).
"cold" builds a fresh Planner per run, so unit costs and per-P stage tables are recomputed
(the end-to-end planning time); "warm" plans again on the same Planner, which measures the
candidate costing alone (what --min-clusters and repeated queries pay per cluster count).
Times are process CPU seconds (time.process_time), so other jobs sharing the machine do
not inflate them; --wall reports wall-clock seconds instead. The collector runs with the
thresholds the `ratc` command sets (ratc.cli.main.run): every row runs in this one process,
and with CPython's defaults a later row's cold plan paid for full collections scanning the
earlier rows' caches (llama2-7b `selective` 0.049 s alone, 0.114 s after three llama2-70b
plans, 2026-12-05), which a user's `ratc plan` never does.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratc.frontend.presets import trace_preset  # noqa: E402
from ratc.gcpause import LAZY_THRESHOLDS  # noqa: E402
from ratc.planner.search import Planner  # noqa: E402
from ratc.platform import load_platform  # noqa: E402

CASES = [  # (model, clusters, global batch, strategy)
    ("llama2-70b", 1024, 1024, "any"),
    ("llama2-70b", 1024, 1024, "ratrain"),
    ("llama2-13b", 256, 4096, "any"),
    ("qwen2.5-32b", 512, 4096, "any"),
    ("llama2-70b", 1024, 1024, "selective"),    # per-layer save choices (issue 31): a second costing pass
    ("llama2-70b", 1024, 1024, "interleaved"),  # v = 2, 4 candidates: a makespan over the interleaved order
    ("llama2-70b", 1024, 1024, "zerobubble"),   # ... each also as ZB1P: a makespan over its Is and Ws
    ("llama2-7b", 8, 512, "selective"),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--wall", action="store_true", help="measure wall-clock instead of CPU time")
    args = ap.parse_args(argv)
    clock = time.perf_counter if args.wall else time.process_time
    gc.set_threshold(*LAZY_THRESHOLDS)      # as the ratc command runs
    platform = load_platform("mt3000")
    profiles = {name: trace_preset(name) for name in {c[0] for c in CASES}}
    print(f"{'model':12s} {'clusters':>8s} {'batch':>6s} {'strategy':10s} {'candidates':>10s} "
          f"{'cold s':>8s} {'cold cand/s':>11s} {'warm s':>8s} {'warm cand/s':>11s}")
    for name, clusters, batch, strategy in CASES:
        cold, warm, n = [], [], 0
        for _ in range(args.repeat):
            planner = Planner(profiles[name], platform)
            start = clock()
            res = planner.plan(clusters, batch, strategy)
            cold.append(clock() - start)
            start = clock()
            planner.plan(clusters, batch, strategy)
            warm.append(clock() - start)
            n = res.evaluated
        c, w = statistics.median(cold), statistics.median(warm)
        print(f"{name:12s} {clusters:8d} {batch:6d} {strategy:10s} {n:10d} {c:8.3f} {n / c:11.0f} {w:8.3f} {n / w:11.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

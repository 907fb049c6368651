"""The paper's scale-out (review, Table 6): LLaMA-2-7B on 256, 512, 768 and 1024 clusters,
global batch 2048 per 256 clusters, the planner's choice at each size, run on the system VM.

Speedup is tokens/s relative to 256 clusters; efficiency is speedup / (clusters / 256).
The paper's figures are held out: these are ratc's predictions.

    python benchmarks/paper/scaling.py [--json]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ratc.frontend.presets import trace_preset  # noqa: E402
from ratc.planner.search import Planner  # noqa: E402
from ratc.platform import load_platform  # noqa: E402
from ratc.vm.system.driver import compile_candidate, model_macs, run_module  # noqa: E402

CLUSTERS = (256, 512, 768, 1024)
BATCH_PER_256 = 2048


def run(model_name: str = "llama2-7b", clusters: tuple = CLUSTERS, batch_per_first: int = BATCH_PER_256) -> list:
    """One row per cluster count, the global batch growing with it (the paper's setting by default)."""
    platform = load_platform("mt3000")
    model = trace_preset(model_name, 2048)
    planner = Planner(model, platform)
    from markdown_rows import progress

    rows = []
    for n in progress(clusters, "cluster counts", "setting"):
        batch = batch_per_first * n // clusters[0]
        best = planner.require_feasible(planner.plan(n, batch)).best
        module = compile_candidate(model, best.cand, platform, planner)
        _, res = run_module(module, platform, model_macs(model) * batch, memory_limit=False)
        rows.append({"clusters": n, "global_batch": batch, "config": best.cand.label(), "step_time_s": res.step_seconds,
                     "tokens_per_s": res.tokens_per_second, "predicted_s": best.t_step,
                     "mac_utilization": res.mac_utilization, "tail_s": res.tail_seconds,
                     "peak_gb": max(res.stage_peak_bytes) / 1e9})
    base = rows[0]
    for r in rows:
        r["speedup"] = r["tokens_per_s"] / base["tokens_per_s"]
        r["efficiency"] = r["speedup"] / (r["clusters"] / base["clusters"])
    return rows


COLUMNS = ["clusters", "global batch", "plan", "step s", "tokens/s", "speedup", "efficiency", "MAC util",
           "planner s", "VM peak GB"]


def cells(r: dict) -> list[str]:
    return [str(r["clusters"]), str(r["global_batch"]), r["config"], f"{r['step_time_s']:.2f}",
            f"{r['tokens_per_s']:.1f}", f"{r['speedup']:.3f}x", f"{100 * r['efficiency']:.1f} %",
            f"{100 * r['mac_utilization']:.1f} %", f"{r['predicted_s']:.2f}", f"{r['peak_gb']:.2f}"]


if __name__ == "__main__":
    from markdown_rows import main

    main(__doc__, run, COLUMNS, cells)

"""The paper's ablation (review, Fig. 11): Qwen2.5-32B on 256 clusters, P=8 D=32 T=1 Z=2 b=1 A=128.

Each variant turns one mechanism off and is compiled by the lifecycle passes and run on
the system VM; printed are the step time normalized to full RATrain and the exposed
finalization tail (last Backward -> step end) relative to full RATrain's. The paper's
figures are held out: these are ratc's predictions.

    python benchmarks/paper/ablation.py [--json]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ratc.frontend.presets import trace_preset  # noqa: E402
from ratc.planner.search import Planner  # noqa: E402
from ratc.platform import load_platform  # noqa: E402
from ratc.step.config import parse_config  # noqa: E402
from ratc.vm.system.driver import compile_candidate, model_macs, run_module  # noqa: E402

BASE = "P=8,D=32,T=1,Z=2,b=1,A=128"
# Variant -> (activation policy, state policy). `layerwise` keeps the layer-wise GradSync
# but runs UpdateShard/PrefetchW in bulk at the step end; `bulk` drops the state pipeline.
VARIANTS = (
    ("Full RATrain", "FSR", "deadline"),
    ("w/o FSR", "Ckpt", "deadline"),
    ("w/o Update-Prefetch (U-P)", "FSR", "layerwise"),
    ("w/o Layer-wise State Pipeline (LSP)", "FSR", "bulk"),
)


def run(model_name: str = "qwen2.5-32b", base: str = BASE) -> list:
    """One row per variant of `base` (the paper's setting by default)."""
    platform = load_platform("mt3000")
    model = trace_preset(model_name, 2048)
    planner = Planner(model, platform)
    rows = []
    from tqdm import tqdm

    # about a minute a variant on 2 cores: progress with a time estimate on a terminal's stderr
    for name, act, pref in tqdm(VARIANTS, desc="ablation", unit="variant", disable=None):
        cand = parse_config(f"{base},{act},{pref}")
        module = compile_candidate(model, cand, platform, planner)
        _, res = run_module(module, platform, model_macs(model) * cand.global_batch, memory_limit=False)
        (ev,) = planner.evaluate_group([cand])
        rows.append({"variant": name, "config": cand.label(), "step_time_s": res.step_seconds,
                     "tail_s": res.tail_seconds, "exposed_s": res.exposed_seconds, "predicted_s": ev.t_step,
                     "peak_gb": max(res.stage_peak_bytes) / 1e9, "tokens_per_s": res.tokens_per_second})
    full = rows[0]
    for r in rows:
        r["normalized_step_time"] = r["step_time_s"] / full["step_time_s"]
        r["tail_amplification"] = r["tail_s"] / full["tail_s"] if full["tail_s"] else float("nan")
    return rows


COLUMNS = ["variant", "normalized step time", "tail amplification", "step s", "tail s",
           "exposed comm / update / prefetch / recovery s", "planner s", "VM peak GB"]


def cells(r: dict) -> list[str]:
    e = r["exposed_s"]
    return [r["variant"], f"{r['normalized_step_time']:.3f}x", f"{r['tail_amplification']:.2f}x",
            f"{r['step_time_s']:.2f}", f"{r['tail_s']:.2f}",
            f"{e['comm']:.2f} / {e['update']:.2f} / {e['prefetch']:.2f} / {e['recovery']:.2f}",
            f"{r['predicted_s']:.2f}", f"{r['peak_gb']:.2f}"]


if __name__ == "__main__":
    from markdown_rows import main

    main(__doc__, run, COLUMNS, cells)

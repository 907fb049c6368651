"""The paper's sequence-length sweep (review, "Sequence-Length Sensitivity"): 256 clusters,
global batch 4096, sequence lengths 512-4096, the planner's choice at each length.

The paper reports (figures not given) that training time per token for Baichuan2-13B and
Qwen2.5-32B falls from 512 to 2048 and rises again at longer lengths, and that compute
utilization rises from 512 to 2048 and dips slightly at 3072/4096. Printed per model and
length: the plan, step time, tokens/s, microseconds per token and MAC utilization (model
MACs without recomputation over the clusters' peak). Planner only (Eq. 12); the kernel-VM
profile prices every GEMM and attention shape as ratc's generated kernels run it.

    python benchmarks/paper/seq_sweep.py [--exec-profile paper-table5|kernel-vm] [--json]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ratc.frontend.presets import trace_preset  # noqa: E402
from ratc.planner.exec_profile import load_exec_profile  # noqa: E402
from ratc.planner.search import Planner  # noqa: E402
from ratc.platform import load_platform  # noqa: E402
from ratc.vm.system.driver import model_macs  # noqa: E402

MODELS = ("llama2-7b", "baichuan2-13b", "qwen2.5-32b")
LENGTHS = (512, 1024, 2048, 3072, 4096)
CLUSTERS, BATCH = 256, 4096


def run(models: tuple = MODELS, lengths: tuple = LENGTHS, clusters: int = CLUSTERS, batch: int = BATCH,
        exec_profile: str = "paper-table5") -> list:
    """One row per (model, sequence length): the planner's best plan and what it predicts."""
    platform = load_platform("mt3000")
    profile = load_exec_profile(platform, exec_profile)
    rows = []
    from markdown_rows import progress

    for name, seq in progress([(n, s) for n in models for s in lengths], "settings", "setting"):
        model = trace_preset(name, seq)
        planner = Planner(model, platform, exec_profile=profile, micro_batches=(1,))
        best = planner.require_feasible(planner.plan(clusters, batch)).best
        tokens = batch * seq
        rows.append({"model": name, "seq": seq, "config": best.cand.label(), "step_time_s": best.t_step,
                     "tokens_per_s": tokens / best.t_step, "us_per_token": 1e6 * best.t_step / tokens,
                     "mac_utilization": model_macs(model) * batch
                     / (clusters * platform.cluster.peak_mac_rate * best.t_step)})
    return rows


COLUMNS = ["model", "seq", "plan", "step s", "tokens/s", "us/token", "MAC util"]


def cells(r: dict) -> list[str]:
    return [r["model"], str(r["seq"]), r["config"], f"{r['step_time_s']:.1f}", f"{r['tokens_per_s']:.0f}",
            f"{r['us_per_token']:.2f}", f"{100 * r['mac_utilization']:.1f} %"]


def add_args(ap) -> None:
    ap.add_argument("--exec-profile", default="paper-table5", choices=("paper-table5", "kernel-vm"),
                    help="GEMM rates from the paper's Table 5 (default) or from ratc's generated kernels")


if __name__ == "__main__":
    from markdown_rows import main

    main(__doc__, run, COLUMNS, cells, add_args)

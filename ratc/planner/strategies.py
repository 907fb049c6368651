"""Strategy modes: the search spaces that reproduce the paper's Table 2 rows."""

from __future__ import annotations

from dataclasses import dataclass

from ratc.errors import RatcError
from ratc.step.config import ACT_POLICIES, BALANCES, CORUNS, PREF_POLICIES, ZERO_STAGES


@dataclass(frozen=True)
class Strategy:
    """Which values each configuration dimension may take.

    By default ZeRO is "lightweight" (0-2): the paper's response to intra-layer collectives
    is PP + DP + lightweight ZeRO (review Fig. 1, R1), and its baselines other than
    ZeRO-3-heavy all run ZeRO-2 (Table 2).

    `hold_pipeline`: the baseline keeps the pipeline degree P of RATrain's plan for the same
    request and changes one lever on it, as the paper's Table 2 rows do (all at RATrain's P):
    "Backward Ckpt ... the same parallel configuration as RATrain", TP-heavy "shrinks the
    achievable data-parallel degree" (T=2 at RATrain's P halves D). Tuned PP/DP/ZeRO "is
    allowed to search over P, D, Z, b, A", so it searches.
    """

    name: str
    doc: str
    tp: tuple = (1,)
    zero: tuple = (0, 1, 2)
    act: tuple = ACT_POLICIES
    pref: tuple = PREF_POLICIES
    balance: tuple = BALANCES
    hold_pipeline: bool = False
    keep: bool = False      # choose per layer what recomputed layers save (ratc.planner.keep)
    # virtual stages per rank: values > 1 add interleaved 1F1B candidates where it runs (P >= 2,
    # M whole rounds, P * v <= decoder layers)
    v: tuple = (1,)
    # the schedules of those interleaved candidates (ratc.step.config.SCHEDULES): zb1p and zbv
    # add the zero-bubble schedules beside interleaved 1F1B (zbv at v = 2)
    sched: tuple = ("1f1b",)
    # FSR under those zero-bubble schedules: where each I's first Recover co-runs
    # (ratc.step.config.CORUNS); both let the search price the deadline host against a W's slot
    coruns: tuple = ("prev",)
    # the attention kernels (ratc.step.config.ATTENTION): the strategies beyond the paper also
    # try fused attention (ratc.codegen.flash) on platforms that run generated kernels
    attn: tuple = ("paper",)


STRATEGIES = {s.name: s for s in (
    Strategy("ratrain", "RATrain: PP x DP x lightweight ZeRO (0-2), FSR, layer-wise state pipeline, "
                        "deadline-aware update-prefetch"),
    Strategy("tp-heavy", "Megatron-style tensor parallelism (T >= 2) inside each stage",
             tp=(2, 4, 8), hold_pipeline=True),
    Strategy("zero3-heavy", "ZeRO-3: parameters sharded and gathered per layer", zero=(3,), hold_pipeline=True),
    Strategy("backward-ckpt", "classical checkpointing: recomputation on the backward path",
             act=("ckpt",), hold_pipeline=True),
    Strategy("full-save", "every activation kept for backward, no recomputation", act=("full",),
             hold_pipeline=True),
    Strategy("tuned-pp-dp-zero", "P, D, Z, b, A searched; no FSR, no state pipeline, no update-prefetch",
             act=("full", "ckpt"), pref=("bulk",)),
    Strategy("selective", "RATrain's space, each recomputed layer choosing under the budget what it saves: "
                          "everything, all but its attention core (selective recomputation), or its input",
             keep=True, attn=("paper", "fused")),
    Strategy("interleaved", "RATrain's space plus interleaved 1F1B (v = 2, 4 model chunks per rank; "
                            "Full, Ckpt or FSR)", v=(1, 2, 4), attn=("paper", "fused")),
    Strategy("zerobubble", "the interleaved space, each interleaved candidate also as ZB1P and, at v = 2, as ZBV "
                           "(zero bubble: every Backward split into input- and weight-gradient tasks; under FSR "
                           "each I's first Recover co-run with the task before it or in a W's slot)",
             v=(1, 2, 4), sched=("1f1b", "zb1p", "zbv"), coruns=CORUNS,
             attn=("paper", "fused")),
    Strategy("any", "every dimension free, including TP, ZeRO-3 and interleaved 1F1B (v = 2, 4)",
             tp=(1, 2, 4, 8), zero=ZERO_STAGES, v=(1, 2, 4), attn=("paper", "fused")),
)}


def get_strategy(name: str) -> Strategy:
    """A strategy by name."""
    try:
        return STRATEGIES[name]
    except KeyError:
        raise RatcError(f"unknown strategy {name!r} (known: {', '.join(STRATEGIES)})") from None

"""The planner's interleaved 1F1B step against the system VM's, configuration by configuration.

    python benchmarks/interleaved_agreement.py [--seq 2048] [--cfg llama2-7b:2 llama2-7b:4]
        [--v 2 4] [--per-rank 2 4 8] [--Z 0 1 2 3] [--act full ckpt fsr selective] [--sched 1f1b]
        [--keep TEXT] [--attn paper|fused]

Each line: model, P, v, A, recompute policy, ZeRO stage, the planner's step, the VM's step
(seconds) and the planner's error; the last line the worst |error| (D = 2, T = 1, b = 1,
deadline policy; v = 1 gives the non-interleaved planner's error on the same grid).
`selective` is FSR with every decoder layer selective (`--keep`, e.g. 24s8l, sets another
choice for it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratc.errors import RatcError  # noqa: E402
from ratc.frontend import trace_preset  # noqa: E402
from ratc.planner.search import Planner  # noqa: E402
from ratc.platform import load_platform  # noqa: E402
from ratc.step.config import ATTENTION, SCHEDULES, Candidate, fused_keep, keep_text, parse_keep  # noqa: E402
from ratc.vm.system.driver import compile_candidate, run_module  # noqa: E402


def _cfg(text: str) -> tuple:
    """'preset:P' as (preset, P)."""
    preset, _, P = text.partition(":")
    if not P.isdigit() or int(P) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not preset:P (e.g. llama2-7b:2)")
    return preset, int(P)


def _positive(text: str) -> int:
    """A whole number >= 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number >= 1")
    return int(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq", type=_positive, default=2048)
    ap.add_argument("--cfg", nargs="+", type=_cfg, default=[("llama2-7b", 2), ("llama2-7b", 4)], help="preset:P")
    ap.add_argument("--v", type=_positive, nargs="+", default=[2, 4])
    ap.add_argument("--per-rank", type=_positive, nargs="+", default=[2, 4, 8], help="A / P")
    ap.add_argument("--Z", type=int, nargs="+", choices=range(4), default=[0, 1, 2, 3])
    ap.add_argument("--act", nargs="+", choices=["full", "ckpt", "fsr", "selective"], default=["full", "ckpt"])
    ap.add_argument("--sched", choices=SCHEDULES, default="1f1b", help="the order (zbv: v = 2 only)")
    ap.add_argument("--keep", default="", help="selective's save choice per layer (default: every layer 's')")
    ap.add_argument("--attn", choices=ATTENTION, default="paper")
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    try:
        worst = _table(a)
    except RatcError as e:
        print(f"interleaved_agreement: {e}", file=sys.stderr)
        return 2
    print(f"worst {worst:.2f}%")
    return 0


def _table(a) -> float:
    """Print one line per configuration; the worst |error| (%)."""
    worst = 0.0
    for preset, P in a.cfg:
        planner = Planner(trace_preset(preset, a.seq), load_platform("mt3000"))
        for v in a.v:
            for k in a.per_rank:
                for act in a.act:
                    policy, keep = _policy(act, a.keep, planner.model.num_layers, a.attn)
                    for Z in a.Z:
                        cand = Candidate(P=P, D=2, T=1, Z=Z, b=1, A=k * P, act=policy, pref="deadline", v=v,
                                         sched=a.sched, keep=keep, attn=a.attn)
                        (ev,) = planner.evaluate_group([cand])
                        sim = run_module(compile_candidate(planner.model, cand, planner.platform, planner),
                                         planner.platform, memory_limit=False)[1]
                        err = 100 * (ev.t_step / sim.step_seconds - 1)
                        worst = max(worst, abs(err))
                        print(f"{preset} P={P} v={v}{'' if a.sched == '1f1b' else ' ' + a.sched} A={k}P {act} Z{Z} {ev.t_step:.4f} {sim.step_seconds:.4f} "
                              f"{err:+.2f}%", flush=True)
    return worst


def _policy(act: str, keep: str, layers: int, attn: str) -> tuple:
    """(activation policy, keep text) of an --act name: selective is FSR keeping `keep` (as it
    runs under the attention kernels `attn`: ratc.step.config.fused_keep)."""
    if act != "selective":
        return act, ""
    try:
        choice = parse_keep(keep) if keep else ("selective",) * layers
    except ValueError as e:
        raise RatcError(f"--keep: {e}") from None
    if len(choice) != layers:
        raise RatcError(f"--keep {keep!r} names {len(choice)} layers; the model has {layers}")
    return "fsr", keep_text(fused_keep(choice, attn))


if __name__ == "__main__":
    sys.exit(main())

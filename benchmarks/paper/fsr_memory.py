"""What an FSR co-run needs beyond one layer of activations when recovery streams (docs/planner.md).

A Recover of layer l-1 co-runs with the Backward of layer l, which still holds layer l's
activations. That Backward frees op i's saved activations as soon as op i's backward ends,
and the Recover re-creates layer l-1's op by op, so the two share one region: the pair
needs one layer plus the excess `delta` of what the Recover has made over what the
Backward has freed. The paper's FSR peaks sit 0.11 GB (LLaMA-2-13B) and 0.21 GB
(Qwen2.5-32B) above its checkpointing ones (Table 2).

For each model's decoder layer (one sequence, the shipped profile, the Table 5 execution
profile, the planner's UnitCost) this prints how much of the Recover the pair's co-run
hides (ratc.planner.corun.corun_within, on the timing model's phases) with two whole
buffers and streaming within one layer + delta, for delta = 0 and the paper's, and the
least delta that hides as much as two buffers (to 0.1 %: `UnitCost.stream`, what the
planner, the lifecycle and the VM count). What an op saves of its inputs is made when their
producer starts, the rest when the op starts, all of it freed when the op's backward ends;
a phase of several ops makes its bytes at its start and frees them at its end.

    python benchmarks/paper/fsr_memory.py [--platform mt3000] [--models llama2-13b,...]
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ratc.frontend.presets import trace_preset  # noqa: E402
from ratc.planner.corun import solo  # noqa: E402
from ratc.planner.opcost import stream_corun  # noqa: E402
from ratc.planner.search import Planner  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table2 import PAPER  # noqa: E402

MODELS = ("llama2-7b", "llama2-13b", "baichuan2-13b", "qwen2.5-32b", "llama2-70b")


def paper_delta_gb(name: str) -> float | None:
    """The paper's FSR peak minus its Backward Ckpt peak at the same configuration (Table 2)."""
    rows = PAPER.get(name)
    return None if rows is None else rows["ratrain"][1] - rows["backward-ckpt"][1]


def decoder_unit(name: str, platform, seq_len: int = 2048):
    """The planner's cost of one decoder layer (ratc.planner.opcost.UnitCost)."""
    return next(u for u in Planner(trace_preset(name, seq_len), platform).units(1).units if u.decoder)


def row(name: str, platform) -> dict:
    """The columns of one model's row: a decoder layer's Backward hosting the Recover of the
    layer below (the same template), with two buffers (inf) and within one layer + delta."""
    unit = decoder_unit(name, platform)
    host, rec = solo(op[:2] for op in unit.bwd_ops), solo(op[:2] for op in unit.fwd_ops)
    out = {"model": name, "layer_gb": unit.saved_bytes / 1e9, "host": host, "recover": rec,
           "two": stream_corun(unit, unit, np.inf), "zero": stream_corun(unit, unit, 0.0),
           "paper_gb": paper_delta_gb(name), "need_gb": unit.stream / 1e9}
    out["paper"] = None if out["paper_gb"] is None else stream_corun(unit, unit, out["paper_gb"] * 1e9)
    return out


def hidden(r: dict, seconds: float | None) -> str:
    """The share of the Recover a co-run of `seconds` hides."""
    return "-" if seconds is None else f"{1 - (seconds - r['host']) / r['recover']:.0%}"


def main(argv=None) -> int:
    from markdown_rows import platform_and_models, progress

    platform, names = platform_and_models(__doc__, MODELS, argv)
    print("| model | one layer's activations | recovery hidden, two buffers | streaming, delta = 0 "
          "| streaming, the paper's delta | least delta hiding as much as two buffers |")
    print("|---|---|---|---|---|---|")
    bar = progress(names, "models", "model")
    for name in bar:
        r = row(name, platform)
        paper = "-" if r["paper_gb"] is None else f"{hidden(r, r['paper'])} at {r['paper_gb']:.2f} GB"
        bar.write(f"| {name} | {r['layer_gb']:.3f} GB | {hidden(r, r['two'])} | {hidden(r, r['zero'])} | {paper} "
                  f"| {r['need_gb']:.3f} GB |", file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The non-interleaved 1F1B order of one pipeline stage (warm-up, steady state, cool-down).

As Megatron-LM's forward_backward_pipelining_without_interleaving runs it: stage p first
does num_warmup = min(P - p - 1, M) forwards, then alternates one forward and one
backward while forwards remain, then drains the remaining backwards. For M >= P this is
exactly torch.distributed.pipelining's Schedule1F1B. For M < P (which Schedule1F1B
refuses) the warm-up is capped at M, as in Megatron: input-side stages run all M
forwards before their first backward, which is still deadlock-free.
"""

from __future__ import annotations

from ratc.errors import RatcError


def num_warmup(P: int, M: int, p: int) -> int:
    """Forwards stage p runs before its first backward."""
    return min(P - p - 1, M)


def stage_order(P: int, M: int, p: int) -> list[tuple[str, int]]:
    """Stage p's main tasks in issue order: ("F", m) and ("B", m)."""
    if P < 1 or M < 1 or not 0 <= p < P:
        raise RatcError(f"1F1B needs P >= 1, M >= 1 and 0 <= stage < P (got P={P}, M={M}, stage={p})")
    warm = num_warmup(P, M, p)
    order = [("F", m) for m in range(warm)]
    for i in range(M - warm):
        order += [("F", warm + i), ("B", i)]
    order += [("B", m) for m in range(M - warm, M)]
    return order

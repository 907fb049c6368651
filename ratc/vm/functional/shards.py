"""Per-replica training state of one unit under ZeRO, and the collectives between replicas.

Each unit's parameters are one flat vector of N elements, padded to D equal shards of c
elements. ZeRO-0 keeps the whole vector and optimizer state on every replica; ZeRO >= 1
gives replica r the optimizer state (and fp32 master) of shard r only; ZeRO >= 2 also
keeps only shard r of the synchronized gradient; ZeRO-3 also keeps no parameter view
between uses. Collectives average over replicas (each replica's loss is a mean over its
own tokens, so the mean of the replicas is the mean over the global batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AdamW:
    """AdamW hyper-parameters (Loshchilov & Hutter 2019), shared by ratc and the reference."""

    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1

    def make(self, params) -> torch.optim.AdamW:
        return torch.optim.AdamW(params, lr=self.lr, betas=(self.beta1, self.beta2), eps=self.eps,
                                 weight_decay=self.weight_decay, foreach=False)


class UnitState:
    """What replica r holds of one unit: master shard, its optimizer state, the parameter view."""

    def __init__(self, flat: torch.Tensor, replica: int, D: int, Z: int, opt: AdamW,
                 frozen: torch.Tensor | None = None):
        self.N, self.D, self.Z = flat.numel(), D, Z
        self.c = math.ceil(self.N / D) if Z >= 1 else self.N
        self.lo = replica * self.c if Z >= 1 else 0
        padded = torch.zeros(self.c * D if Z >= 1 else self.N)
        padded[:self.N] = flat
        self.master = torch.nn.Parameter(padded[self.lo:self.lo + self.c].clone())
        self.frozen = self.shard_of(frozen)    # this shard's requires_grad=False elements, or None
        self.optimizer = opt.make([self.master])
        # The previous step boundary's view; ZeRO-3 keeps none (it gathers before every use).
        self.view: torch.Tensor | None = flat.clone() if Z < 3 else None

    def shard_of(self, mask: torch.Tensor | None) -> torch.Tensor | None:
        """This replica's part of a mask over the unit's flat vector (None if it selects none here)."""
        if mask is None:
            return None
        padded = torch.zeros(self.c * self.D if self.Z >= 1 else self.N, dtype=torch.bool)
        padded[:self.N] = mask
        shard = padded[self.lo:self.lo + self.c]
        return shard if bool(shard.any()) else None

    def step(self, grad: torch.Tensor, skip: torch.Tensor | None = None) -> None:
        """One AdamW step on this replica's master shard. Frozen elements, and those of `skip`
        (a flat mask: parameters that got no gradient this step), keep their values and moments."""
        # torch's AdamW skips a parameter whose .grad is None (frozen, or outside this step's
        # graph) entirely; in one flat shard its elements would still be weight-decayed and
        # their moments decayed, so they are put back after the step.
        keep = self.frozen
        skip = self.shard_of(skip)
        if skip is not None:
            keep = skip if keep is None else keep | skip
        kept = None
        if keep is not None:
            state = self.optimizer.state.get(self.master, {})
            kept = [(t, t[keep].clone()) for t in (self.master.data, state.get("exp_avg"), state.get("exp_avg_sq"))
                    if t is not None]
        self.master.grad = grad
        self.optimizer.step()
        self.master.grad = None
        # (moments the first step creates are zero there already: those elements' gradient is)
        for t, values in kept or ():
            t[keep] = values


def all_gather(states: list[UnitState]) -> torch.Tensor:
    """The full flat parameter vector from every replica's master shard."""
    return torch.cat([s.master.detach() for s in states])[:states[0].N].clone()

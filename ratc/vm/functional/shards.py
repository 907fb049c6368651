"""Per-replica training state of one unit under ZeRO, and the collectives between replicas.

Each unit's parameters are one flat vector of N elements, padded to D equal shards of c
elements. A unit holding a tied parameter's copy keeps it in a segment of its own at the
end of the vector, padded and sharded on its own: shard r of every copy then holds the
same elements of it, so the copies' gradients sum shard by shard (TieSum). ZeRO-0 keeps
the whole vector and optimizer state on every replica; ZeRO >= 1 gives replica r the
optimizer state (and fp32 master) of shard r only; ZeRO >= 2 also keeps only shard r of
the synchronized gradient; ZeRO-3 also keeps no parameter view between uses. Collectives
average over replicas (each replica's loss is a mean over its own tokens, so the mean of
the replicas is the mean over the global batch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ratc.step import rules


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
                 frozen: torch.Tensor | None = None, segments: tuple[int, ...] = ()):
        self.N, self.D, self.Z, self.replica = flat.numel(), D, Z, replica
        self.segments = tuple(segments) or (self.N,)
        self.widths = [math.ceil(n / rules.shards(Z, D, "optimizer")) for n in self.segments]   # per shard
        self.c = sum(self.widths)
        self.master = torch.nn.Parameter(self.shard(flat).clone())
        self.frozen = self.shard_of(frozen)    # this shard's requires_grad=False elements, or None
        self.optimizer = opt.make([self.master])
        # The previous step boundary's view; ZeRO-3 keeps none (it gathers before every use).
        self.view: torch.Tensor | None = None if rules.gathers(Z) else flat.clone()

    def rows(self, full: torch.Tensor) -> torch.Tensor:
        """A flat vector laid out as [D, c]: row r is shard r (each segment padded and split)."""
        if not rules.syncs_by_reduce_scatter(self.Z):
            return full.view(1, -1)
        out, o = [], 0
        for n, w in zip(self.segments, self.widths):
            seg = torch.zeros(w * self.D, dtype=full.dtype)
            seg[:n] = full[o:o + n]
            out.append(seg.view(self.D, w))
            o += n
        return out[0] if len(out) == 1 else torch.cat(out, dim=1)

    def shard(self, full: torch.Tensor) -> torch.Tensor:
        """This replica's shard of a flat vector (the whole vector under ZeRO-0)."""
        return self.rows(full)[self.replica if rules.syncs_by_reduce_scatter(self.Z) else 0]

    def unshard(self, shards: torch.Tensor) -> torch.Tensor:
        """The flat vector from the D shards laid end to end."""
        rows = shards.view(rules.shards(self.Z, self.D, "optimizer"), -1)
        out, o = [], 0
        for n, w in zip(self.segments, self.widths):
            out.append(rows[:, o:o + w].reshape(-1)[:n])
            o += w
        return out[0] if len(out) == 1 else torch.cat(out)

    def tied_part(self, shard: torch.Tensor) -> torch.Tensor:
        """The tied segment's elements in a shard (a view); empty when nothing is tied."""
        if len(self.segments) < 2:
            return shard[:0]
        return shard[self.c - self.widths[-1]:]

    def shard_of(self, mask: torch.Tensor | None) -> torch.Tensor | None:
        """This replica's part of a mask over the unit's flat vector (None if it selects none here)."""
        if mask is None:
            return None
        shard = self.shard(mask)
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
    return states[0].unshard(torch.cat([s.master.detach() for s in states])).clone()

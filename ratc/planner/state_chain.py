"""What a unit's training state costs between two steps, written once for the planner's
vectorised step time (Eq. 2-4, arrays over candidates and units) and for the per-unit
attributes of `life.plan` (scalars): the rank layout behind the links, GradSync,
UpdateShard, PrefetchW, the ZeRO-3 gather and the TieSum of a tied parameter.

Gradients, optimizer state, updates and prefetches are the trainable parameters'; a frozen
one keeps only its fp16 view (gathered under ZeRO-3) and sends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratc.planner.collectives import all_gather, all_reduce, link_for, reduce_scatter, tie_sum
from ratc.step.rules import gathers, prefetches, shards, streamed_seconds, syncs_by_reduce_scatter


def rank_links(platform, D, T, P=None) -> tuple:
    """(tensor-, data-, pipeline-parallel link) of Megatron's rank layout: TP innermost, then
    DP, then PP; each the slowest link its group spans, for a program of P x D x T ranks."""
    ranks = None if P is None else P * D * T
    return link_for(platform, T, ranks), link_for(platform, D * T, ranks), link_for(platform, D * T + 1, ranks)


@dataclass(frozen=True)
class StateCosts:
    """Seconds of one unit's state tasks per step (arrays or scalars alike)."""

    sync: object        # GradSync: all-reduce (ZeRO 0) or reduce-scatter of the gradient
    update: object      # UpdateShard: the AdamW step over this replica's shard, DDR-bound
    prefetch: object    # PrefetchW: all-gather of the updated shards (ZeRO 1, 2)
    tie: object         # TieSum: the tied part of the synchronized gradient summed over its copies


def state_costs(D, Z, trainable, tied, tie_stages, dp_link, pp_link, ddr: float, recipe) -> StateCosts:
    """The state chain's costs of units holding `trainable` parameters (`tied` of them shared
    with units on `tie_stages` stages)."""
    grads = trainable * recipe.grad_bytes
    real = np.asarray(trainable) > 0            # nothing trained: no message, no latency
    sync = np.where(syncs_by_reduce_scatter(Z), reduce_scatter(D, grads, dp_link), all_reduce(D, grads, dp_link))
    prefetch = np.where(prefetches(Z), all_gather(D, trainable * recipe.param_bytes, dp_link), 0.0)
    # the tied part of the synchronized gradient (its shard under ZeRO >= 1, aligned across
    # the copies), summed over the copies' stages before the update
    tie = tie_sum(tie_stages, tied * recipe.grad_bytes / shards(Z, D, "optimizer"), pp_link, ddr)
    traffic = trainable / shards(Z, D, "optimizer") * recipe.update_traffic_bytes
    update = streamed_seconds(recipe.update_rows, traffic) if recipe.update_rows else traffic / ddr
    return StateCosts(sync=sync * real, update=update, prefetch=prefetch * real, tie=tie)


def gather_time(D, Z, params, dp_link, recipe):
    """The ZeRO-3 gather of a unit's fp16 parameters before a use (none without parameters)."""
    return all_gather(D, params * recipe.param_bytes, dp_link) * gathers(Z) * (np.asarray(params) > 0)

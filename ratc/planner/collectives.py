"""Link model and ring collectives (alpha-beta: latency + bytes / bandwidth per message).

Every function also takes numpy arrays, so the search can cost many candidates at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratc.errors import RatcError


@dataclass(frozen=True)
class Link:
    """A point-to-point link: per-message latency (s) and bandwidth (B/s)."""

    latency: float
    bandwidth: float

    def send(self, nbytes: float) -> float:
        """Seconds to move one message."""
        return self.latency + nbytes / self.bandwidth


def link_for(platform, span) -> Link:
    """The slowest link a group spanning `span` consecutive clusters uses."""
    net = platform.network
    intra = np.asarray(span) <= net.clusters_per_node
    return Link(np.where(intra, net.intra_node_latency, net.inter_node_latency),
                np.where(intra, net.intra_node_bandwidth, net.inter_node_bandwidth))


def check_algorithm(platform) -> None:
    """Only ring collectives are modelled."""
    if platform.collective.algorithm != "ring":
        raise RatcError(f"{platform.source}: collective algorithm {platform.collective.algorithm!r} "
                        "is not modelled by the planner (supported: 'ring')")


def reduce_scatter(n: int, nbytes: float, link: Link) -> float:
    """Ring reduce-scatter of an nbytes buffer over n ranks: n-1 steps of nbytes/n (0 if n=1)."""
    return (n - 1) * (link.latency + nbytes / (n * link.bandwidth))


def all_gather(n: int, nbytes: float, link: Link) -> float:
    """Ring all-gather producing an nbytes buffer on n ranks."""
    return reduce_scatter(n, nbytes, link)


def all_reduce(n: int, nbytes: float, link: Link) -> float:
    """Ring all-reduce: a reduce-scatter followed by an all-gather."""
    return 2 * reduce_scatter(n, nbytes, link)


def tie_sum(stages, nbytes, link: Link, ddr: float):
    """Summing a tied parameter's gradient over its copies: an all-reduce between the `stages`
    stages holding one (Megatron's embedding group), or on one stage a local add (two reads,
    one write on DDR). 0 where there is nothing tied."""
    return np.where(np.asarray(nbytes) > 0,
                    np.where(np.asarray(stages) > 1, all_reduce(np.maximum(stages, 1), nbytes, link),
                             3 * np.asarray(nbytes) / ddr), 0.0)

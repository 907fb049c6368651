"""Link model and ring collectives (alpha-beta: latency + bytes / bandwidth per message).

Every function also takes numpy arrays, so the search can cost many candidates at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratc.errors import RatcError
from ratc.step.rules import streamed_seconds

# What ratc's distributed transport and the executor's handlers move on the compute thread per
# byte of a collective's buffer beyond the collective itself (ratc.dist.transport): an
# all-reduce's copy before it and its mean after (each a read and a write: 4), a reduce-
# scatter's mean and the add into the micro-batches' sum, per byte of the shard (2 + 3), an
# all-gather's copy out of its receive buffer (2). Priced as the host's copies stream, where a
# program's collectives run in the compute stream (in `tiny`'s ZeRO-3 step, 20 ms between ops).
HANDLED = {"all_reduce": (4, False), "reduce_scatter": (5, True), "all_gather": (2, False)}


@dataclass(frozen=True)
class Link:
    """A point-to-point link: per-message latency (s) and bandwidth (B/s)."""

    latency: float
    bandwidth: float
    # a host's measured collectives ([[collectives]]): ((op, ranks, latency, bandwidth), ...),
    # which price its collectives in place of the ring over this link
    measured: tuple = ()
    # ... and its [[beside]] rows ((op, ranks, bytes, seconds), ...): what a collective or a
    # hand-off (op "p2p") costs issued beside compute, which prices it where `inline` (bool, or
    # [C, 1] per candidate: Platform.collectives_in_compute_stream)
    beside: tuple = ()
    inline: object = False
    # ... and the host's [[memory]] copy rows ((bytes, seconds), ...), which price HANDLED
    copies: tuple = ()

    def send(self, nbytes: float) -> float:
        """Seconds to move one message (on a host whose messages run in the compute stream, a
        hand-off beside compute: gloo moves it only as the scheduler hands its threads a core)."""
        alone = self.latency + nbytes / self.bandwidth
        beside = beside_seconds(self.beside, "p2p", 2, nbytes) if np.any(self.inline) else None
        return alone if beside is None else np.where(self.inline, np.maximum(alone, beside), alone)


def link_for(platform, span, ranks=None) -> Link:
    """The slowest link a group spanning `span` consecutive clusters uses, in a program of
    `ranks` processes (a host's collectives run in its compute stream once they take every core)."""
    net = platform.network
    intra = np.asarray(span) <= net.clusters_per_node
    host = getattr(platform, "kind", "dsp") == "host"
    measured = tuple((r.op, r.ranks, r.latency.median, r.bandwidth.median) for r in platform.collectives) if host else ()
    beside = tuple((r.op, r.ranks, r.bytes, r.seconds.median) for r in platform.beside) if host else ()
    inline = platform.collectives_in_compute_stream(ranks) if host and ranks is not None else False
    copies = tuple(sorted((r.bytes, r.seconds.median) for r in platform.memory if r.op == "copy")
                   or sorted((r.bytes, r.seconds.median) for r in platform.memory if r.op == "add")) if host else ()
    return Link(np.where(intra, net.intra_node_latency, net.inter_node_latency),
                np.where(intra, net.intra_node_bandwidth, net.inter_node_bandwidth), measured, beside, inline, copies)


def check_algorithm(platform) -> None:
    """Only ring collectives are modelled."""
    if platform.collective.algorithm != "ring":
        raise RatcError(f"{platform.source}: collective algorithm {platform.collective.algorithm!r} "
                        "is not modelled by the planner (supported: 'ring')")


def reduce_scatter(n: int, nbytes: float, link: Link) -> float:
    """Ring reduce-scatter of an nbytes buffer over n ranks: n-1 steps of nbytes/n (0 if n=1)."""
    fit = _fit(link, "reduce_scatter", n, nbytes)
    return _ring(n, nbytes, link) if fit is None else fit


def all_gather(n: int, nbytes: float, link: Link) -> float:
    """Ring all-gather producing an nbytes buffer on n ranks."""
    fit = _fit(link, "all_gather", n, nbytes)
    return _ring(n, nbytes, link) if fit is None else fit


def all_reduce(n: int, nbytes: float, link: Link) -> float:
    """Ring all-reduce: a reduce-scatter followed by an all-gather."""
    fit = _fit(link, "all_reduce", n, nbytes)
    return 2 * _ring(n, nbytes, link) if fit is None else fit


def _fit(link: Link, op: str, n, nbytes):
    """A host's collective from its measured fit (None if unmeasured); where the program runs
    it in the compute stream, the fit of its cost beside compute (at least its time alone)."""
    alone = measured(link.measured, op, n, nbytes)
    if alone is None or not np.any(link.inline):
        return alone
    beside = beside_seconds(link.beside, op, n, nbytes)
    if beside is None:
        return alone
    return np.where(link.inline, np.maximum(alone, beside) + handled(link, op, n, nbytes), alone)


def handled(link: Link, op: str, n, nbytes):
    """Seconds of the copies ratc's runtime makes around a collective over n ranks of an nbytes
    buffer on the compute thread (HANDLED), at the host's copy rate; 0 without copy rows or a
    collective (n = 1)."""
    if not link.copies:
        return 0.0
    per_byte, shard = HANDLED[op]
    n = np.asarray(n)
    moved = per_byte * np.asarray(nbytes, dtype=float) / (np.maximum(n, 1) if shard else 1)
    return streamed_seconds(link.copies, moved) * (n > 1)


def _ring(n, nbytes, link: Link):
    """n-1 steps of nbytes/n over the link (0 if n=1)."""
    return (n - 1) * (link.latency + nbytes / (n * link.bandwidth))


def measured(rows: tuple, op: str, n, nbytes):
    """A host's collective over n ranks (0 if n=1): latency + nbytes / bandwidth of the
    [[collectives]] fit measured over the nearest group size (the largest at most n, else the
    smallest), its latency scaled by the ring's n - 1 steps and its bandwidth term by the
    ring's (n - 1) / n share of the buffer against the measured group's. None where the op was
    not measured (a hand-written profile): it then runs as a ring over the link."""
    fits = sorted((r, lat, bw) for o, r, lat, bw in rows if o == op)
    if not fits:
        return None
    n = np.asarray(n)
    out = np.zeros(np.broadcast_shapes(n.shape, np.shape(nbytes)))
    for i, (r, lat, bw) in enumerate(fits):
        upper = fits[i + 1][0] if i + 1 < len(fits) else np.inf
        use = (n >= r) & (n < upper) if i else (n >= 2) & (n < upper)
        share = (n - 1) / np.maximum(n, 1) * r / (r - 1)
        t = (lat * (n - 1) / (r - 1) + nbytes * share / bw) * (n > 1)
        out = np.where(use, t, out)
    return out if out.ndim else float(out)


def beside_seconds(rows: tuple, op: str, n, nbytes):
    """A host's collective (or hand-off: op "p2p", n = 2) over n ranks issued beside compute,
    from its [[beside]] rows (op, ranks, bytes, seconds) over the nearest group size (the
    largest at most n, else the smallest), scaled by the ring's n - 1 steps against the
    measured group's: linear in bytes between a row and the next, the first row's time under
    it (a message's fixed cost does not shrink), the last two rows' slope past the last. 0 if
    n = 1; None where the op was not measured."""
    groups = sorted({r for o, r, _, _ in rows if o == op})
    if not groups:
        return None
    n = np.asarray(n)
    out = np.zeros(np.broadcast_shapes(n.shape, np.shape(nbytes)))
    for i, r in enumerate(groups):
        xs, ts = (np.array(v, dtype=float) for v in zip(*sorted((b, t) for o, g, b, t in rows if o == op and g == r)))
        upper = groups[i + 1] if i + 1 < len(groups) else np.inf
        use = (n >= r) & (n < upper) if i else (n >= 2) & (n < upper)
        x = np.asarray(nbytes, dtype=float)
        slope = (ts[-1] - ts[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else 0.0
        t = np.where(x > xs[-1], ts[-1] + (x - xs[-1]) * max(slope, 0.0), np.interp(x, xs, ts))
        out = np.where(use, t * (n - 1) / (r - 1) * (n > 1), out)
    return out if out.ndim else float(out)


def tie_sum(stages, nbytes, link: Link, ddr: float):
    """Summing a tied parameter's gradient over its copies: an all-reduce between the `stages`
    stages holding one (Megatron's embedding group), or on one stage a local add (two reads,
    one write on DDR). 0 where there is nothing tied."""
    return np.where(np.asarray(nbytes) > 0,
                    np.where(np.asarray(stages) > 1, all_reduce(np.maximum(stages, 1), nbytes, link),
                             3 * np.asarray(nbytes) / ddr), 0.0)

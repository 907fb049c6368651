"""The torch.distributed transport: one (stage, replica) per process.

Rank = p * D + r on a (pp, dp) mesh. Stage-boundary messages are `isend` / `irecv` of
preallocated tensors (their fields from the meta rehearsal, per channel: under interleaved
1F1B a stage sends its peer across several chunk boundaries; no headers, no tags: the
verifier makes each stage pair's receives follow its sends' order); a receive is
waited at its first reader, a send only at the step's end (gloo completes a send when the
peer receives, and its tensor must live until then). GradSync is an asynchronous
all-reduce (ZeRO 0) or reduce-scatter on the stage's dp group, a gather an asynchronous
all-gather, each issued where the program puts it and waited at its first reader. Every
wait has a timeout; one that expires ends the rank with the op, the rank and the peer named.
A message from a stage to itself (ZB-V: rank P-1 holds both stages at the bottom of the V)
stays in the process.
"""

from __future__ import annotations

import datetime
import time

import torch
import torch.distributed as dist

from ratc.errors import RatcError
from ratc.lifecycle.actions import token
from ratc.vm.functional.executor import Pending, describe
from ratc.vm.functional.transport import message_key, message_kind, step_loss
from ratc.vm.system.life import TASK_KINDS


COLLECTIVE_KINDS = ("all-reduce", "reduce-scatter", "all-gather")


class RuntimeFailure(RatcError):
    """A rank cannot go on: a wait timed out, a peer is gone, a collective failed."""


class Mesh:
    """The (pp, dp) rank layout and its process groups, created eagerly in one order on every rank."""

    def __init__(self, P: int, D: int, rank: int, tie_stages: list | None = None):
        self.P, self.D, self.rank = P, D, rank
        self.p, self.r = divmod(rank, D)
        # every rank creates every group, in the same order (torch.distributed requires it)
        self.dp_groups = [dist.new_group([p * D + r for r in range(D)]) for p in range(P)]
        # per tie group spanning stages, per replica r: the ranks of its stages' replica r
        # (Megatron's embedding group), None for a group on one stage
        self.tie_groups = [[dist.new_group([q * D + r for q in stages]) for r in range(D)] if len(stages) > 1
                           else None for stages in tie_stages or ()]

    def rank_of(self, p: int, r: int) -> int:
        return p * self.D + r

    def where(self, rank: int | None = None) -> str:
        rank = self.rank if rank is None else rank
        p, r = divmod(rank, self.D)
        return f"rank {rank} (stage {p}, replica {r})"


class DistTransport:
    """This rank's stage and replica; tensors cross by torch.distributed."""

    def __init__(self, mesh: Mesh, specs: dict, M: int, timeout_s: float, device: torch.device,
                 check_collectives: bool = False):
        self.mesh, self.specs, self.M = mesh, specs, M
        self.stages, self.replicas = [mesh.p], [mesh.r]
        self.timeout = datetime.timedelta(seconds=timeout_s)
        self.device = device
        self.group = mesh.dp_groups[mesh.p]
        self.check_collectives = check_collectives
        self.sends: list = []
        self.handovers: dict = {}   # messages from this stage to itself (ZB-V), by message_key
        self.issued = 0             # collectives issued this step (the fingerprint's index)
        self.recorder = None        # a ratc.dist.trace.Recorder, to record transfers and waits
        self.waited_ns = 0          # this step's time blocked on transfers and collectives
        self.exposed: list = []     # last step's waited seconds, per rank
        self.stop_requested = False  # this rank was asked to stop (SIGTERM while checkpointing)
        self.stopping = False       # some rank was, as of the last step's end: every rank stops

    # ---- waits ---------------------------------------------------------------------------------

    def _wait(self, work, what: str, peer: str, span: tuple | None = None) -> None:
        """Wait for async work; `span` = (track, task name, kind, issue ns) records it if tracing."""
        start = time.time_ns()
        try:
            work.wait(timeout=self.timeout)
            self.waited_ns += time.time_ns() - start
        except Exception as exc:  # noqa: BLE001 - gloo raises RuntimeError of many kinds
            waited = (time.time_ns() - start) / 1e9
            reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if waited >= self.timeout.total_seconds():
                raise RuntimeFailure(f"{self.mesh.where()}: {what} did not complete within "
                                     f"{self.timeout.total_seconds():g} s waiting for {peer} ({reason})") from None
            raise RuntimeFailure(f"{self.mesh.where()}: {what} failed after {waited:.1f} s waiting for {peer} "
                                 f"({reason})") from None
        if self.recorder is not None and span is not None:
            track, name, kind, issued = span
            end = time.time_ns()
            self.recorder.span(track, name, kind, issued, end, peer=peer)
            if track != "send":         # a send is waited at the step's end, off the critical path
                self.recorder.span("waits", f"wait {name}", "wait", start, end, peer=peer)

    def _span(self, track: str, op) -> tuple:
        return (track, token(op, self.mesh.p), TASK_KINDS.get(op.name, op.name[5:]), time.time_ns())

    def _peers(self) -> str:
        return "replicas " + ", ".join(self.mesh.where(self.mesh.rank_of(self.mesh.p, r))
                                       for r in range(self.mesh.D) if r != self.mesh.r) if self.mesh.D > 1 else "nobody"

    # ---- steps ---------------------------------------------------------------------------------

    def barrier(self, what: str = "the barrier before the first step") -> None:
        """Every rank reaches this point before any goes on."""
        self._wait(dist.barrier(async_op=True), what, "every rank")

    def begin_step(self) -> None:
        self.sends = []
        self.handovers.clear()
        self.issued = 0
        self.waited_ns = 0

    def _issue(self, op, kind: str, tensor: torch.Tensor) -> None:
        """Count a collective; with check_collectives, first agree with the dp group on it."""
        self.issued += 1
        if not self.check_collectives or self.mesh.D == 1:
            return
        unit = op.attributes.get("unit", -1)
        mine = torch.tensor([self.issued, COLLECTIVE_KINDS.index(kind), unit, tensor.numel() * tensor.element_size()],
                            dtype=torch.int64, device=self.device)
        every = torch.empty(self.mesh.D * mine.numel(), dtype=torch.int64, device=self.device)
        self._wait(dist.all_gather_single(every, mine, group=self.group, async_op=True),
                   f"the fingerprint of {describe(op)}", self._peers())
        rows = every.view(self.mesh.D, -1).tolist()
        if any(row != rows[0] for row in rows):
            said = "; ".join(f"{self.mesh.where(self.mesh.rank_of(self.mesh.p, r))} issues "
                             f"{COLLECTIVE_KINDS[k]} of unit {u} ({n} bytes)" for r, (_, k, u, n) in enumerate(rows))
            raise RuntimeFailure(f"{self.mesh.where()}: collective #{self.issued} of the step differs across "
                                 f"the replicas at {describe(op)}: {said}")

    def end_step(self, losses: dict, count: int) -> float:
        """Wait for this step's sends, then share the losses (the head stage's), each rank's
        time blocked on communication and whether any rank was asked to stop, with every rank."""
        for work, _tensor, what, peer, span in self.sends:
            self._wait(work, what, peer, span)
        self.sends = []
        world = self.mesh.P * self.mesh.D
        table = torch.zeros(count + world + 1, dtype=torch.float64, device=self.device)
        for (r, m), loss in losses.items():
            table[r * self.M + m] = float(loss)
        table[count + self.mesh.rank] = self.waited_ns / 1e9
        table[-1] = float(self.stop_requested)
        # Each slot is written by one rank; the others add exact zeros.
        work = dist.all_reduce(table, async_op=True)
        self._wait(work, "the step's loss all-reduce", "every rank")
        values = table.tolist()
        self.exposed = values[count:count + world]
        self.stopping = values[-1] > 0
        return step_loss({divmod(i, self.M): v for i, v in enumerate(values[:count])}, count)

    # ---- stage-boundary messages -------------------------------------------------------------

    def ready(self, p: int, op) -> bool:
        """A receive is posted at once and waited at its reader; one from this stage itself
        (ZB-V's hand-over at the bottom of the V) runs once its send has."""
        return op.attributes["peer"] != p or message_key(p, op) in self.handovers

    def send(self, p: int, op, value: list) -> None:
        a = op.attributes
        if a["peer"] == p:          # both chunks are on this rank: the value stays here
            self.handovers[message_key(p, op)] = value
            return
        peer = self.mesh.rank_of(a["peer"], self.mesh.r)
        fields = self.specs[message_kind(p, op)]
        what = describe(op)
        for f in fields:
            if f.shape is None:
                continue
            t = value[0][f.name]
            if tuple(t.shape) != f.shape or t.dtype != f.dtype:
                raise RuntimeFailure(f"{self.mesh.where()}: {what}: '{f.name}' is {tuple(t.shape)} {t.dtype}, "
                                     f"the rehearsal sent {f.shape} {f.dtype}")
            t = t.contiguous()
            span = self._span("send", op)
            self.sends.append((dist.isend(t, dst=peer), t, f"{what} ('{f.name}')", self.mesh.where(peer), span))

    def recv(self, p: int, op) -> Pending | list:
        a = op.attributes
        if a["peer"] == p:
            return self.handovers.pop(message_key(p, op))
        peer = self.mesh.rank_of(a["peer"], self.mesh.r)
        fields = self.specs[message_kind(p, op)]
        got = {f.name: f.empty(self.device) for f in fields}
        span = self._span("receive", op)
        works = [(dist.irecv(got[f.name], src=peer), f.name) for f in fields if f.shape is not None]
        what = describe(op)

        def wait():
            for work, name in works:
                self._wait(work, f"{what} ('{name}')", self.mesh.where(peer), span)
            return [got]
        return Pending(wait, keep=tuple(got.values()))

    # ---- collectives on the stage's dp group --------------------------------------------------

    def all_reduce_mean(self, p: int, op, tensors: list) -> Pending | list:
        if self.mesh.D == 1:
            # one replica's mean is its own gradient: no copy, no call, no wait (UpdateShard
            # reads it without writing, as it reads the all-reduced one)
            return [tensors[0]]
        total = tensors[0].clone()
        self._issue(op, "all-reduce", total)
        span = self._span("collectives", op)
        work = dist.all_reduce(total, group=self.group, async_op=True)
        D, what = self.mesh.D, describe(op)

        def wait():
            self._wait(work, what, self._peers(), span)
            return [total / D]
        return Pending(wait, keep=(total,))

    def reduce_scatter_mean(self, p: int, op, tensors: list) -> Pending:
        full = tensors[0].contiguous()
        shard = torch.empty(full.numel() // self.mesh.D, dtype=full.dtype, device=full.device)
        self._issue(op, "reduce-scatter", full)
        span = self._span("collectives", op)
        work = dist.reduce_scatter_single(shard, full, group=self.group, async_op=True)
        D, what = self.mesh.D, describe(op)

        def wait():
            self._wait(work, what, self._peers(), span)
            return [shard / D]
        return Pending(wait, keep=(full, shard))

    def tie_sum(self, p: int, op, partial: list, group: int, stages: list) -> Pending:
        """The tied-gradient part summed with the group's other stages (same replica)."""
        total = partial[0].contiguous().clone()
        self._issue(op, "all-reduce", total)
        span = self._span("collectives", op)
        work = dist.all_reduce(total, group=self.mesh.tie_groups[group][self.mesh.r], async_op=True)
        what = describe(op)
        peers = ", ".join(self.mesh.where(self.mesh.rank_of(q, self.mesh.r)) for q in stages if q != self.mesh.p)

        def wait():
            self._wait(work, what, peers, span)
            return [total]
        return Pending(wait, keep=(total,))

    def all_gather(self, p: int, op, shards: list, n: int) -> Pending:
        shard = shards[0].contiguous()
        full = torch.empty(shard.numel() * self.mesh.D, dtype=shard.dtype, device=shard.device)
        self._issue(op, "all-gather", shard)
        span = self._span("collectives", op)
        work = dist.all_gather_single(full, shard, group=self.group, async_op=True)
        what = describe(op)

        def wait():
            self._wait(work, what, self._peers(), span)
            return [full[:n].clone()]
        return Pending(wait, keep=(shard, full))

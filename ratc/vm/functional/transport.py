"""How tensors cross stages and replicas: the one-process transport of the functional executor.

The executor's op handlers are written once; a transport says which stages and replicas
this process holds and moves their tensors. `LocalTransport` holds every stage and replica
in one process (messages in a mailbox, collectives as sums over lists); the distributed
runtime's transport (`ratc.dist.transport`) holds one (stage, replica) per process and
uses torch.distributed. Lists of per-replica values follow `replicas` (global indices).
"""

from __future__ import annotations

import torch

from ratc.errors import RatcError


def message_kind(p: int, op) -> tuple:
    """(sending stage, receiving stage, direction, boundary unit) of a life.send / life.recv: the
    channel its micro-batches cross in order. Under interleaved 1F1B a stage sends its peer
    across several chunk boundaries, so the boundary unit (None when v = 1) tells them apart."""
    a = op.attributes
    ends = (a["peer"], p) if op.name == "life.recv" else (p, a["peer"])
    return (*ends, a["dir"], a.get("unit"))


def message_key(p: int, op) -> tuple:
    """The message's channel (`message_kind`) and its micro-batch: unique within a step."""
    return (*message_kind(p, op), op.attributes["mb"])


def sum_of(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors' sum in list order (as a two-operand all-reduce sums)."""
    total = tensors[0].clone()
    for t in tensors[1:]:
        total += t
    return total


def mean_of(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The replicas' mean, summed in replica order."""
    return sum_of(tensors) / len(tensors)


def step_loss(losses: dict, count: int) -> float:
    """The step's loss: the mean of every (replica, micro-batch) loss (a float or a 0-d
    tensor), summed in key order as Python floats."""
    if len(losses) != count:
        raise RatcError(f"the step produced {len(losses)} micro-batch losses, expected {count}")
    return sum(float(losses[k]) for k in sorted(losses)) / count


class LocalTransport:
    """Every stage and replica in this process."""

    def __init__(self, P: int, D: int):
        self.stages = list(range(P))
        self.replicas = list(range(D))
        self.mailbox: dict = {}
        self.ties: dict = {}        # tie group -> {stage: its per-replica partial sums}

    def begin_step(self) -> None:
        self.mailbox.clear()
        self.ties.clear()

    def ready(self, p: int, op) -> bool:
        """Whether stage p's life.recv can run now (its message was sent)."""
        return message_key(p, op) in self.mailbox

    def send(self, p: int, op, value: list) -> None:
        key = message_key(p, op)
        if key in self.mailbox:
            raise RatcError("the same message was sent twice")
        self.mailbox[key] = value

    def recv(self, p: int, op) -> list:
        return self.mailbox.pop(message_key(p, op))

    def all_reduce_mean(self, p: int, op, tensors: list[torch.Tensor]) -> list:
        mean = mean_of(tensors)
        return [mean] * len(tensors)      # readers do not write it: the replicas share it

    def reduce_scatter_mean(self, p: int, op, tensors: list[torch.Tensor]) -> list:
        """Shard r of the replicas' mean goes to replica r."""
        return list(mean_of(tensors).chunk(len(tensors)))

    def all_gather(self, p: int, op, shards: list[torch.Tensor], n: int) -> list:
        """The full flat vector (first n elements) from every replica's shard, for each replica."""
        view = torch.cat(shards)[:n].clone()
        return [view] * len(shards)       # read-only views: the replicas' copies share storage

    def tie_sum(self, p: int, op, partial: list, group: int, stages: list):
        """Each replica's tied-gradient part summed over the group's stages (in stage order),
        once every one of them has contributed its own."""
        from ratc.vm.functional.executor import Pending

        posts = self.ties.setdefault(group, {})
        if p in posts:
            raise RatcError(f"stage {p} summed tie group {group} twice in one step")
        posts[p] = partial

        def wait():
            if len(posts) != len(stages):
                raise RatcError(f"tie group {group}: stages {sorted(set(stages) - posts.keys())} have not contributed")
            return [sum_of([posts[q][k] for q in sorted(posts)]) for k in range(len(partial))]
        return Pending(wait, ready=lambda: len(posts) == len(stages))

    def end_step(self, losses: dict, count: int) -> float:
        return step_loss(losses, count)

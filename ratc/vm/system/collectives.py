"""Ring collectives across a stage's D data-parallel replicas, as point-to-point link tasks.

A ring reduce-scatter (or all-gather) of an nbytes buffer over D ranks is D-1 steps; in
step k every rank r sends one nbytes/D chunk to rank r+1 over its transmit port and rank
r+1's receive port, and may only forward what it received in step k-1 from rank r-1.
An all-reduce is a reduce-scatter followed by an all-gather (2(D-1) steps).

Explicit form: every replica's steps are tasks. Symmetric form (TaskGraph.symmetric): the
replicas run identical schedules, so rank r-1's step k-1 ends exactly when rank r's does,
and rank r+1's receive port is as busy as rank r's own; replica 0 alone is simulated,
with each step on its own transmit and receive ports, chained to its own previous step.
"""

from __future__ import annotations

import math

from ratc.errors import RatcError
from ratc.vm.system.task_graph import CycleLink, TaskGraph

STEPS = {"reduce_scatter": 1, "all_gather": 1, "all_reduce": 2}


def ring_steps(op: str, D: int) -> int:
    """Point-to-point steps of a ring collective over D ranks."""
    if op not in STEPS:
        raise RatcError(f"unknown collective {op!r} (known: {', '.join(STEPS)})")
    return STEPS[op] * (D - 1)


def ring(prog: TaskGraph, op: str, stage: int, nbytes: int, link: CycleLink, deps, name: str,
         kind: str = "grad_sync", layer: int = -1, step: int = 0, priority: int | None = None) -> list:
    """Add a ring collective of an nbytes buffer; deps[r] are replica r's inputs. Returns per
    replica the tasks after which its result is complete (its inputs when D = 1)."""
    ring_steps(op, prog.replicas)
    return ring_of_steps(prog, op, stage, link.cycles(math.ceil(nbytes / prog.replicas)), deps, name, kind,
                         layer=layer, step=step, priority=priority)


def ring_of_steps(prog: TaskGraph, op: str, stage: int, cycles: int, deps, name: str, kind: str,
                  layer: int = -1, step: int = 0, priority: int | None = None) -> list:
    """A ring collective whose every point-to-point step takes `cycles`."""
    D = prog.replicas
    n_steps = ring_steps(op, D)
    if D == 1:
        return [tuple(deps[0])]
    if prog.symmetric:
        prev = tuple(deps[0])
        for k in range(n_steps):
            i = prog.add(f"{name}#{k}", kind, stage, ("tx", "rx"), cycles, deps=prev, layer=layer, step=step,
                         priority=priority)
            prev = (i,)
        return [prev]
    last = [tuple(deps[r]) for r in range(D)]
    first = []
    for k in range(n_steps):
        ids = []
        for r in range(D):
            # step k sends on what rank r-1 sent in step k-1, after rank r's own step k-1 (a
            # rank runs its steps in order, and a reduction adds its own input to each chunk)
            after = last[r] if k == 0 else (last[(r - 1) % D][0], last[r][0])
            ids.append(prog.add(f"{name}#{k}", kind, stage, ((stage, r, "tx"), (stage, (r + 1) % D, "rx")),
                                 cycles, deps=after, replica=r, layer=layer, template=ids[0] if ids else -1,
                                 step=step, priority=priority))
        last = [(i,) for i in ids]
        first = first or ids
    # rank r holds its result once the last chunk from rank r-1 has arrived and its own input
    # (which the result contains) is there: its first step, which waited for it, has run
    # (one task, where the inputs could be many: results feed further collectives)
    return [(last[(r - 1) % D][0], first[r]) for r in range(D)]

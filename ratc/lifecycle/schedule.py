"""Reorder stage programs into the 1F1B main-path order, and find main tasks in an order."""

from __future__ import annotations

from ratc.errors import RatcError
from ratc.lifecycle.checks import plan_of
from ratc.lifecycle.onefoneb import stage_order
from ratc.step.rules import reduces_per_micro_batch

HEADER_OPS = frozenset({"life.param", "life.opt"})
STATE_OPS = frozenset({"life.grad_sync", "life.update", "life.prefetch"})


def main_task(op) -> tuple[str, int] | None:
    """The main-path task an op belongs to: ("F", m), ("B", m), or None for state ops."""
    a = op.attributes
    name = op.name
    if name == "life.fwd":
        return ("F", a["mb"])
    if name in ("life.bwd", "life.recover", "life.reduce"):
        return ("B", a["mb"])
    if name in ("life.recv", "life.send"):
        return ("F" if a["dir"] == "fwd" else "B", a["mb"])
    if name == "life.gather":
        return ("F" if a["phase"] == "fwd" else "B", a["mb"])
    return None


def reorder_stage(stage, P: int, M: int) -> None:
    """Issue the stage's ops as: state allocations, 1F1B main tasks, the state chain, step_end."""
    ops = stage.region.ops
    header = [op for op in ops if op.name in HEADER_OPS]
    groups: dict = {}
    rest = []
    for op in ops:
        if op.name in HEADER_OPS:
            continue
        task = main_task(op)
        if task is None:
            rest.append(op)
        else:
            groups.setdefault(task, []).append(op)
    body = header
    for task in stage_order(P, M, stage.attributes["stage"]):
        body += groups.pop(task, [])
    if groups:
        raise RatcError(f"stage {stage.attributes['stage']}: tasks outside micro-batches 0..{M - 1}: "
                        f"{', '.join(f'{k}{m}' for k, m in sorted(groups))}")
    ends = [op for op in rest if op.name == "life.step_end"]
    ops[:] = body + [op for op in rest if op.name != "life.step_end"] + ends
    if reduces_per_micro_batch(plan_of(stage.block.parent).attributes["Z"]):
        # A ZeRO >= 2 GradSync frees the last bucket's buffer, which later Backwards wait for:
        # it stays right after its Backward(l, M-1), as the lowering emitted it.
        syncs = [op for op in ops if op.name == "life.grad_sync"]
        last_bwd = {op.attributes["unit"]: op for op in ops if op.name == "life.bwd" and op.attributes["mb"] == M - 1}
        ops[:] = [op for op in ops if op.name != "life.grad_sync"]
        for op in syncs:
            ops.insert(ops.index(last_bwd[op.attributes["unit"]]) + 1, op)


def group_starts(ops) -> list[int]:
    """Positions where a new main task begins (the op list's main-task boundaries). A
    co-running Recover (fsr) runs inside its host's task and a ZeRO-3 gather is issued ahead
    of the task it feeds, so neither begins one."""
    starts, prev = [], None
    for i, op in enumerate(ops):
        if op.attributes.get("placement") == "corun" or op.name == "life.gather":
            continue
        task = main_task(op)
        if task is not None and task != prev:
            starts.append(i)
            prev = task
    return starts

"""Reorder stage programs into the 1F1B main-path order (interleaved 1F1B when the plan has
v > 1 virtual stages per rank, ZB1P when its schedule says so), and find main tasks in an order."""

from __future__ import annotations

from ratc.errors import RatcError
from ratc.lifecycle.checks import message, own_unit, plan_of
from ratc.lifecycle.onefoneb import stage_order
from ratc.step.schedules import rank_order
from ratc.step.rules import reduces_per_micro_batch

HEADER_OPS = frozenset({"life.param", "life.opt"})
STATE_OPS = frozenset({"life.grad_sync", "life.update", "life.prefetch"})
# The tasks making a layer's micro-batch gradient: a Backward, or a zero-bubble W.
GRAD_OPS = frozenset({"life.bwd", "life.bwd_w"})


def main_task(op, chunk_of: dict | None = None, zb: bool = False) -> tuple | None:
    """The main-path task an op belongs to: ("F", m), ("B", m), or None for state ops; with
    `chunk_of` ({unit: chunk}, interleaved) ("F", m, chunk) and ("B", m, chunk). Under a
    zero-bubble schedule (`zb`) the backward's parts are ("I", m) -- with its Recovers,
    gathers and transfers -- and ("W", m) with its reduces."""
    a = op.attributes
    name = op.name
    back = "I" if zb else "B"
    if name == "life.fwd":
        task = ("F", a["mb"])
    elif name in ("life.bwd", "life.recover", "life.bwd_i"):
        task = (back, a["mb"])
    elif name in ("life.bwd_w", "life.reduce"):
        task = ("W" if zb else "B", a["mb"])
    elif name in ("life.recv", "life.send"):
        task = ("F" if a["dir"] == "fwd" else back, a["mb"])
    elif name == "life.gather":
        task = ("F" if a["phase"] == "fwd" else back, a["mb"])
    else:
        return None
    return task if chunk_of is None else (*task, chunk_of[own_unit(op)])


def reorder_stage(stage, P: int, M: int) -> None:
    """Issue the stage's ops as: state allocations, 1F1B main tasks, the state chain, step_end."""
    ops = stage.region.ops
    plan = plan_of(stage.block.parent)
    v, p = plan.attributes.get("v", 1), stage.attributes["stage"]
    sched = plan.attributes.get("sched", "1f1b")
    chunk_of = {u.attributes["index"]: u.attributes["chunk"] for u in plan.region.ops} if v > 1 else None
    # (a.stage // P: the action's chunk, ZBV's V included)
    order = stage_order(P, M, p) if v == 1 else \
        [(a.kind, a.mb, a.stage // P) for a in rank_order(P, v, M, p, sched)]
    header = [op for op in ops if op.name in HEADER_OPS]
    groups: dict = {}
    rest = []
    for op in ops:
        if op.name in HEADER_OPS:
            continue
        task = main_task(op, chunk_of, sched != "1f1b")
        if task is None:
            rest.append(op)
        else:
            groups.setdefault(task, []).append(op)
    body = header
    for task in order:
        body += groups.pop(task, [])
    if groups:
        raise RatcError(f"stage {p}: tasks outside micro-batches 0..{M - 1}: "
                        f"{', '.join(''.join(map(str, t)) for t in sorted(groups))}")
    ends = [op for op in rest if op.name == "life.step_end"]
    ops[:] = body + [op for op in rest if op.name != "life.step_end"] + ends
    if reduces_per_micro_batch(plan.attributes["Z"]):
        # A ZeRO >= 2 GradSync frees the last bucket's buffer, which later Backwards wait for:
        # it stays right after its Backward(l, M-1) (zero bubble: its W), as the lowering emitted it.
        syncs = [op for op in ops if op.name == "life.grad_sync"]
        last_bwd = {op.attributes["unit"]: op for op in ops
                    if op.name in GRAD_OPS and op.attributes["mb"] == M - 1}
        ops[:] = [op for op in ops if op.name != "life.grad_sync"]
        for op in syncs:
            ops.insert(ops.index(last_bwd[op.attributes["unit"]]) + 1, op)


def order_sends(pipe) -> None:
    """Issue each stage's sends to a peer in the order that peer receives them (two stages'
    messages match in order: ratc.lifecycle.checks.simulate_issue). Under ZB1P a rank may
    produce a boundary value before one its peer waits for first; such a send moves to right
    after the one received before it -- a send is buffered, so issuing it later holds back
    neither its stage nor its peer, which needs the earlier message first anyway."""
    stages = pipe.region.ops
    received: dict = {}         # (src, dst) -> messages in dst's issue order
    for p, s in enumerate(stages):
        for op in s.region.ops:
            if op.name == "life.recv":
                k = message(op, p)
                received.setdefault(k[:2], []).append(k)
    for p, s in enumerate(stages):
        ops = s.region.ops
        place = {op: (pos, 0) for pos, op in enumerate(ops)}
        sends = {message(op, p): op for op in ops if op.name == "life.send"}
        for (src, _), keys in received.items():
            prev = None
            for k in keys if src == p else ():
                op = sends[k]
                if prev is not None and place[op] < place[prev]:
                    place[op] = (place[prev][0], place[prev][1] + 1)
                prev = op
        ops[:] = sorted(ops, key=place.__getitem__)


def group_starts(ops) -> list[int]:
    """Positions where a new main task begins (the op list's main-task boundaries). A
    co-running Recover (fsr) runs inside its host's task and a ZeRO-3 gather is issued ahead
    of the task it feeds, so neither begins one."""
    starts, prev = [], None
    zb = any(op.name == "life.bwd_w" for op in ops)
    for i, op in enumerate(ops):
        if op.attributes.get("placement") == "corun" or op.name == "life.gather":
            continue
        task = main_task(op, zb=zb)
        if task is not None and task != prev:
            starts.append(i)
            prev = task
    return starts

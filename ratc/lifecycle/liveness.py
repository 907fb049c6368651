"""Memory planning of a stage program: live ranges, lifetime tiers, buffer reuse, peak.

Per-stage memory is register pressure over the issue order. Each result with a size is a
buffer; an `inplace` op's last result continues its last operand's buffer. A buffer is
allocated when its op issues (a co-running Recover's when its host does, or, streaming into
what its host frees, after the host with the stream's headroom beside the host) and freed after
its last use, except step state (parameters, optimizer state, and what step_end hands to
the next step), which persists. While an op runs its inputs, outputs and operator
workspace (`workspace`) coexist.

Tiers fall out of live-range length (review, "Explicit lifetime-tiered memory
management"): long = persists across steps; medium = spans more than one main task
(checkpoints, gradient accumulators); short = dies within the next main task (recovery
buffers, buckets, boundary transfers). Short buffers of the same kind reuse freed ones
(best fit), so e.g. every recovery of a stage runs in one recovery buffer (two under FSR
without streaming, where a Recover co-runs with a Backward that still reads its own). Under ZeRO >= 2 a
bucket stays live until the Backward that reuses its buffer issues (that Backward reads the
token of the bucket's reduce-scatter), so a stage holds at most two buckets.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ratc.lifecycle.checks import HOST_OPS
from ratc.lifecycle.schedule import GRAD_OPS, group_starts

LONG_OPS = frozenset({"life.param", "life.opt"})


@dataclass
class Buffer:
    """One allocation: its first defining op, size, last use, tier and reuse slot."""

    name: str
    kind: str
    size: int
    born: int
    dies: int              # index of the last op that reads it (len(ops) if it persists)
    tier: str = ""
    slot: int = -1


@dataclass
class StagePlan:
    """The memory plan of one stage."""

    stage: int
    buffers: list = field(default_factory=list)
    peak: int = 0
    peak_at: int = 0
    live_at_peak: list = field(default_factory=list)   # buffers live at the peak, largest first
    tiers: dict = field(default_factory=dict)          # tier -> bytes live at the peak
    slots: int = 0


def value_name(v) -> str:
    """A readable name for a value: its hint, or producer and result index."""
    return v.name or f"{v.owner.name}#{v.index}"


# What memory-plan writes; a pass that reorders tasks afterwards makes all of it stale.
PLAN_OP_ATTRS = ("frees", "tier", "buf")
PLAN_STAGE_ATTRS = ("peak", "peak_at", "buffers", "tiers")
PLAN_PIPELINE_ATTRS = ("peak", "peak_at")


def clear_plan(pipe) -> None:
    """Drop a memory plan's annotations from the pipeline (re-run memory-plan for new ones)."""
    for key in PLAN_PIPELINE_ATTRS:
        pipe.attributes.pop(key, None)
    for stage in pipe.region.ops:
        for key in PLAN_STAGE_ATTRS:
            stage.attributes.pop(key, None)
        for op in stage.region.ops:
            for key in PLAN_OP_ATTRS:
                op.attributes.pop(key, None)


def plan_stage(stage) -> StagePlan:
    """Live ranges and the peak of one stage program; annotates `tier` and `buf` on ops."""
    ops = stage.region.ops
    n = len(ops)
    for op in ops:
        op.attributes.pop("frees", None)   # a re-run plans from scratch
    buf_of: dict = {}
    buffers: list[Buffer] = []
    hosts = corun_hosts(ops)
    for i, op in enumerate(ops):
        sizes = op.attributes.get("sizes", [])
        # a co-running Recover (fsr) fills its buffer while its host runs -- unless it streams
        # into what its host frees: then its buffer is whole when the host ends, and the host
        # holds the stream's headroom meanwhile
        born = i if "stream" in op.attributes else hosts.get(i, i)
        for j, v in enumerate(op.results):
            if op.attributes.get("inplace") and j == len(op.results) - 1 and op.operands[-1] in buf_of:
                buf_of[v] = buf_of[op.operands[-1]]
            elif sizes[j] > 0:
                b = Buffer(value_name(v), str(v.type), sizes[j], born, i)
                buffers.append(b)
                buf_of[v] = b
        for v in op.operands:
            b = buf_of.get(v)
            if b is not None:
                b.dies = n if op.name == "life.step_end" else max(b.dies, i)
    for op in ops:
        if op.name in LONG_OPS and op.result in buf_of:     # (a parameter-free unit holds none)
            buf_of[op.result].dies = n
    # ZeRO >= 2 double buffering: a bucket's buffer is free for reuse only when the Backward
    # that takes it (the reader of its collective's token) issues; until then it holds the bucket.
    for i, op in enumerate(ops):
        if op.name in GRAD_OPS:
            for v in op.operands:
                if str(v.type) == "!life.token" and v.owner.name in ("life.reduce", "life.grad_sync"):
                    b = buf_of.get(v.owner.operands[0])
                    if b is not None:
                        b.dies = max(b.dies, i - 1)
    starts = group_starts(ops)
    slot_of = [0] * (n + 1)
    k = 0
    for i in range(n + 1):
        while k < len(starts) and starts[k] <= i:
            k += 1
        slot_of[i] = k
    for b in buffers:
        if b.dies == n:
            b.tier = "long"
        elif slot_of[b.dies] - slot_of[b.born] <= 1:
            b.tier = "short"
        else:
            b.tier = "medium"
    plan = StagePlan(stage.attributes["stage"], buffers)
    _assign_slots(buffers, plan)
    _peak(ops, buffers, plan, {h: int(ops[g].attributes.get("workspace") or 0) + int(ops[g].attributes.get("stream") or 0)
                               for g, h in hosts.items()})
    freed: dict = {}
    for b in buffers:
        if b.dies < n:
            freed.setdefault(b.dies, []).append(b.slot)
    for i, op in enumerate(ops):
        if i in freed:
            op.attributes["frees"] = sorted(freed[i])
        mine = [buf_of.get(v) for v in op.results]
        if any(b is not None for b in mine):
            op.attributes["tier"] = [b.tier if b else "none" for b in mine]
            op.attributes["buf"] = [b.slot if b else -1 for b in mine]
    return plan


def _assign_slots(buffers: list[Buffer], plan: StagePlan) -> None:
    """Reuse: a short buffer takes a freed slot of its kind that is large enough (best fit)."""
    free: dict = {}       # kind -> [(size, slot)]
    events = sorted(buffers, key=lambda b: b.born)
    releases: list = []   # heap of (dies, kind, size, slot)
    sizes: dict = {}
    for b in events:
        # (the order slots are freed in does not matter: best fit takes the least (size, slot))
        while releases and releases[0][0] < b.born:
            _, kind, size, slot = heapq.heappop(releases)
            free.setdefault(kind, []).append((size, slot))
        fits = [s for s in free.get(b.kind, []) if s[0] >= b.size] if b.tier == "short" else []
        if fits:
            best = min(fits)
            free[b.kind].remove(best)
            b.slot = best[1]
        else:
            b.slot = len(sizes)
            sizes[b.slot] = b.size
        if b.tier == "short":
            heapq.heappush(releases, (b.dies, b.kind, sizes[b.slot], b.slot))
    plan.slots = len(sizes)


def corun_hosts(ops) -> dict:
    """{index of a co-running Recover: index of its host}, the compute op issued before it."""
    out, host = {}, None
    for i, op in enumerate(ops):
        if op.name in HOST_OPS:
            host = i
        elif op.name == "life.recover" and op.attributes.get("placement") == "corun" and host is not None:
            out[i] = host
    return out


def _peak(ops, buffers: list[Buffer], plan: StagePlan, guest_ws: dict) -> None:
    """Peak bytes over the order: buffers live at op i plus op i's workspace (and, while a
    host runs, its co-running Recover's)."""
    n = len(ops)
    delta = [0] * (n + 2)
    for b in buffers:
        delta[b.born] += b.size
        delta[b.dies + 1] -= b.size
    live = 0
    best, best_at = -1, 0
    for i, op in enumerate(ops):
        live += delta[i]
        ws = op.attributes.get("workspace")
        total = live + (int(ws) if ws is not None else 0) + int(guest_ws.get(i) or 0)
        if total > best:
            best, best_at = total, i
    plan.peak, plan.peak_at = max(best, 0), best_at
    at = [b for b in buffers if b.born <= best_at <= b.dies]
    plan.live_at_peak = sorted(at, key=lambda b: (-b.size, b.name))
    plan.tiers = {t: sum(b.size for b in at if b.tier == t) for t in ("long", "medium", "short")}
    ws = ops[best_at].attributes.get("workspace") if ops else None
    plan.tiers["workspace"] = (int(ws) if ws is not None else 0) + int(guest_ws.get(best_at) or 0)

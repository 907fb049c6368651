"""Verifier rules of the scheduled program (called from the life dialect's verify hooks).

Per task: its operands are exactly the values its role depends on (Forward before its
Backward, Recover before its Backward, GradSync after the layer's last Backward,
UpdateShard after GradSync, PrefetchW feeding the next step's Forward, a ZeRO >= 2
Backward after the collective that freed the bucket buffer it reuses), so removing any
dependency edge fails. Per stage: every task exists once, in-place writes come after the
last read of the value they overwrite. Per pipeline: sends and receives match one to one
and the stages, each issuing in order with buffered sends and blocking receives, all
finish (no cross-stage deadlock).
"""

from __future__ import annotations

import math

from ratc.ir.verifier import VerifyError, prefer_local, verify_op, walk_number
from ratc.step.schedules import chunk_orders, rank_of, virtual_stage
from ratc.step.rules import (backward_view, bucket_reused, gathers, holds_bucket, prefetches, unit_save_choice,
                             reduces_per_micro_batch, syncs_by_reduce_scatter)

# memory-plan's lifetime tiers (ratc.lifecycle.liveness); "none" for a result that takes no memory
TIERS = ("long", "medium", "short", "none")
_TIER_SET = frozenset(TIERS)

ACT, SAVED, REC, GRAD, PARAM, OPT, VIEW, TOKEN = ("!life.act", "!life.saved", "!life.rec", "!life.grad",
                                                 "!life.param", "!life.opt", "!life.view", "!life.token")
# A trained unit's gradient and state chain (a frozen unit has none).
STATE_TASKS = frozenset({"life.reduce", "life.grad_sync", "life.tie_sum", "life.update", "life.prefetch"})
COMM_OPS = frozenset({"life.send", "life.recv"})
# The compute tasks a co-running Recover may ride on (FSR, ratc.lifecycle.placement): under a
# zero-bubble schedule a Backward's I and its W too.
HOST_OPS = frozenset({"life.fwd", "life.bwd", "life.bwd_i", "life.bwd_w"})
TASK_OPS = frozenset({"life.param", "life.opt", "life.recv", "life.send", "life.gather", "life.fwd",
                      "life.recover", "life.bwd", "life.bwd_i", "life.bwd_w", "life.reduce", "life.grad_sync",
                      "life.tie_sum", "life.update",
                      "life.prefetch", "life.step_end"})


def frozen_units(units) -> list[int]:
    """The plan's units with nothing trained: no gradient, so no GradSync, UpdateShard,
    PrefetchW or gradient bucket."""
    return [u.attributes.get("index") for u in units if u.attributes.get("frozen") is True]


def plan_of(pipe):
    """The life.plan a pipeline names, or None (an undefined @plan is the symbol check's to report)."""
    ref = pipe.attributes.get("plan")
    ops = pipe.block.ops if pipe.block is not None else ()
    return next((op for op in ops if op.name == "life.plan" and ref is not None and op.sym_name == ref.name), None)


class _Ctx:
    """What a task's rules need: plan-wide numbers, what the plan says of its units, and its
    stage's units."""

    __slots__ = ("P", "M", "Z", "v", "act", "head", "p", "units", "first", "last", "choices", "frozen", "ties",
                 "chunk", "firsts", "lasts", "_buckets", "sched", "dx_op", "grad_op")

    def __init__(self, pipe, stage):
        plan = plan_of(pipe)
        if plan is None:
            raise VerifyError(f"'life.pipeline' names no life.plan of this module "
                              f"(plan = {pipe.attributes.get('plan')})", pipe)
        p = plan.attributes
        plan_units = plan.region.ops if plan.region is not None else ()
        self.P, self.M, self.Z, self.head = p["P"], p["A"], p["Z"], len(plan_units) - 1
        self.act = pipe.attributes["act"]       # (lower-to-life may lower another policy than the plan's)
        self.p = stage.attributes["stage"]
        self.units = stage.attributes["units"]
        self.first, self.last = self.units[0], self.units[-1]
        self.v = p.get("v", 1)
        # zero bubble: I (life.bwd_i) makes the input gradient, W (life.bwd_w) the layer's
        self.sched = p.get("sched", "1f1b")
        self.dx_op, self.grad_op = ("life.bwd", "life.bwd") if self.sched == "1f1b" else ("life.bwd_i", "life.bwd_w")
        # interleaved: each unit's chunk, and the first and last unit of each of the rank's chunks
        self.chunk = {u.attributes.get("index"): u.attributes.get("chunk", 0) for u in plan_units}
        runs = [[i for i in self.units if self.chunk.get(i) == c] for c in range(self.v)]
        self.firsts = {r[0]: c for c, r in enumerate(runs) if r}
        self.lasts = {r[-1]: c for c, r in enumerate(runs) if r}
        self._buckets = None
        self.choices = {u.attributes.get("index"): unit_save_choice(self.act, u.attributes) for u in plan_units}
        self.frozen = frozenset(frozen_units(plan_units))
        self.ties = p.get("ties", ())

    def vs(self, i: int) -> int:
        """The virtual stage of unit i on this rank (the rank itself unless interleaved)."""
        return virtual_stage(self.chunk.get(i, 0), self.p, self.P, self.sched)

    def boundary(self, i: int) -> int | None:
        """The unit a stage-boundary transfer of unit i names (None unless interleaved)."""
        return i if self.v > 1 else None

    def buckets(self) -> tuple[list, dict]:
        """ZeRO >= 2: the stage's bucket-holding Backwards as (unit, mb) in issue order -- the
        schedule's backwards (ratc.step.schedules.chunk_orders, as the lowering emits
        them), each chunk's units last first -- and each one's position in it."""
        if self._buckets is None:
            _, _, backwards = chunk_orders(self.P, self.v, self.M, self.p, self.sched)
            held = [[i for i in reversed(self.units) if self.chunk.get(i) == c and i not in self.frozen]
                    for c in range(self.v)]
            order = [(i, m) for c, m in backwards for i in held[c]]
            self._buckets = order, {task: k for k, task in enumerate(order)}
        return self._buckets

    def tie_group(self, i: int) -> list | None:
        """The tie group unit i is in, or None."""
        return next((g for g in self.ties if i in g), None)

    def choice(self, i: int) -> str:
        """What unit i keeps for its Backward (ratc.step.rules.save_choice)."""
        return self.choices.get(i, "full")

    def recovers(self, i: int) -> bool:
        """Whether unit i is recomputed whole before its Backward (ratc.step.rules.recovered)."""
        return self.choice(i) == "layer"


# The contexts of the verify() walk in progress, by stage: the walk changes nothing.
_CONTEXTS: dict = {}
_CONTEXTS_WALK = [0]


def _context(op) -> _Ctx:
    stage = op.block.parent if op.block is not None else None
    pipe = stage.block.parent if stage is not None and stage.block is not None else None
    if stage is None or stage.name != "life.stage" or pipe is None or pipe.name != "life.pipeline":
        raise VerifyError(f"'{op.name}' must be inside a life.stage of a life.pipeline", op)
    walk = walk_number()
    if not walk:
        return _Ctx(pipe, stage)
    if walk != _CONTEXTS_WALK[0]:
        _CONTEXTS.clear()
        _CONTEXTS_WALK[0] = walk
    ctx = _CONTEXTS.get(id(stage))      # (alive throughout the walk: its id names only it)
    if ctx is None:
        ctx = _CONTEXTS[id(stage)] = _Ctx(pipe, stage)
    return ctx


def key(value) -> tuple:
    """The role of a value: (producer op, unit, micro-batch, direction/phase, type)."""
    a = value.owner.attributes
    return (value.owner.name, a.get("unit"), a.get("mb"), a.get("dir", a.get("phase")), str(value.type))


def _weights(c: _Ctx, i: int, m: int, phase: str) -> tuple:
    return ("life.gather", i, m, phase, VIEW) if gathers(c.Z) else ("life.param", i, None, None, PARAM)


def message(op, p: int) -> tuple:
    """The message a send or receive on stage p carries: (source stage, destination stage,
    micro-batch, direction, boundary unit; None unless interleaved)."""
    a = op.attributes
    src, dst = (p, a["peer"]) if op.name == "life.send" else (a["peer"], p)
    return src, dst, a["mb"], a["dir"], a.get("unit")


def own_unit(op) -> int | None:
    """The unit on the op's own stage a task belongs to: a transfer's boundary unit when it
    is this stage's first (a forward receive, a backward send), else the unit before it."""
    a = op.attributes
    i = a.get("unit")
    if op.name in COMM_OPS and i is not None and (a["dir"] == "fwd") != (op.name == "life.recv"):
        return i - 1
    return i


def _layer_input(c: _Ctx, i: int, m: int):
    if i == 0:
        return None
    if i in c.firsts:
        return ("life.recv", c.boundary(i), m, "fwd", ACT)
    return ("life.fwd", i - 1, m, None, ACT)


def bucket_release(c: _Ctx, i: int, m: int):
    """ZeRO >= 2: the token of the collective that frees the bucket buffer Backward(i, m)
    takes over (ratc.step.rules.bucket_reused over the stage's Backwards in issue order), or None."""
    if not holds_bucket(c.Z, i in c.frozen):
        return None
    order, position = c.buckets()
    k = bucket_reused(position[i, m])
    if k is None:
        return None
    unit, mb = order[k]
    if mb < c.M - 1:
        return ("life.reduce", unit, mb, None, TOKEN)
    return ("life.grad_sync", unit, None, None, TOKEN)


def expected(op, c: _Ctx) -> tuple[list, list, bool]:
    """(operand roles, result types, inplace) that the op's role requires."""
    a = op.attributes
    name, i, m = op.name, a.get("unit"), a.get("mb")
    if name in ("life.param", "life.opt"):
        return [], [PARAM if name == "life.param" else OPT], False
    if name == "life.recv":
        return [], [ACT], False
    if name == "life.send":
        if a["dir"] == "fwd":
            return [("life.fwd", c.last if c.v == 1 else own_unit(op), m, None, ACT)], ["!life.token"], False
        return [(c.dx_op, c.first if c.v == 1 else i, m, None, ACT)], ["!life.token"], False
    if name == "life.gather":
        return [("life.param", i, None, None, PARAM)], [VIEW], False
    if name == "life.fwd":
        x = _layer_input(c, i, m)
        results = ([ACT] if i != c.head else []) + ([SAVED] if not c.recovers(i) else [])
        return ([x] if x else []) + [_weights(c, i, m, "fwd")], results, False
    if name == "life.recover":
        if c.choice(i) == "selective":      # the attention core, from what the Forward saved
            return [("life.fwd", i, m, None, SAVED)], [REC], False
        return [_layer_input(c, i, m), _weights(c, i, m, "rec")], [REC], False
    if name in ("life.bwd", "life.bwd_i", "life.bwd_w"):
        return _backward(name, c, i, m)
    if name == "life.reduce":
        prev = [("life.reduce", i, m - 1, None, GRAD)] if m > 0 else []
        return [(c.grad_op, i, m, None, GRAD)] + prev, [TOKEN, GRAD], bool(prev)
    if name == "life.grad_sync":
        last = [(c.grad_op, i, c.M - 1, None, GRAD)]
        if reduces_per_micro_batch(c.Z):   # the token frees the last bucket's buffer
            prev = [("life.reduce", i, c.M - 2, None, GRAD)] if c.M > 1 else []
            return last + prev, [TOKEN, GRAD], bool(prev)
        return last, [GRAD], not syncs_by_reduce_scatter(c.Z)
    if name == "life.tie_sum":
        group = c.tie_group(i) or [i]
        mine = [j for j in group if j != i and j in c.units] + [i]
        return [("life.grad_sync", j, None, None, GRAD) for j in mine], [GRAD], len(mine) == 1
    if name == "life.update":
        g = "life.tie_sum" if c.tie_group(i) else "life.grad_sync"
        return [(g, i, None, None, GRAD), ("life.opt", i, None, None, OPT),
                ("life.param", i, None, None, PARAM)], [PARAM], True
    if name == "life.prefetch":
        return [("life.update", i, None, None, PARAM)], [VIEW], True
    if name == "life.step_end":
        # a frozen unit's parameters never change: the next step reads them as they are
        return [("life.param", j, None, None, PARAM) if j in c.frozen else
                ("life.prefetch", j, None, None, VIEW) if prefetches(c.Z) else
                ("life.update", j, None, None, PARAM) for j in c.units], [], False
    raise VerifyError(f"'{name}' is not a task of a stage program", op)


def _backward(name: str, c: _Ctx, i: int, m: int) -> tuple[list, list, bool]:
    """(operand roles, result types, inplace) of a whole Backward, or of its zero-bubble
    parts: I reads what a Backward reads for its input gradient and keeps what its W reads
    (its GEMMs' output gradients and inputs: ratc.step.rules.held_for_w); W reads that alone
    (the saved activations die with the I) and accumulates."""
    dy = None if i == c.head else (("life.recv", c.boundary(i + 1), m, "bwd", ACT) if i in c.lasts
                                   else (c.dx_op, i + 1, m, None, ACT))
    saved = {"layer": [("life.recover", i, m, None, REC)], "full": [("life.fwd", i, m, None, SAVED)],
             "selective": [("life.fwd", i, m, None, SAVED), ("life.recover", i, m, None, REC)]}[c.choice(i)]
    dx = [ACT] if i != 0 else []
    if name == "life.bwd_i":
        return ([dy] if dy else []) + saved + [_weights(c, i, m, backward_view(c.recovers(i)))], dx + [SAVED], False
    acc = (c.grad_op, i, m - 1, None, GRAD) if not reduces_per_micro_batch(c.Z) and m > 0 else None
    free = bucket_release(c, i, m)
    if name == "life.bwd_w":
        operands = [("life.bwd_i", i, m, None, SAVED)]
        dx = []
    else:
        operands = ([dy] if dy else []) + saved + [_weights(c, i, m, backward_view(c.recovers(i)))]
    operands += ([acc] if acc else []) + ([free] if free else [])
    return operands, dx + [GRAD], acc is not None


def _fmt(role) -> str:
    name, unit, mb, extra, ty = role
    parts = [f"unit {unit}" if unit is not None else "", f"mb {mb}" if mb is not None else "", extra or ""]
    return f"{name}({', '.join(p for p in parts if p)}) : {ty}"


def check_task(op) -> None:
    """The op's operands and results are exactly those its role needs."""
    c = _context(op)
    a = op.attributes
    i, m = a.get("unit"), a.get("mb")
    if op.name in COMM_OPS:
        _check_transfer(op, c)
    elif i is not None and i not in c.units:
        raise VerifyError(f"'{op.name}' unit {i} is not on stage {c.p} (units {c.units})", op)
    if m is not None and not 0 <= m < c.M:
        raise VerifyError(f"'{op.name}' micro-batch {m} is outside 0..{c.M - 1}", op)
    if op.name in STATE_TASKS and i in c.frozen:
        raise VerifyError(f"'{op.name}' of unit {i}: the unit is frozen (nothing trained), so it has no "
                          "gradient to reduce, synchronize or apply", op)
    if op.name in ("life.bwd", "life.bwd_i", "life.bwd_w") and op.name not in (c.dx_op, c.grad_op):
        raise VerifyError(f"'{op.name}'{_where(a)}: the plan's schedule ({c.sched}) runs "
                          f"{' and '.join(sorted({c.dx_op, c.grad_op}))} backward tasks", op)
    if op.name == "life.tie_sum" and c.tie_group(i) is None:
        raise VerifyError(f"'{op.name}' of unit {i}: the unit is in none of the plan's tie groups", op)
    if op.name == "life.recover" and c.choice(i) == "full":
        raise VerifyError(f"'{op.name}' of unit {i}: no recovery under act policy '{c.act}' for this unit", op)
    if op.name == "life.gather" and not gathers(c.Z):
        raise VerifyError(f"'{op.name}': parameter gathers exist only under ZeRO-3 (Z = {c.Z})", op)
    if op.name == "life.prefetch" and c.Z not in (1, 2):
        raise VerifyError(f"'{op.name}': PrefetchW exists only under ZeRO-1/2 (Z = {c.Z})", op)
    if op.name == "life.reduce" and (not reduces_per_micro_batch(c.Z) or m == c.M - 1):
        raise VerifyError(f"'{op.name}': per-micro-batch reduction exists only under ZeRO >= 2 "
                          f"before the last micro-batch", op)
    if op.name == "life.grad_sync" and a["kind"] != ("reduce-scatter" if syncs_by_reduce_scatter(c.Z) else "all-reduce"):
        raise VerifyError(f"'{op.name}' kind must match ZeRO-{c.Z}", op)
    want, results, inplace = expected(op, c)
    got = [key(v) for v in op.operands]
    if got != want:
        missing = [r for r in want if r not in got]
        extra = [r for r in got if r not in want]
        what = (f"missing dependency {_fmt(missing[0])}" if missing else
                f"unexpected operand {_fmt(extra[0])}" if extra else "operands out of order")
        raise VerifyError(f"'{op.name}'{_where(a)}: {what}", op)
    types = [str(r.type) for r in op.results]
    if types != results:
        raise VerifyError(f"'{op.name}'{_where(a)}: results must be ({', '.join(results)}), "
                          f"got ({', '.join(types)})", op)
    if op.name != "life.step_end":
        if a.get("inplace", False) != inplace:
            raise VerifyError(f"'{op.name}'{_where(a)}: inplace must be {str(inplace).lower()}", op)
        # (the attributes' kinds are checked first: these lists hold ints, `tier` strings)
        if len(a["sizes"]) != len(op.results) or min(a["sizes"], default=0) < 0:
            raise VerifyError(f"'{op.name}'{_where(a)}: sizes needs one non-negative byte count per result", op)
        if not 0 <= a["dur"] < math.inf:       # (also false for NaN)
            raise VerifyError(f"'{op.name}'{_where(a)}: duration must be finite and not negative, "
                              f"got {a['dur']}", op)
        if a.get("cycles", 0) < 0:
            raise VerifyError(f"'{op.name}'{_where(a)}: cycles must not be negative, got {a['cycles']}", op)
        if len(a.get("calls", a.get("kernels", []))) != len(a.get("kernels", [])) or \
                min(a.get("calls", ()), default=1) < 1:
            raise VerifyError(f"'{op.name}'{_where(a)}: calls needs one positive count per kernel", op)
        if not _TIER_SET.issuperset(a.get("tier", ())) or min(a.get("buf", ()), default=-1) < -1:
            raise VerifyError(f"'{op.name}'{_where(a)}: tier must name {', '.join(TIERS)} and buf be a buffer id "
                              "(-1: no buffer)", op)


def _check_transfer(op, c: _Ctx) -> None:
    """A send or receive goes to the rank of the adjacent virtual stage (p +- 1 unless
    interleaved, where rank P-1 passes on to rank 0) and, interleaved, names its boundary:
    the first unit of the later virtual stage, this stage's first or the one after its last."""
    a = op.attributes
    i, upstream = a.get("unit"), (a["dir"] == "fwd") == (op.name == "life.recv")
    if (i is not None) != (c.v > 1):
        why = "an interleaved transfer names its boundary unit" if c.v > 1 else \
            "unit is only for interleaved plans (v > 1)"
        raise VerifyError(f"'{op.name}' {a['dir']} on stage {c.p}: {why}", op)
    own = own_unit(op)
    if c.v > 1 and own not in (c.firsts if upstream else c.lasts):
        raise VerifyError(f"'{op.name}' {a['dir']} on stage {c.p}: unit {i} is no boundary of the stage's chunks "
                          f"(first units {sorted(c.firsts)}, the units after the last "
                          f"{sorted(j + 1 for j in c.lasts)})", op)
    vs = (c.vs(own) if c.v > 1 else c.p) + (-1 if upstream else 1)
    if not 0 <= vs < c.P * c.v:
        raise VerifyError(f"'{op.name}' {a['dir']} on stage {c.p} has no peer stage", op)
    peer = rank_of(vs, c.P, c.sched)
    if a["peer"] != peer:
        raise VerifyError(f"'{op.name}' {a['dir']} on stage {c.p} must have peer {peer}, got {a['peer']}", op)


def _where(a: dict) -> str:
    parts = [f"unit {a['unit']}" if "unit" in a else "", f"mb {a['mb']}" if "mb" in a else ""]
    text = ", ".join(p for p in parts if p)
    return f" ({text})" if text else ""


def task_id(op) -> tuple:
    """What makes a task unique within its stage."""
    a = op.attributes
    return (op.name, a.get("unit"), a.get("mb"), a.get("dir", a.get("phase")))


# required_tasks by the context it depends on (the text of all its fields but the lazily
# kept buckets): the structure check after each pass asks it again for the same stages
# (bounded, for processes that verify many programs).
_REQUIRED: dict = {}


def required_tasks(c: _Ctx) -> frozenset:
    """Every task a complete stage program holds."""
    key = repr([getattr(c, f) for f in _Ctx.__slots__ if f != "_buckets"])    # (every fact of the context)
    need = _REQUIRED.get(key)
    if need is None:
        if len(_REQUIRED) >= 64:
            _REQUIRED.clear()
        need = _REQUIRED[key] = frozenset(_required_tasks(c))
    return need


def _required_tasks(c: _Ctx) -> set:
    need = set()
    for i in c.units:
        need |= {("life.param", i, None, None), ("life.opt", i, None, None)}
        trained = i not in c.frozen
        if trained:
            need |= {("life.grad_sync", i, None, None), ("life.update", i, None, None)}
        if trained and c.tie_group(i):
            need.add(("life.tie_sum", i, None, None))
        if trained and prefetches(c.Z):
            need.add(("life.prefetch", i, None, None))
        for m in range(c.M):
            need |= {("life.fwd", i, m, None), (c.dx_op, i, m, None), (c.grad_op, i, m, None)}
            if c.choice(i) != "full":
                need.add(("life.recover", i, m, None))
            phases = ["fwd", backward_view(c.recovers(i))]      # (a Recover gathers the 'rec' view)
            if gathers(c.Z):
                need |= {("life.gather", i, m, ph) for ph in phases}
            if trained and reduces_per_micro_batch(c.Z) and m < c.M - 1:
                need.add(("life.reduce", i, m, None))
    for m in range(c.M):
        for i in c.firsts:
            if c.vs(i) > 0:
                need |= {("life.recv", c.boundary(i), m, "fwd"), ("life.send", c.boundary(i), m, "bwd")}
        for i in c.lasts:
            if c.vs(i) < c.P * c.v - 1:
                need |= {("life.send", c.boundary(i + 1), m, "fwd"), ("life.recv", c.boundary(i + 1), m, "bwd")}
    need.add(("life.step_end", None, None, None))
    return need


def check_stage(stage) -> None:
    """Completeness, step_end last, and no read of a buffer after an in-place overwrite."""
    try:
        _check_stage(stage)
    except VerifyError as exc:
        prefer_local([stage, *stage.region.ops], exc)


def _check_stage(stage) -> None:
    pipe = stage.block.parent if stage.block is not None else None
    if pipe is None or pipe.name != "life.pipeline":
        raise VerifyError("'life.stage' must be inside a life.pipeline", stage)
    ops = stage.region.ops
    # This runs after every pass that moves ops (ratc.passes.manager), over every task: each
    # rule is first checked in bulk, and only a failing one walks the ops for the first culprit.
    if not {op.name for op in ops} <= TASK_OPS:
        bad = next(op for op in ops if op.name not in TASK_OPS)
        raise VerifyError(f"'{bad.name}' cannot appear in a stage program", bad)
    c = _Ctx(pipe, stage)
    seen = set(map(task_id, ops))
    if len(seen) != len(ops):
        _first_repeated_task(ops, c)
    missing = required_tasks(c) - seen
    if missing:
        name, unit, mb, extra = sorted(missing, key=str)[0]
        where = _where({k: v for k, v in (("unit", unit), ("mb", mb)) if v is not None})
        raise VerifyError(f"stage {c.p}: missing task {name}{where}{' ' + extra if extra else ''} "
                          f"({len(missing)} missing)", stage)
    if not ops or ops[-1].name != "life.step_end":
        raise VerifyError(f"stage {c.p}: life.step_end must be the last op", stage)
    sa = stage.attributes
    if not 0 <= sa.get("peak_at", 0) < len(ops):
        raise VerifyError(f"stage {c.p}: peak_at {sa['peak_at']} is not an op of the stage (0..{len(ops) - 1})", stage)
    if "buffers" in sa:      # memory-plan's slots: 0..buffers-1
        limit = sa["buffers"]
        if [b for op in ops for key in ("buf", "frees") for b in op.attributes.get(key, ()) if b >= limit]:
            _first_buffer_out_of_range(ops, limit, c)
    _check_corun(ops, c)
    last_use = {v: pos for pos, op in enumerate(ops) for v in op.operands}
    # (an in-place op without operands is the task check's to report)
    early = [pos for pos, op in enumerate(ops)
             if op.attributes.get("inplace") and op.operands and last_use[op.operands[-1]] != pos]
    if early:
        op = ops[early[0]]
        later = ops[last_use[op.operands[-1]]]
        raise VerifyError(f"stage {c.p}: '{op.name}'{_where(op.attributes)} overwrites a buffer that "
                          f"'{later.name}'{_where(later.attributes)} still reads later", op)


def _first_repeated_task(ops, c: _Ctx) -> None:
    seen: set = set()
    for op in ops:
        tid = task_id(op)
        if tid in seen:
            raise VerifyError(f"stage {c.p}: task {tid[0]}{_where(op.attributes)} appears twice", op)
        seen.add(tid)


def _first_buffer_out_of_range(ops, buffers: int, c: _Ctx) -> None:
    for op in ops:
        bad = [b for key in ("buf", "frees") for b in op.attributes.get(key, ()) if b >= buffers]
        if bad:
            raise VerifyError(f"stage {c.p}: '{op.name}'{_where(op.attributes)} names buffer {bad[0]}, but the "
                              f"stage has {buffers} (0..{buffers - 1})", op)


def _check_corun(ops, c: _Ctx) -> None:
    """fsr: a co-running Recover follows its host -- the Forward, Backward (I, W) issued before
    it, with no receive between -- and each host, which carries `corun`, has exactly one; only
    a Recover co-running with a Backward (an I) streams into what it frees (`stream`)."""
    host, guests = None, 0
    for op in ops:
        if "stream" in op.attributes and (op.attributes.get("placement") != "corun" or host is None
                                          or host.name not in ("life.bwd", "life.bwd_i")):
            raise VerifyError(f"stage {c.p}: '{op.name}'{_where(op.attributes)} carries 'stream' but does not "
                              f"co-run with a Backward", op)
        if op.name in HOST_OPS or op.name == "life.recv":
            if host is not None and guests != 1:
                raise VerifyError(f"stage {c.p}: '{host.name}'{_where(host.attributes)} carries 'corun' "
                                  f"but no Recover co-runs with it", host)
            host, guests = (op if "corun" in op.attributes else None), 0
            if op.name == "life.recv":
                host = None
        elif op.name == "life.recover" and op.attributes.get("placement") == "corun":
            if host is None or guests:
                raise VerifyError(f"stage {c.p}: co-running '{op.name}'{_where(op.attributes)} must follow its "
                                  f"host, a Forward or Backward carrying 'corun' issued before it with no "
                                  f"receive between", op)
            guests += 1
    if host is not None and guests != 1:
        raise VerifyError(f"stage {c.p}: '{host.name}'{_where(host.attributes)} carries 'corun' but no "
                          f"Recover co-runs with it", host)


def check_pipeline(pipe) -> None:
    """Stages 0..P-1 partitioning the units, sends matching receives, and no deadlock."""
    try:
        _check_pipeline(pipe)
    except VerifyError as exc:
        prefer_local([op for s in pipe.region.ops for op in (s, *(s.region.ops if s.region else ()))], exc)


def _check_pipeline(pipe) -> None:
    stages = pipe.region.ops
    plan = plan_of(pipe)
    if plan is None:
        return      # an undefined @plan is the symbol check's to report
    P, n_units = plan.attributes["P"], len(plan.region.ops) if plan.region is not None else 0
    # (compare the count first: P comes from the text and may be huge)
    if len(stages) != P or any(s.name != "life.stage" for s in stages):
        raise VerifyError(f"'life.pipeline' must hold exactly P = {P} life.stage ops, its plan's", pipe)
    v = plan.attributes.get("v", 1)
    chunk = {u.attributes.get("index"): u.attributes.get("chunk", 0) for u in plan.region.ops}
    runs: list = [[] for _ in range(P * v)]      # per virtual stage, its units as the stages list them
    for p, s in enumerate(stages):
        if s.attributes.get("stage") != p:
            raise VerifyError(f"stage #{p} is numbered {s.attributes.get('stage')}", s)
        listed = s.attributes.get("units", [])
        if [chunk.get(i, 0) for i in listed] != sorted(chunk.get(i, 0) for i in listed):
            raise VerifyError(f"stage {p} must list its units in chunk order, got {listed}", s)
        for i in listed:
            runs[virtual_stage(min(chunk.get(i, 0), v - 1), p, P, plan.attributes.get("sched", "1f1b"))].append(i)
    units = [i for run in runs for i in run]
    if units != list(range(n_units)):
        raise VerifyError(f"the stages' units must be its plan's 0..{n_units - 1} in order"
                          f"{' of virtual stages' if v > 1 else ''}, got {units}", pipe)
    _check_tie_sums(pipe)
    simulate_issue(stages)


def _check_tie_sums(pipe) -> None:
    """A TieSum names the stages of its group; one summing across stages is issued after the
    stage's last send (so waiting on it never holds back a peer's main path) and, per stage,
    in the order of the groups (every stage then issues the tie collectives in one order)."""
    stage_of = {i: s.attributes["stage"] for s in pipe.region.ops for i in s.attributes["units"]}
    plan = plan_of(pipe)
    ties = plan.attributes.get("ties", []) if plan is not None else []
    for s in pipe.region.ops:
        ops = s.region.ops
        last_send = max((k for k, op in enumerate(ops) if op.name == "life.send"), default=-1)
        order = []
        for k, op in enumerate(ops):
            if op.name != "life.tie_sum":
                continue
            i = op.attributes["unit"]
            g = next((n for n, grp in enumerate(ties) if i in grp), None)
            if g is None:
                continue        # (the task check reports it)
            want = sorted({stage_of[j] for j in ties[g]})
            if op.attributes["stages"] != want:
                raise VerifyError(f"'life.tie_sum' (unit {i}): stages must be {want}, the stages of tie group "
                                  f"{ties[g]}, got {op.attributes['stages']}", op)
            if len(want) > 1 and k < last_send:
                raise VerifyError(f"'life.tie_sum' (unit {i}) sums across stages {want} before the stage's last "
                                  "send: it must follow every send of the stage", op)
            if order and g < order[-1]:
                raise VerifyError(f"'life.tie_sum' (unit {i}) of tie group {g} is issued after one of group "
                                  f"{order[-1]}: every stage issues its tie sums in group order", op)
            order.append(g)


def simulate_issue(stages) -> None:
    """Sends and receives match one to one, messages between two stages are received in
    the order they are sent (NCCL's point-to-point channels match in order and have no
    tags), and the stages, each issuing in order with buffered sends and blocking
    receives, all finish: raise VerifyError otherwise."""
    recvs: dict = {}        # (src, dst, mb, dir) -> index in comm
    sends: dict = {}
    comm: list = []         # every stage's sends and receives, stage by stage in issue order: (stage, op)
    edges: list = []        # comm's indices: each op after the one its stage issued before
    for p, s in enumerate(stages):
        prev = -1
        for op in s.region.ops:
            name = op.name
            if name in COMM_OPS:
                try:
                    k = message(op, p)
                except KeyError:
                    verify_op(op)   # reports the missing attribute
                    raise
                table = sends if name == "life.send" else recvs
                if k in table:
                    raise VerifyError(f"duplicate {name} {k[3]} mb {k[2]}{_at(k[4])} between stages {k[0]} and "
                                      f"{k[1]}", op)
                n = table[k] = len(comm)
                comm.append((p, op))
                if prev >= 0:
                    edges.append((prev, n))
                prev = n
    for k, n in sends.items():
        if k not in recvs:
            raise VerifyError(f"send {k[3]} mb {k[2]}{_at(k[4])} from stage {k[0]} has no matching recv on "
                              f"stage {k[1]}", comm[n][1])
    for k, n in recvs.items():
        if k not in sends:
            raise VerifyError(f"recv {k[3]} mb {k[2]}{_at(k[4])} on stage {k[1]} has no matching send on "
                              f"stage {k[0]}", comm[n][1])
    last: dict = {}         # (src, dst) -> where dst receives src's latest send (in issue order)
    for k, n in sends.items():
        r = recvs[k]
        if r < last.get(k[:2], -1):
            _out_of_order(stages)
        last[k[:2]] = r
        edges.append((n, r))
    _check_no_deadlock(stages, comm, edges)


def _at(unit) -> str:
    """An interleaved transfer's boundary unit in a message."""
    return "" if unit is None else f" @{unit}"


def _out_of_order(stages) -> None:
    """Raise for the first message a stage receives in another position than it was sent."""
    order: dict = {}        # (src, dst, 'life.send' | 'life.recv') -> [(mb, dir, unit, op)] in issue order
    for p, s in enumerate(stages):
        for op in s.region.ops:
            if op.name in ("life.send", "life.recv"):
                src, dst, mb, d, u = message(op, p)
                order.setdefault((src, dst, op.name), []).append((mb, d, u, op))
    for (src, dst, kind), issued in order.items():
        if kind != "life.recv":
            continue
        for k, ((mb, d, u, op), (smb, sd, su, _)) in enumerate(zip(issued, order[(src, dst, "life.send")])):
            if (mb, d, u) != (smb, sd, su):
                raise VerifyError(f"stage {dst} receives {d} mb {mb}{_at(u)} as message #{k} from stage {src}, which "
                                  f"sends {sd} mb {smb}{_at(su)} as its #{k}: messages between two stages must arrive "
                                  "in the order they are sent", op)


def _acyclic(n: int, edges: list) -> bool:
    """Whether the graph on nodes 0..n-1 has no cycle (Kahn: every node can be ordered).
    Every verification runs this; networkx, which finds and reports a cycle, costs more to
    import (0.3-0.7 s here) than the whole check of a 40,000-op program."""
    indegree, succ = [0] * n, [[] for _ in range(n)]
    for u, v in edges:
        succ[u].append(v)
        indegree[v] += 1
    ready = [i for i in range(n) if not indegree[i]]
    done = 0
    while ready:
        u = ready.pop()
        done += 1
        for v in succ[u]:
            indegree[v] -= 1
            if not indegree[v]:
                ready.append(v)
    return done == n


def _check_no_deadlock(stages, comm: list, edges: list) -> None:
    """The graph of the stages' communication ops (`comm`'s indices: each stage's chained in
    issue order, each send -> its matching receive) has no cycle: with buffered sends and
    blocking receives, a cycle is a set of receives each waiting for a send issued after
    another of them."""
    if _acyclic(len(comm), edges):
        return
    import networkx as nx

    g = nx.DiGraph(edges)
    cycle = nx.find_cycle(g)
    # blocked: the ops on a cycle and every op after one (in its stage or through a message)
    blocked: set = set()
    for component in nx.strongly_connected_components(g):
        if len(component) > 1 and not component <= blocked:
            blocked |= component | nx.descendants(g, next(iter(component)))
    first = {}              # stuck stage -> its first blocked op, a receive (its sends wait only for it)
    for n in sorted(blocked):
        first.setdefault(comm[n][0], comm[n])
    where = ", ".join(f"stage {p} at recv {op.attributes['dir']} mb {op.attributes['mb']} "
                      f"(op #{stages[p].region.ops.index(op)})" for p, op in sorted(first.values(), key=lambda c: c[0]))
    # the cycle's messages in wait-for order: each receiving stage waits for the sending one
    waits = [(comm[v][0], comm[u][0]) for u, v in reversed(cycle) if comm[u][0] != comm[v][0]]
    chain = f"stage {waits[0][0]} waits for " + ", which waits for ".join(f"stage {q}" for _, q in waits)
    raise VerifyError(f"the stages deadlock: {where} (a cycle of waits: {chain})", first[min(first)][1])

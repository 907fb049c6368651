"""Lower a `life.plan` into a `life.pipeline`: one stage program of per-layer tasks each.

The lowered program is in GPipe order (every forward, then every backward, then the state
chain at the step end; interleaved, v > 1, each kind in the order interleaved 1F1B runs it;
under a zero-bubble schedule every input-gradient task I, then every weight-gradient task W):
a valid, deadlock-free issue order that `schedule-1f1b` reorders.
Recover(l, m) sits right before Backward(l, m) (backward-time recovery) until `fsr`
co-schedules it; under ZeRO-3 the Backward reuses the view its Recover gathered. Under
ZeRO >= 2 each bucket's collective (the reduce, or GradSync for the last micro-batch)
follows its Backward, and a Backward depends on the one that freed the bucket buffer it
takes (two buffers per stage).
"""

from __future__ import annotations

from ratc.errors import RatcError
from ratc.ir.attributes import ByteSize, SymbolRef
from ratc.ir.core import Block, Module, Operation
from ratc.ir.types import OpaqueType
from ratc.ir.verifier import verify_op
from ratc.step.schedules import chunk_orders, rank_of, virtual_stage
from ratc import limits
from ratc.step.rules import (backward_parts, backward_view, bucket_reused, gather_ahead, gathers, held_for_w,
                             holds_bucket, kept_bytes, prefetches, reduces_per_micro_batch, syncs_by_reduce_scatter,
                             unit_save_choice)
from ratc.step.unit_costs import recover_work

ACT, SAVED, REC, GRAD, PARAM, OPT, VIEW, TOKEN = (
    OpaqueType("life", n) for n in ("act", "saved", "rec", "grad", "param", "opt", "view", "token"))

# Issue priorities (0 = most urgent). Stage-boundary transfers beat all background traffic
# (review, "Contention-aware communication prioritization").
PRIO_MAIN, PRIO_GATHER, PRIO_REDUCE, PRIO_SYNC, PRIO_STATE = 0, 1, 2, 3, 4


def find_plan(module: Module) -> Operation:
    """The module's `life.plan` op."""
    plans = [op for op in module.body.ops if op.name == "life.plan"]
    if len(plans) != 1:
        raise RatcError(f"module @{module.name} needs exactly one life.plan op, found {len(plans)}")
    return plans[0]


def find_pipeline(module: Module) -> Operation:
    """The module's `life.pipeline` op (after lower-to-life)."""
    pipes = [op for op in module.body.ops if op.name == "life.pipeline"]
    if len(pipes) != 1:
        raise RatcError(f"module @{module.name} needs exactly one life.pipeline op (run lower-to-life "
                        f"first), found {len(pipes)}")
    return pipes[0]


def _task(name, operands, types, attrs, names):
    """A task op with named results."""
    return Operation(name, operands, types, attrs, result_names=names)


class _StageLowering:
    """Builds one stage's ops; `env` maps (kind, unit, mb) to the SSA value of that role."""

    def __init__(self, plan: Operation, p: int, units: list[Operation], act: str):
        a = plan.attributes
        self.P, self.M, self.Z, self.p, self.act = a["P"], a["A"], a["Z"], p, act
        self.v = a.get("v", 1)
        self.sched = a.get("sched", "1f1b")
        self.zb = self.sched != "1f1b"     # zero bubble: each Backward as I, then W
        self.p2p = a["p2p"]
        self.units = units
        # the rank's chunks: chunk c is virtual stage c * P + p (ZBV: in a V), a run of consecutive units
        self.chunks = [[u for u in units if u.attributes.get("chunk", 0) == c] for c in range(self.v)]
        self.head = len(plan.region.ops) - 1
        self.all_units = plan.region.ops
        self.env: dict = {}
        self.ops: list[Operation] = []
        # ZeRO >= 2: per bucket-holding Backward in issue order, the token of the collective
        # that frees its bucket buffer, which a later Backward takes over (bucket_reused).
        self.released: list = []
        self.ties = a.get("ties", [])
        self.local = {u.attributes["index"] for u in units}
        self.choices: dict = {}     # unit -> what it keeps for its Backward

    def emit(self, op: Operation) -> Operation:
        """Append an op to the stage program."""
        self.ops.append(op)
        return op

    def u(self, i: int) -> dict:
        """Unit i's attributes (its costs)."""
        return self.all_units[i].attributes

    def choice(self, i: int) -> str:
        """What unit i keeps for its Backward (ratc.step.rules.save_choice)."""
        c = self.choices.get(i)
        if c is None:       # (asked for every task of the unit)
            c = self.choices[i] = unit_save_choice(self.act, self.u(i))
        return c

    def recovers(self, i: int) -> bool:
        """Whether unit i keeps only its input (checkpoint) and is recomputed whole before backward."""
        return self.choice(i) == "layer"

    def kept(self, i: int) -> int:
        """Bytes Forward(i) saves for Backward(i) when it saves any."""
        u = self.u(i)
        return int(kept_bytes(self.choice(i), int(u["saved"]), int(u["input_bytes"]), int(u.get("core", 0))))

    def weights(self, i: int, mb: int, phase: str, before: list):
        """The parameter value a task of unit i uses; under ZeRO-3 a fresh gather."""
        w = self.env["w", i]
        if not gathers(self.Z):
            return w
        u = self.u(i)
        g = _task("life.gather", [w], [VIEW], {"unit": i, "mb": mb, "phase": phase, "dur": u["gather"],
                                               "res": "link", "prio": PRIO_GATHER, "sizes": [int(u["view"])]},
                  [f"v{i}_{phase}{mb}"])
        before.append(g)
        return g.result

    def state(self) -> None:
        """The step state every unit starts with: parameters and optimizer shard."""
        for uop in self.units:
            u, i = uop.attributes, uop.attributes["index"]
            self.env["w", i] = self.emit(_task("life.param", [], [PARAM], {
                "unit": i, "dur": 0.0, "res": "ddr", "prio": PRIO_MAIN, "sizes": [int(u["param"])]},
                [f"w{i}"])).result
            self.env["s", i] = self.emit(_task("life.opt", [], [OPT], {
                "unit": i, "dur": 0.0, "res": "ddr", "prio": PRIO_MAIN, "sizes": [int(u["opt"])]},
                [f"opt{i}"])).result

    def interleave(self, tasks: list[tuple[list, Operation, list]]) -> None:
        """Emit (its gathers, task, followers) with each ZeRO-3 gather issued gather_ahead tasks
        ahead of its use (the run's first tasks' before the first)."""
        ahead = gather_ahead(False)
        for k, (_, op, followers) in enumerate(tasks):
            if k == 0:
                self.ops += [g for its_gathers, _, _ in tasks[:ahead] for g in its_gathers]
            self.ops.append(op)
            if k + ahead < len(tasks):
                self.ops[-1:-1] = tasks[k + ahead][0]
            self.ops += followers

    def transfer(self, name: str, m: int, d: str, vs: int, unit: int, operands: list, name_of: str) -> Operation:
        """The send or receive of micro-batch m's boundary value (activation for `fwd`, its
        gradient for `bwd`) with the rank of virtual stage vs; interleaved, it names the
        boundary by its `unit` (the later virtual stage's first), as two ranks then exchange
        several per micro-batch and direction."""
        peer = rank_of(vs, self.P, self.sched)
        attrs = {"mb": m, "dir": d, "peer": peer}
        if self.v > 1:
            attrs["unit"] = unit
        if name == "life.recv":
            attrs.update(dur=0.0, res="link", prio=PRIO_MAIN, sizes=[int(self.u(unit)["input_bytes"])])
            return self.emit(_task(name, [], [ACT], attrs, [name_of]))
        # (ZBV's bottom of the V hands a value over on its own rank: no link time)
        attrs.update(dur=self.p2p if peer != self.p else 0.0, res="link", prio=PRIO_MAIN, sizes=[0])
        return self.emit(_task(name, operands, [TOKEN], attrs, [name_of + (f"_u{unit}" if self.v > 1 else "")]))

    def forward(self, m: int, chunk: int = 0) -> None:
        """Forward(l, m) of every unit of one of the stage's chunks, with the boundary receive and send."""
        units = self.chunks[chunk]
        first, last = units[0].attributes["index"], units[-1].attributes["index"]
        vs = virtual_stage(chunk, self.p, self.P, self.sched)
        x = None
        if vs > 0:
            x = self.transfer("life.recv", m, "fwd", vs - 1, first, [], f"x{first}_{m}").result
        tasks = []
        for i in range(first, last + 1):
            u = self.u(i)
            self.env["x", i, m] = x
            before: list = []
            w = self.weights(i, m, "fwd", before)
            types, sizes, names = [], [], []
            if i != self.head:
                types.append(ACT), sizes.append(int(self.u(i + 1)["input_bytes"])), names.append(f"x{i + 1}_{m}")
            if not self.recovers(i):
                types.append(SAVED), sizes.append(self.kept(i)), names.append(f"saved{i}_{m}")
            op = _task("life.fwd", ([x] if x is not None else []) + [w], types, {
                "unit": i, "mb": m, "dur": u["fwd"], "compute": u["fwd_compute"], "ddr": u["fwd_ddr"], "workspace": u["workspace"],
                "res": "compute", "prio": PRIO_MAIN, "sizes": sizes}, names)
            tasks.append((before, op, []))
            x = op.results[0] if i != self.head else None
            if not self.recovers(i):
                self.env["saved", i, m] = op.results[-1]
        self.interleave(tasks)
        if vs < self.P * self.v - 1:
            self.transfer("life.send", m, "fwd", vs + 1, last + 1, [x], f"sendf{self.p}_{m}")

    def backward(self, m: int, chunk: int = 0) -> None:
        """Backward(l, m) of one chunk in reverse unit order, each preceded by its Recover when
        checkpointed; under a zero-bubble schedule its input-gradient part I(l, m) only (its
        W follows in weight_grad)."""
        units = self.chunks[chunk]
        first, last = units[0].attributes["index"], units[-1].attributes["index"]
        vs = virtual_stage(chunk, self.p, self.P, self.sched)
        dy = None
        if vs < self.P * self.v - 1:
            dy = self.transfer("life.recv", m, "bwd", vs + 1, last + 1, [], f"dy{last + 1}_{m}").result
        tasks = []
        for i in range(last, first - 1, -1):
            saved = self.recover(i, m, tasks)
            before = []
            phase = backward_view(self.recovers(i))
            # (a whole-layer Recover's Backward reads the view that Recover gathered; a selective
            # one's view is gathered ahead of its Recover, which needs none, as a whole one's is)
            ahead = tasks[-1][0] if self.choice(i) == "selective" else before
            w = self.weights(i, m, phase, ahead) if phase != "rec" else self.env["rec_w", i, m]
            op, follow = self.input_grad(i, m, dy, saved, w) if self.zb else self.whole_grad(i, m, dy, saved, w)
            dy = op.results[0] if i != 0 else None
            tasks.append((before, op, follow))
        self.interleave(tasks)
        if vs > 0:
            self.transfer("life.send", m, "bwd", vs - 1, first, [dy], f"sendb{self.p}_{m}")

    def whole_grad(self, i: int, m: int, dy, saved: list, w) -> tuple[Operation, list]:
        """Backward(i, m) whole: (its op, the bucket collective following it)."""
        u = self.u(i)
        acc, free, holds = self.accumulate(i, m)
        types, sizes, names = [], [], []
        if i != 0:
            types.append(ACT), sizes.append(int(u["input_bytes"])), names.append(f"dx{i}_{m}")
        attrs = {"unit": i, "mb": m, "dur": u["bwd"], "compute": u["bwd_compute"], "ddr": u["bwd_ddr"],
                 "workspace": u["workspace"], "res": "compute", "prio": PRIO_MAIN}
        op = self.grad_task("life.bwd", ([dy] if dy is not None else []) + saved + [w], acc, free,
                            (types, sizes, names), attrs)
        return op, self.collect(i, m, op, holds)

    def input_grad(self, i: int, m: int, dy, saved: list, w) -> tuple[Operation, list]:
        """I(i, m): the input gradient (dx, what the previous layer waits for) and what its W
        reads (ratc.step.rules.held_for_w: the weighted GEMMs' output gradients and saved
        inputs), which lives until that W ends; the saved activations and the output gradient
        die with the I (ratc.step.rules.backward_parts prices both tasks)."""
        u = self.u(i)
        dur, compute, ddr = backward_parts(u)["I"]
        types, sizes, names = ([ACT], [int(u["input_bytes"])], [f"dx{i}_{m}"]) if i != 0 else ([], [], [])
        kept = held_for_w(int(u.get("w_grads", 0)), int(u.get("w_inputs", 0)))
        op = _task("life.bwd_i", ([dy] if dy is not None else []) + saved + [w], types + [SAVED], {
            "unit": i, "mb": m, "dur": dur, "compute": compute, "ddr": ddr, "workspace": u["workspace"],
            "res": "compute", "prio": PRIO_MAIN, "sizes": sizes + [kept]}, names + [f"dw_in{i}_{m}"])
        self.env["W", i, m] = [op.results[-1]]
        return op, []

    def weight_grad(self, m: int, chunk: int = 0) -> None:
        """W(l, m) of one chunk's units in reverse order: each layer's weight gradient, from
        what its I kept, accumulated (and under ZeRO >= 2 its bucket reduced) as a whole
        Backward's."""
        for uop in reversed(self.chunks[chunk]):
            i = uop.attributes["index"]
            u = self.u(i)
            acc, free, holds = self.accumulate(i, m)
            dur, compute, ddr = backward_parts(u)["W"]
            attrs = {"unit": i, "mb": m, "dur": dur, "compute": compute, "ddr": ddr, "workspace": u["workspace"],
                     "res": "compute", "prio": PRIO_MAIN}
            op = self.grad_task("life.bwd_w", self.env.pop(("W", i, m)), acc, free, ([], [], []), attrs)
            self.emit(op)
            self.ops += self.collect(i, m, op, holds)

    def accumulate(self, i: int, m: int) -> tuple:
        """(the gradient accumulated in place, or None; the token freeing the bucket buffer
        taken over, or None; whether unit i holds a bucket) for micro-batch m's gradient."""
        acc = None if reduces_per_micro_batch(self.Z) else self.env.get(("g", i, m - 1))
        holds = holds_bucket(self.Z, self.u(i).get("frozen", False) is True)
        reused = bucket_reused(len(self.released))
        return acc, self.released[reused] if holds and reused is not None else None, holds

    def grad_task(self, name: str, operands: list, acc, free, outs: tuple, attrs: dict) -> Operation:
        """A task making unit i's micro-batch gradient (a whole Backward, or W): `outs`'
        (types, sizes, names) then the gradient (its bucket under ZeRO >= 2)."""
        i, m, u = attrs["unit"], attrs["mb"], self.u(attrs["unit"])
        types, sizes, names = (list(x) for x in outs)
        types.append(GRAD)
        sizes.append(int(u["bucket"] if reduces_per_micro_batch(self.Z) else u["grad"]))
        names.append(f"bucket{i}_{m}" if reduces_per_micro_batch(self.Z) else f"g{i}_{m}")
        if acc is not None:
            attrs["inplace"] = True
        op = _task(name, operands + ([acc] if acc else []) + ([free] if free is not None else []), types,
                   {**attrs, "sizes": sizes}, names)
        self.env["g", i, m] = op.results[-1]
        return op

    def collect(self, i: int, m: int, op: Operation, holds: bool) -> list:
        """ZeRO >= 2: the collective after unit i's micro-batch gradient (the reduce, or
        GradSync for the last micro-batch), whose token frees the bucket buffer."""
        if not holds:
            return []
        follow = [self.reduce(i, m) if m < self.M - 1 else self.grad_sync(i)]
        self.released.append(follow[0].results[0])
        return follow

    def recover(self, i: int, m: int, tasks: list) -> list:
        """Recover(i, m) before Backward(i, m) when unit i recomputes something (appended to
        `tasks`); the values that Backward reads for what its Forward saved. A whole-layer
        Recover re-runs the Forward from its input with its parameters; a selective one the
        attention core from the saved Q, K, V."""
        choice = self.choice(i)
        if choice == "full":
            return [self.env["saved", i, m]]
        u, work = self.u(i), recover_work({"keep": choice})
        before: list = []
        if choice == "layer":
            self.env["rec_w", i, m] = self.weights(i, m, "rec", before)
            operands = [self.env["x", i, m], self.env["rec_w", i, m]]
        else:
            operands = [self.env["saved", i, m]]
        workspace = u["workspace"] if choice == "layer" else ByteSize(0)       # (the core's scores stay in the DSPs)
        rec = _task("life.recover", operands, [REC], {
            "unit": i, "mb": m, "dur": u[work["dur"]], "compute": u[work["compute"]], "ddr": u[work["ddr"]],
            "workspace": workspace, "res": "compute", "prio": PRIO_MAIN, "sizes": [int(u[work["bytes"]])],
            "placement": "bwd"}, [f"rec{i}_{m}"])
        tasks.append((before, rec, []))
        return [rec.result] if choice == "layer" else [self.env["saved", i, m], rec.result]

    def reduce(self, i: int, m: int) -> Operation:
        """ZeRO >= 2: micro-batch m's bucket goes into the shard right after Backward(i, m);
        the last micro-batch's bucket is reduced by GradSync itself (which state-pipeline
        keeps right after that Backward in both modes, as ZeRO-2 does)."""
        u = self.u(i)
        prev = self.env.get(("acc", i, m - 1))
        attrs = {"unit": i, "mb": m, "dur": u["reduce"], "res": "link", "prio": PRIO_REDUCE,
                 "sizes": [int(u["grad"])]}
        if prev is not None:
            attrs["inplace"] = True
        op = _task("life.reduce", [self.env["g", i, m]] + ([prev] if prev else []), [TOKEN, GRAD],
                   {**attrs, "sizes": [0, int(u["grad"])]}, [f"bfree{i}_{m}", f"acc{i}_{m}"])
        self.env["acc", i, m] = op.results[-1]
        return op

    def grad_sync(self, i: int) -> Operation:
        """GradSync(i): the layer's accumulated gradient (ZeRO 0/1) or last bucket (ZeRO >= 2)
        into its synchronized form; under ZeRO >= 2 also the token freeing that bucket buffer."""
        M, Z, u = self.M, self.Z, self.u(i)
        operands = [self.env["g", i, M - 1]]
        if reduces_per_micro_batch(Z) and M > 1:
            operands.append(self.env["acc", i, M - 2])
        size = int(u["shard"])      # the synchronized gradient: the part this replica updates
        attrs = {"unit": i, "kind": u["sync_kind"], "dur": u["sync"], "res": "link", "prio": PRIO_SYNC,
                 "sizes": [0, size] if reduces_per_micro_batch(Z) else [size]}
        if not syncs_by_reduce_scatter(Z) or len(operands) == 2:     # an all-reduce sums in place
            attrs["inplace"] = True
        types, names = ([TOKEN, GRAD], [f"bfree{i}_{M - 1}", f"gs{i}"]) if reduces_per_micro_batch(Z) else ([GRAD], [f"gs{i}"])
        op = _task("life.grad_sync", operands, types, attrs, names)
        self.env["gs", i] = op.results[-1]
        return op

    def tie_sum(self, i: int) -> Operation:
        """TieSum(i): unit i's synchronized gradient with its tied part summed over the copies
        (the other copies' on this stage first, then its own, which it overwrites when it is
        the only one here; across stages an all-reduce between the group's stages)."""
        group = next(g for g in self.ties if i in g)
        mine = [self.env["gs", j] for j in group if j != i and j in self.local] + [self.env["gs", i]]
        u = self.u(i)
        attrs = {"unit": i, "stages": sorted({self.u(j)["stage"] for j in group}), "dur": u["tie"],
                 "res": "link", "prio": PRIO_SYNC, "sizes": [int(u["shard"])]}
        if len(mine) == 1:
            attrs["inplace"] = True
        op = _task("life.tie_sum", mine, [GRAD], attrs, [f"gt{i}"])
        self.env["gt", i] = op.result
        return op

    def state_chain(self) -> None:
        """GradSync (ZeRO 0/1; under ZeRO >= 2 it follows its last Backward), UpdateShard and
        PrefetchW of every layer at the step end (bulk), then step_end. A frozen unit has none:
        the next step reads its parameters as they are."""
        Z = self.Z
        order = [uop.attributes["index"] for uop in reversed(self.units) if not uop.attributes.get("frozen", False)]
        views = {uop.attributes["index"]: self.env["w", uop.attributes["index"]] for uop in self.units
                 if uop.attributes.get("frozen", False)}
        for i in order:
            if not reduces_per_micro_batch(Z):
                self.emit(self.grad_sync(i))
        for i in order:
            if "tied" in self.u(i):
                self.emit(self.tie_sum(i))
        for i in order:
            u = self.u(i)
            grad = self.env["gt" if "tied" in u else "gs", i]
            self.env["w'", i] = self.emit(_task("life.update", [grad, self.env["s", i],
                                                                self.env["w", i]], [PARAM], {
                "unit": i, "dur": u["update"], "res": "ddr", "prio": PRIO_STATE, "sizes": [int(u["param"])],
                "inplace": True}, [f"w{i}_next"])).result
        for i in order:
            u = self.u(i)
            if prefetches(Z):
                views[i] = self.emit(_task("life.prefetch", [self.env["w'", i]], [VIEW], {
                    "unit": i, "dur": u["prefetch"], "res": "link", "prio": PRIO_STATE,
                    "sizes": [int(u["param"])], "inplace": True}, [f"view{i}"])).result
            else:
                views[i] = self.env["w'", i]
        self.emit(Operation("life.step_end", [views[i] for i in sorted(views)]))


def lower(module: Module, act_policy: str | None = None) -> Operation:
    """Append a `life.pipeline` lowered from the module's plan; return it."""
    plan = find_plan(module)
    if any(op.name == "life.pipeline" for op in module.body.ops):
        raise RatcError(f"module @{module.name} is already lowered (it has a life.pipeline)")
    a = plan.attributes
    act = act_policy or a["act"]
    P, M = a["P"], a["A"]
    units = plan.region.ops
    if M > limits.MAX_MICRO_BATCHES:
        raise RatcError(f"life.plan: M = {M} micro-batches per step; ratc compiles programs of at most "
                        f"{limits.MAX_MICRO_BATCHES} (each micro-batch is a Forward and a Backward of every layer on "
                        f"every stage, about {M * len(units) * 2:,} tasks here); use larger micro-batches "
                        "(b in a plan, --micro-batch to the planner) or a smaller global batch")
    # the plan's own rules (units numbered 0.. in order, each stage a non-empty run of them)
    # are what the loops below rely on, also when the pass manager does not verify
    verify_op(plan)
    v = a.get("v", 1)
    # (each rank's units in chunk order)
    by_stage = [sorted((u for u in units if u.attributes["stage"] == p), key=lambda u: u.attributes.get("chunk", 0))
                for p in range(P)]
    stages = []
    for p, us in enumerate(by_stage):
        low = _StageLowering(plan, p, us, act)
        low.state()
        # every rank issues its Forwards (then its Backwards) in the schedule's order of each
        # kind: one global order whose dependencies point backwards, so no deadlock, and the
        # ZeRO >= 2 bucket chain built here holds after schedule-1f1b's reorder
        forwards, backwards, weights = chunk_orders(P, v, M, p, a.get("sched", "1f1b"))
        for chunk, m in forwards:
            low.forward(m, chunk)
        for chunk, m in backwards:
            low.backward(m, chunk)
        if low.zb:      # (then every W, in the order the schedule runs them)
            for chunk, m in weights:
                low.weight_grad(m, chunk)
        low.state_chain()
        stages.append(Operation("life.stage", attributes={"stage": p, "units": [u.attributes["index"] for u in us]},
                                sym_name=f"s{p}", region=Block(low.ops)))
    attrs = {"plan": SymbolRef(plan.sym_name), "act": act, "schedule": "gpipe"}
    pipe = Operation("life.pipeline", attributes=attrs, sym_name="step", region=Block(stages))
    module.body.append(pipe)
    return pipe

"""The functional executor: trains a real model by interpreting a scheduled life program.

All P stages and D replicas live in one process. Each stage's ops run in their scheduled
order, one handler per life op; stages are interleaved round-robin and a stage waits only
at a `life.recv` whose message has not been sent yet. The D replicas of a stage run each op
together, which is where collectives happen. Gradients come from per-unit autograd: a
unit's forward runs on detached inputs, and its Backward calls `torch.autograd.grad` on
that unit's outputs only; nothing calls the whole model's backward. A zero-bubble
Backward is two tasks: I differentiates against the unit's inputs only and keeps the
graph, its W against the parameters, from that graph.

Runtime values per SSA value and replica: `!life.act` a dict of boundary tensors (or of
their gradients), `!life.saved`/`!life.rec` a unit's autograd graph (an I's kept value: its
`_Held`), `!life.grad` a flat gradient (full or this replica's shard), `!life.view` a flat
parameter vector, `!life.param`/`!life.opt` the replica's `UnitState` of that unit.
"""

from __future__ import annotations

import time

import torch

from ratc.errors import RatcError
from ratc.ir.core import Module, Operation
from ratc.step.plan import Plan
from ratc.step.rules import syncs_by_reduce_scatter, unit_save_choice
from ratc.vm.functional.boundary import live_in
from ratc.vm.functional.shards import AdamW, UnitState, all_gather
from ratc.vm.functional.streams import RecoveryStream
from ratc.vm.functional.transport import LocalTransport
from ratc.vm.functional.units import UnitSet


class ExecutionError(RatcError):
    """A task could not run; the message names the op, its stage and its unit/micro-batch."""


class _Saved:
    """A unit's forward kept for its Backward: detached input leaves, parameter leaves, outputs,
    and the inputs it changed in place (name -> the changed copy: they are outputs too)."""

    __slots__ = ("leaves", "params", "outs", "mutated")

    def __init__(self, leaves, params, outs, mutated):
        self.leaves, self.params, self.outs, self.mutated = leaves, params, outs, mutated


class _Held:
    """What a zero-bubble I keeps for its W: the unit's forward (its graph retained), and the
    outputs and gradients the Backward starts from. That is the whole autograd graph, more
    than the program's I keeps for its W (ratc.step.rules.held_for_w: the weighted GEMMs'
    inputs and output gradients): the executor's and the runtime's memory is the host's, not
    the modelled accelerator's, whose the planner, the verifier and the system VM count."""

    __slots__ = ("saved", "outs", "seeds")

    def __init__(self, saved, outs, seeds):
        self.saved, self.outs, self.seeds = saved, outs, seeds


def _needing_grad(tensors: list) -> list:
    """The tensors autograd differentiates against (leaves that require a gradient)."""
    return [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad]


def describe(op: Operation) -> str:
    """`%x2_0 = life.fwd {unit = 1, mb = 0}`: how errors name an op."""
    a = op.attributes
    keys = [k for k in ("unit", "mb", "dir", "peer", "phase", "kind") if k in a]
    attrs = ", ".join(f"{k} = {a[k]!r}" if isinstance(a[k], str) else f"{k} = {a[k]}" for k in keys)
    res = ", ".join(f"%{v.name}" for v in op.results)
    return f"{res + ' = ' if res else ''}{op.name} {{{attrs}}}"


def _copies(unit, args: list) -> list:
    """Each tensor argument as a fresh tensor (autograd flows back through the copy), if the
    unit has an op that may write into an input; else the arguments themselves."""
    if not unit.inplace:
        return list(args)
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _run(unit, params: list, copies: list, selective: bool = False) -> tuple:
    """(outputs, {input name: its copy} for the inputs the unit changed in place)."""
    versions = [a._version if isinstance(a, torch.Tensor) else None for a in copies]
    outs = unit.run(params, copies, selective)
    mutated = {name: a for name, a, v in zip(unit.inputs, copies, versions)
               if v is not None and a._version != v}
    return outs, mutated


def _detached(value):
    """A value handed to the next unit: a tensor cut from this unit's graph; a Python
    number (a shape read, a scale) as it is."""
    return value.detach() if isinstance(value, torch.Tensor) else value


def _kind(value) -> str:
    """The life type name of a value: act, saved, rec, grad, param, opt, view, token."""
    return str(value.type).removeprefix("!life.")


class Pending:
    """An asynchronous result (a collective or a receive in flight), waited at its first reader;
    `keep` holds the tensors the work reads or writes alive until then."""

    __slots__ = ("wait", "keep", "ready")

    def __init__(self, wait, keep=(), ready=None):
        self.wait = wait        # () -> the value
        self.keep = keep
        # () -> whether wait() can return now; in one process, work another stage has not
        # yet contributed to (a TieSum) makes its reader yield to the other stages
        self.ready = ready or (lambda: True)


def stage_units(pipe: Operation) -> list[set]:
    """The units each stage holds (not read off its ops: under interleaved 1F1B a send or a
    receive names the boundary unit, which its peer holds)."""
    return [set(s.attributes["units"]) for s in pipe.region.ops]


class FunctionalExecutor:
    """Runs a verified life program step after step on real tensors; `step(batch)` is the loss.

    The transport decides which stages and replicas run here and how their tensors cross
    (in this process, or over torch.distributed); everything else is the same code."""

    def __init__(self, module: Module, units: UnitSet, init_params: list[torch.Tensor], opt: AdamW = AdamW(),
                 transport=None, recovery_stream: RecoveryStream | None = None):
        from ratc.ir import verify
        from ratc.lifecycle.lowering import find_pipeline, find_plan

        verify(module)     # a corrupted schedule is rejected here, before any tensor is touched
        pipe, plan = find_pipeline(module), find_plan(module)
        config = Plan.from_ir(plan).config
        self.P, self.M, self.Z, self.D, self.b = config.P, config.A, config.Z, config.D, config.b
        if len(plan.region.ops) != len(units.units):
            raise RatcError(f"the program has {len(plan.region.ops)} units, the model splits into {len(units.units)}")
        self.units = units
        self.stages = [s.region.ops for s in pipe.region.ops]
        self.transport = transport if transport is not None else LocalTransport(self.P, self.D)
        self.on_task = None     # (stage, op, start ns, end ns) after each op's handler, if set
        self.recovery_stream = recovery_stream      # co-running Recovers' side stream (a GPU's), or None
        self.replicas = self.transport.replicas
        self.live = live_in(units)
        self.head = len(units.units) - 1
        # units whose Forward keeps all but the attention core (ratc.step.rules.save_choice)
        self.selective = {u.attributes["index"] for u in plan.region.ops
                          if unit_save_choice(pipe.attributes["act"], u.attributes) == "selective"}
        frozen = [u.frozen_mask() for u in units.units]
        # state[r][u] for the replicas and units held here (None elsewhere)
        self.on_stage = stage_units(pipe)
        held = set().union(*(self.on_stage[p] for p in self.transport.stages))
        ties = [list(g) for g in plan.attributes.get("ties", [])]
        if ties != units.ties:
            raise RatcError(f"the program sums tied gradients over units {ties or 'of no group'}, but in the model "
                            f"units {units.ties or 'of no group'} share a parameter: the program was compiled "
                            "for another model")
        self.ties = ties
        self.state = [[UnitState(init_params[u.index], r, self.D, self.Z, opt, frozen[u.index], u.segments)
                       if u.index in held else None for u in units.units]
                      if r in self.replicas else None for r in range(self.D)]
        # Each value is dropped after its last reader, as the memory plan assumes.
        self.last_use = []
        for ops in self.stages:
            last = {}
            for k, op in enumerate(ops):
                for v in op.results:
                    last.setdefault(v, k)
                for v in op.operands:
                    last[v] = k
            self.last_use.append(last)
        self.handlers = {
            "life.param": self._param, "life.opt": self._param, "life.fwd": self._fwd,
            "life.recover": self._recover, "life.bwd": self._bwd, "life.bwd_i": self._bwd_i,
            "life.bwd_w": self._bwd_w, "life.send": self._send,
            "life.recv": self._recv, "life.gather": self._gather, "life.reduce": self._reduce,
            "life.grad_sync": self._grad_sync, "life.tie_sum": self._tie_sum, "life.update": self._update,
            "life.prefetch": self._gather, "life.step_end": self._step_end,
        }

    # ---- driver -------------------------------------------------------------------------------

    def step(self, batch: dict[str, torch.Tensor]) -> float:
        """One training step on a global batch ({input name: [D*M*b, ...]}); the mean loss."""
        M, D = self.M, self.D
        rows = next(iter(batch.values())).shape[0]
        if rows != D * M * self.b:
            raise RatcError(f"the program trains D={D} x M={M} micro-batches of b={self.b} sequences, "
                            f"the global batch has {rows}")
        self.data = {name: t.chunk(D * M) for name, t in batch.items()}
        # per unit, the parameters some Backward of this step gave a gradient (PyTorch's
        # AdamW skips the others: their .grad is None)
        self.touched: list[set] = [set() for _ in self.units.units]
        self.vals: list[dict] = [{} for _ in range(self.P)]
        self.losses: dict = {}
        self.transport.begin_step()
        pcs = {p: 0 for p in self.transport.stages}
        while any(pc < len(self.stages[p]) for p, pc in pcs.items()):
            progressed = False
            for p in pcs:
                ops, vals = self.stages[p], self.vals[p]
                while pcs[p] < len(ops):
                    op = ops[pcs[p]]
                    if op.name == "life.recv" and not self.transport.ready(p, op):
                        break
                    if any(isinstance(vals.get(v), Pending) and not vals[v].ready() for v in op.operands):
                        break
                    self._run(p, pcs[p], op)
                    pcs[p] += 1
                    progressed = True
            if not progressed:
                blocked = "; ".join(f"stage {p}: {describe(self.stages[p][pc])}"
                                    for p, pc in pcs.items() if pc < len(self.stages[p]))
                raise ExecutionError(f"deadlock: every unfinished stage waits for a message never sent ({blocked})")
        try:
            return self.transport.end_step(self.losses, M * D)
        except ExecutionError:
            raise
        except RatcError as exc:
            raise ExecutionError(str(exc)) from None

    def _run(self, p: int, k: int, op: Operation) -> None:
        handler = self.handlers.get(op.name)
        if handler is None:
            raise ExecutionError(f"stage {p}: no handler for '{op.name}' ({describe(op)})")
        vals = self.vals[p]
        try:
            missing = [v for v in op.operands if v not in vals]
            if missing:
                raise RatcError(f"operand %{missing[0].name} has not been computed (or was already consumed)")
            for v in op.operands:
                if isinstance(vals[v], Pending):      # asynchronous work is waited at its first reader
                    vals[v] = vals[v].wait()
            if self.on_task is None:
                results = handler(p, op, [vals[v] for v in op.operands])
            else:
                start = time.time_ns()
                results = handler(p, op, [vals[v] for v in op.operands])
                self.on_task(p, op, start, time.time_ns())
        except ExecutionError:
            raise
        except RatcError as exc:
            raise ExecutionError(f"stage {p}: {describe(op)}: {exc}") from None
        if results and len(results) < len(op.results):   # leading tokens (bucket-buffer releases) carry no data
            results = [None] * (len(op.results) - len(results)) + list(results)
        for v, r in zip(op.results, results or ()):
            vals[v] = r
        last = self.last_use[p]
        for v in list(op.operands) + list(op.results):
            if last.get(v) == k:
                vals.pop(v, None)

    def parameters(self) -> list[torch.Tensor]:
        """Each unit's current flat parameters, assembled from the replicas' shards (one process
        holding every replica)."""
        return [all_gather([self.state[r][u] for r in range(self.D)]) for u in range(len(self.units.units))]

    # ---- helpers -----------------------------------------------------------------------------

    def _operands(self, op: Operation, ins: list) -> dict:
        """Operands by life type name (each op has at most one of each, plus a trailing grad)."""
        by = {}
        for v, x in zip(op.operands, ins):
            by.setdefault(_kind(v), []).append(x)
        return by

    def _weights(self, by: dict, k: int) -> torch.Tensor:
        """The k-th held replica's parameter view."""
        if "view" in by:
            return by["view"][0][k]
        state = by["param"][0][k]
        if state.view is None:
            raise RatcError("the parameter view is stale: UpdateShard ran and no PrefetchW materialized the new one")
        return state.view

    def _args(self, unit, env: dict, r: int, m: int) -> list:
        args = []
        for name in unit.inputs:
            if name in env:
                args.append(env[name])
            elif name in self.data:
                args.append(self.data[name][r * self.M + m])
            elif name in self.units.defaults:       # a defaulted forward argument the batch does not give
                args.append(self.units.defaults[name])
            else:
                raise RatcError(f"unit {unit.index} reads '{name}', which is not in its input activation")
        return args

    def _forward(self, unit, flat: torch.Tensor, args: list) -> _Saved:
        leaves = [a.detach().requires_grad_(True) if g and a.dtype.is_floating_point else a
                  for a, g in zip(args, unit.input_grad)]
        # One leaf per parameter tensor: slicing a single flat leaf would make every slice's
        # backward materialize a gradient of the whole vector. Frozen ones get no gradient
        # (flat_grad fills zeros), as in PyTorch.
        params = [v.requires_grad_(t) for v, t in zip(unit.views(flat.detach()), unit.trainable)]
        # The unit runs on copies: an in-place op on an input (x.add_(y), valid PyTorch on a
        # layer's output) must change neither the leaf autograd differentiates against nor the
        # checkpoint a Recover starts from.
        with torch.enable_grad():
            outs, mutated = _run(unit, params, _copies(unit, leaves), unit.index in self.selective)
        return _Saved(leaves, params, outs, mutated)

    # ---- handlers: the main path -------------------------------------------------------------

    def _param(self, p: int, op: Operation, ins: list) -> list:
        u = op.attributes["unit"]
        return [[self.state[r][u] for r in self.replicas]]

    def _fwd(self, p: int, op: Operation, ins: list) -> list:
        i, m = op.attributes["unit"], op.attributes["mb"]
        unit = self.units.units[i]
        by = self._operands(op, ins)
        kinds = [_kind(v) for v in op.results]
        acts, saves = [], []
        for k, r in enumerate(self.replicas):
            env = by["act"][0][k] if "act" in by else {}
            args = self._args(unit, env, r, m)
            flat = self._weights(by, k)
            if "saved" in kinds:
                saved = self._forward(unit, flat, args)
                outs, mutated = saved.outs, saved.mutated
                saves.append(saved)
            else:
                with torch.no_grad():       # the Recover task rebuilds this graph later
                    outs, mutated = _run(unit, unit.views(flat), _copies(unit, args))
            produced = dict(zip(unit.outputs, outs))
            # (an input the unit changed in place reaches later units changed, as in PyTorch)
            produced.update({n: t for n, t in mutated.items() if n not in produced})
            if i == self.head:
                self.losses[(r, m)] = produced[self.units.loss].detach()    # (the transport reads it)
            else:
                acts.append({n: _detached(produced[n] if n in produced else env[n]) for n in self.live[i + 1]})
        return [acts if k == "act" else saves for k in kinds]

    def _recover(self, p: int, op: Operation, ins: list) -> list:
        i, m = op.attributes["unit"], op.attributes["mb"]
        unit = self.units.units[i]
        by = self._operands(op, ins)
        if "act" not in by:
            # A selective Recover (keep = selective) reads what its Forward saved: that graph
            # holds each attention core's operands only, and autograd re-runs the core when
            # the Backward reaches it (torch's checkpoint), so the Recover hands it on.
            return [by["saved"][0]]
        inputs = [(self._weights(by, k), self._args(unit, by["act"][0][k], r, m)) for k, r in enumerate(self.replicas)]

        def rebuild():
            return [self._forward(unit, flat, args) for flat, args in inputs]
        if self.recovery_stream is None or op.attributes.get("placement") != "corun":
            return [rebuild()]
        # On a GPU the co-running Recover overlaps the main stream; its Backward waits for it.
        return [Pending(self.recovery_stream.run(rebuild, inputs), keep=inputs)]

    def _roots(self, i: int, saved: _Saved, dy: dict) -> tuple[list, list]:
        """(outputs, their gradients) a Backward of unit i starts from: the loss seeded with
        1/M (each micro-batch's loss weighs 1/M of the step), else the received gradients."""
        outs, seeds = [], []
        for name, o in [*zip(self.units.units[i].outputs, saved.outs), *saved.mutated.items()]:
            if not (isinstance(o, torch.Tensor) and o.requires_grad):
                continue
            g = torch.full_like(o, 1.0 / self.M) if i == self.head and name == self.units.loss else dy.get(name)
            if g is not None:
                outs.append(o)
                seeds.append(g)
        return outs, seeds

    def _input_grad(self, i: int, saved: _Saved, dy: dict, got: list) -> dict:
        """The gradient unit i hands back: autograd's for its inputs (`got`, one per input leaf
        needing one), plus the values merely passing through it."""
        unit = self.units.units[i]
        # (one it changed in place got its gradient as an output)
        dx = {n: dy[n] for n in self.live[i] if n in dy and n not in saved.mutated}
        it = iter(got)
        for name, a in zip(unit.inputs, saved.leaves):
            if isinstance(a, torch.Tensor) and a.requires_grad:
                g = next(it)
                if g is not None and name in self.live[i]:
                    dx[name] = dx[name] + g if name in dx else g
        return dx

    def _weight_grad(self, i: int, saved: _Saved, got: list, acc) -> torch.Tensor:
        """Unit i's flat gradient from autograd's per trained parameter (`got`), accumulated in
        place into `acc` (the micro-batches' sum so far) if given."""
        unit = self.units.units[i]
        it = iter(got)
        per_param = [next(it) if w.requires_grad else None for w in saved.params]
        self.touched[i].update(k for k, g in enumerate(per_param) if g is not None)
        g_param = unit.flat_grad(per_param)
        return g_param if acc is None else acc.add_(g_param)

    def _bwd(self, p: int, op: Operation, ins: list) -> list:
        i = op.attributes["unit"]
        by = self._operands(op, ins)
        saved_all = by.get("saved", by.get("rec"))[0]
        acc_all = by["grad"][0] if "grad" in by else None
        dxs, grads = [], []
        for k, saved in enumerate(saved_all):
            dy = by["act"][0][k] if "act" in by else {}
            outs, seeds = self._roots(i, saved, dy)
            inputs = _needing_grad(saved.leaves)
            trained = _needing_grad(saved.params)
            got = list(torch.autograd.grad(outs, inputs + trained, seeds, allow_unused=True)) if outs \
                else [None] * (len(inputs) + len(trained))
            dxs.append(self._input_grad(i, saved, dy, got[:len(inputs)]))
            grads.append(self._weight_grad(i, saved, got[len(inputs):], acc_all[k] if acc_all is not None else None))
        return [dxs if _kind(v) == "act" else grads for v in op.results]

    def _bwd_i(self, p: int, op: Operation, ins: list) -> list:
        """I (zero bubble): the input gradient only, from the unit's graph, which it keeps (with
        the outputs and gradients it started from) for its W."""
        i = op.attributes["unit"]
        by = self._operands(op, ins)
        saved_all = by.get("saved", by.get("rec"))[0]
        dxs, held = [], []
        for k, saved in enumerate(saved_all):
            dy = by["act"][0][k] if "act" in by else {}
            outs, seeds = self._roots(i, saved, dy)
            inputs = _needing_grad(saved.leaves)
            got = list(torch.autograd.grad(outs, inputs, seeds, retain_graph=True, allow_unused=True)) \
                if outs and inputs else [None] * len(inputs)
            dxs.append(self._input_grad(i, saved, dy, got))
            held.append(_Held(saved, outs, seeds))
        return [dxs if _kind(v) == "act" else held for v in op.results]

    def _bwd_w(self, p: int, op: Operation, ins: list) -> list:
        """W (zero bubble): the weight gradient from the graph its I kept, which autograd then
        frees; accumulated as a whole Backward's."""
        i = op.attributes["unit"]
        held_all = ins[0]           # (the lowering passes I's kept value first)
        by = self._operands(op, ins)
        acc_all = by["grad"][0] if "grad" in by else None
        grads = []
        for k, held in enumerate(held_all):
            trained = _needing_grad(held.saved.params)
            got = list(torch.autograd.grad(held.outs, trained, held.seeds, allow_unused=True)) \
                if held.outs and trained else [None] * len(trained)
            grads.append(self._weight_grad(i, held.saved, got, acc_all[k] if acc_all is not None else None))
            held.outs = held.seeds = None       # released: autograd freed the graph's buffers, this drops its roots
        return [grads]

    def _send(self, p: int, op: Operation, ins: list) -> list:
        self.transport.send(p, op, ins[0])
        return [[None] * len(self.replicas)]

    def _recv(self, p: int, op: Operation, ins: list) -> list:
        return [self.transport.recv(p, op)]

    # ---- handlers: the state chain -----------------------------------------------------------

    def _states(self, op: Operation) -> list[UnitState]:
        return [self.state[r][op.attributes["unit"]] for r in self.replicas]

    def _gather(self, p: int, op: Operation, ins: list) -> list:
        """PrefetchW / ZeRO-3 gather: all-gather the replicas' shards into a full view."""
        states = self._states(op)
        full = self.transport.all_gather(p, op, [s.master.detach() for s in states], states[0].c * states[0].D)
        if isinstance(full, Pending):
            return [Pending(lambda: [states[0].unshard(f) for f in full.wait()], keep=full.keep)]
        return [[states[0].unshard(f) for f in full]]

    def _scatter(self, p: int, op: Operation, buckets: list[torch.Tensor], acc: list | None) -> list:
        states = self._states(op)
        padded = [s.rows(b).reshape(-1) for s, b in zip(states, buckets)]
        shards = self.transport.reduce_scatter_mean(p, op, padded)

        def finish(shards):
            return [sh.clone() if acc is None else acc[k].add_(sh) for k, sh in enumerate(shards)]
        if isinstance(shards, Pending):
            return Pending(lambda: finish(shards.wait()), keep=shards.keep)
        return finish(shards)

    def _reduce(self, p: int, op: Operation, ins: list) -> list:
        """ZeRO >= 2: reduce-scatter one micro-batch's gradient into the shard accumulator."""
        return [self._scatter(p, op, ins[0], ins[1] if len(ins) > 1 else None)]

    def _grad_sync(self, p: int, op: Operation, ins: list) -> list:
        """ZeRO-0: all-reduce (mean); ZeRO >= 1: reduce-scatter (mean) plus the shard accumulator."""
        if op.attributes["kind"] == "all-reduce":
            return [self.transport.all_reduce_mean(p, op, ins[0])]     # UpdateShard reads it without writing
        return [self._scatter(p, op, ins[0], ins[1] if len(ins) > 1 else None)]

    def _tie_sum(self, p: int, op: Operation, ins: list) -> list:
        """TieSum: each replica's synchronized gradient (shard) with its tied part replaced by the
        sum over the group's copies: this stage's in unit order, then over the group's stages."""
        i = op.attributes["unit"]
        group = next(g for g in self.ties if i in g)
        mine = [j for j in group if j != i and j in self.on_stage[p]] + [i]
        grads = dict(zip(mine, ins))
        states = self._states(op)
        partial = []
        for k, r in enumerate(self.replicas):
            total = None
            for j in sorted(grads):
                part = self.state[r][j].tied_part(grads[j][k])
                total = part.clone() if total is None else total.add_(part)
            partial.append(total)
        stages = op.attributes["stages"]
        summed = self.transport.tie_sum(p, op, partial, self.ties.index(group), stages) if len(stages) > 1 else partial

        def finish(summed):
            out = []
            for s, own, tied in zip(states, grads[i], summed):
                g = own.clone()
                s.tied_part(g).copy_(tied)
                out.append(g)
            return out
        if isinstance(summed, Pending):
            return [Pending(lambda: finish(summed.wait()), keep=summed.keep, ready=summed.ready)]
        return [finish(summed)]

    def _update(self, p: int, op: Operation, ins: list) -> list:
        """UpdateShard: AdamW on this replica's shard; ZeRO >= 1 views are stale until PrefetchW."""
        grads, _opt, params = ins
        u = op.attributes["unit"]
        unit = self.units.units[u]
        skip = unit.mask_of([k not in self.touched[u] for k in range(len(unit.param_shapes))])
        for s, g in zip(params, grads):
            if g.numel() != s.c:
                raise RatcError(f"gradient of {g.numel()} elements for a shard of {s.c}")
            s.step(g.clone(), skip)
            s.view = None if syncs_by_reduce_scatter(s.Z) else s.master.detach()[:s.N]
        return [params]

    def _step_end(self, p: int, op: Operation, ins: list) -> list:
        """Hand each unit's view to the next step (ZeRO-3 keeps none; it gathers per use)."""
        for v, per_replica in zip(op.operands, ins):
            if _kind(v) == "view":
                for s, view in zip(self._states(v.owner), per_replica):
                    s.view = view
        return []

"""Interpret a scheduled `life.pipeline` as the VM's task graph: one handler per op name.

Scheduled order per stage: compute ops and receives form one in-order stream (a compute
op also waits for the receives scheduled before it); a co-running Recover (fsr) runs
alongside the compute op before it. DDR and link ops wait for the
compute-stream op scheduled before them (so a bulk GradSync placed after the last
Backward stays there) and issue in scheduled order within their (resource, `prio`)
queue; across queues a contended port goes to the lower `prio` first (0: stage-boundary
transfers), without preemption. A collective (GradSync, the ZeRO-2 reduce, PrefetchW, the ZeRO-3 gather) runs as a ring
over the D replicas (collectives.py), its `dur` split evenly over the ring's steps.

Values live from their producer's start until their last reader ends; an `inplace` op's
last result reuses its last operand's buffer; parameters, optimizer state and whatever
`life.step_end` hands over stay live. `steps` consecutive steps are simulated: step k+1's
uses of a layer's parameters wait for step k's view of that layer, or after a bulk
update-prefetch (one step-end phase) for the stage's step_end.
"""

from __future__ import annotations

from ratc.errors import RatcError
from ratc.gcpause import gc_paused
from ratc.lifecycle.actions import token
from ratc.lifecycle.checks import message
from ratc.lifecycle.lowering import find_pipeline, find_plan
from ratc.step.plan import Plan
from ratc.vm.system.collectives import ring_of_steps
from ratc.vm.system.task_graph import Task, TaskGraph, TaskGraphError

HANDLERS: dict = {}

# Priorities from the IR are scaled so the stage's scheduled order breaks ties among them.
_ORDER_BITS = 24

_COLLECTIVE = {"life.grad_sync": None, "life.reduce": "reduce_scatter", "life.prefetch": "all_gather",
               "life.gather": "all_gather"}
# The kind of task each life op is (the trace category of its slices).
TASK_KINDS = {"life.fwd": "forward", "life.bwd": "backward", "life.bwd_i": "backward", "life.bwd_w": "weight_grad",
              "life.recover": "recover", "life.send": "send",
              "life.recv": "send", "life.grad_sync": "grad_sync", "life.reduce": "grad_sync", "life.update": "update",
              "life.prefetch": "prefetch", "life.gather": "gather", "life.tie_sum": "grad_sync",
              "life.param": "marker", "life.opt": "marker",
              "life.step_end": "marker"}


def handler(*names):
    """Register a function as the VM's handler of the named life ops."""
    def register(fn):
        for n in names:
            HANDLERS[n] = fn
        return fn
    return register


class _Translation:
    """State while laying out the stages' ops as tasks."""

    def __init__(self, module, platform, steps: int, symmetric: bool, macs_per_step: float, memory_limit: bool):
        self.plan = find_plan(module)
        self.pipe = find_pipeline(module)
        plan = Plan.from_ir(self.plan)
        c = plan.config
        if c.T != 1:
            raise RatcError(f"the system VM runs T = 1 programs only (this plan has T = {c.T})")
        self.D = c.D
        self.clock = platform.cycles_per_second
        self.update_in_stream = platform.updates_in_compute_stream
        self.comm_in_stream = platform.collectives_in_compute_stream(c.P * c.D)
        self.prog = TaskGraph(
            stages=c.P, replicas=c.D, symmetric=symmetric, steps=steps, clock=self.clock,
            memory_budget=plan.budget if memory_limit else None,
            tokens_per_step=c.global_batch * self.plan.attributes["seq_len"], macs_per_step=macs_per_step,
            peak_mac_rate=platform.cluster.peak_mac_rate, units=len(self.plan.region.ops))
        self.R = self.prog.simulated_replicas
        # per step (a dict each: no (step, Value) key to make per look-up, and they are many)
        self.done = [{} for _ in range(steps)]      # Value -> per replica: tasks after which it is available
        self.buffer = [{} for _ in range(steps)]    # Value -> buffer name on its stage
        self.pinned: set = set()     # buffers that live across the step boundary
        self.views: dict = {}        # (step, stage, unit) -> the Value handed to the next step
        self.sends: dict = {}        # (src, dst, mb, dir, unit, step) -> per replica send task
        self.recvs: list = []        # (key, per replica recv task)
        self.producer: dict = {}     # buffer -> per replica producing task
        self.readers: dict = {}      # buffer -> [per replica reading tasks, ...] in issue order, for the frees
        self.chains = [[None] * self.R for _ in range(c.P)]   # last compute task per stage
        self.hosts: list = [None] * c.P   # per stage, the last compute task's (deps, cycles, corun)
        self.queues: dict = {}       # (stage, res, prio) -> per replica: the queue's last op's end
        self.state: dict = {}        # (stage, op name, unit) -> the first step's param / opt value
        # Bulk update-prefetch is one step-end phase: a stage's next step starts after its
        # life.step_end (as optimizer.step() returns before the next iteration), where the
        # deadline and eager chains hand each layer's view over on its own.
        self.barrier = self.pipe.attributes.get("update") == "bulk"
        self.step_ends: dict = {}    # (step, stage) -> per replica, the step_end task
        self.tie_sums: dict = {}     # (step, tie group) -> [per replica tie_sum task, ...] over its stages
        self.named: dict = {}        # op -> its tasks' (name, kind, priority, layer, micro-batch), every step
        self.held: dict = {}         # add's resources -> replica 0's ((stage, 0, name), ...)

    def cycles(self, seconds: float) -> int:
        return int(round(seconds * self.clock))

    def add(self, op, p, k, resources: tuple, duration, deps, pos, corun=0):
        """One task per simulated replica on `resources` ((stage, name), ...); deps(r) gives
        replica r's dependencies."""
        # This runs once per task of the program, so it appends Tasks itself rather than
        # through TaskGraph.add's checks: kinds come from TASK_KINDS, resources are this
        # module's names and durations whole cycles (the verifier checked `cycles`).
        named = self.named.get(op)
        if named is None:
            a = op.attributes
            named = self.named[op] = (token(op, p), TASK_KINDS[op.name], (a.get("prio", 0) << _ORDER_BITS) | pos,
                                      a.get("unit", -1), a.get("mb", -1))
        name, kind, prio, layer, mb = named
        tasks = self.prog.tasks
        first = len(tasks)
        if self.R == 1:         # one replica stands for all (the usual, symmetric form)
            d = deps(0)
            held = self.held.get(resources)
            if held is None:
                held = self.held[resources] = tuple([(s, 0, x) for s, x in resources])
            tasks.append(Task(name, kind, p, 0, held, duration,
                              d if len(d) < 2 else tuple(dict.fromkeys(d)), prio, (), (), layer, mb, -1, k, corun))
            return [first]
        ids = []
        for r in range(self.R):
            d = deps(r)
            ids.append(len(tasks))
            tasks.append(Task(name, kind, p, r, tuple([(s, r, x) for s, x in resources]), duration,
                              d if len(d) < 2 else tuple(dict.fromkeys(d)), prio, (), (), layer, mb,
                              first if r else -1, k, corun))
        return ids

    def operand_deps(self, op, k):
        """Per replica r, the tasks after which all the op's operands are available."""
        done = self.done[k]
        deps = [done[v] for v in op.operands]
        if len(deps) == 1:
            (one,) = deps
            return one.__getitem__
        return lambda r: tuple([d for per in deps for d in per[r]])

    def background(self, op, p, k):
        """Deps of a DDR or link op: its operands, the compute-stream op scheduled before it,
        and the previous op of its (resource, priority) queue, which issues in scheduled order."""
        operands = self.operand_deps(op, k)
        chain = list(self.chains[p])
        queue = self.queues.get(self.queue_key(op, p))
        return lambda r: (operands(r) + ((chain[r],) if chain[r] is not None else ())
                          + (tuple(queue[r]) if queue else ()))

    def queue_key(self, op, p):
        return p, op.attributes["res"], op.attributes.get("prio", 0)

    def run(self):
        stages = self.pipe.region.ops
        for k in range(self.prog.steps):
            for stage in stages:
                self.stage(stage, k)
        for key, recv in self.recvs:
            if key not in self.sends:
                raise TaskGraphError(f"life.recv on stage {key[1]} (micro-batch {key[2]}, {key[3]}"
                                      f"{'' if key[4] is None else f', unit {key[4]}'}) has no matching "
                                      f"life.send on stage {key[0]}")
            for r in range(self.R):
                t = self.prog.tasks[recv[r]]
                t.deps = t.deps + tuple(self.sends[key][r])
        # a tie sum across stages starts when every stage's copy is ready (its inputs are)
        for tasks in self.tie_sums.values():
            for r in range(self.R):
                ready = tuple(dict.fromkeys(d for ids in tasks for d in self.prog.tasks[ids[r]].deps))
                for ids in tasks:
                    self.prog.tasks[ids[r]].deps = ready
        self.memory()
        return self.prog

    def stage(self, stage, k):
        p = stage.attributes["stage"]
        for pos, op in enumerate(stage.region.ops):
            fn = HANDLERS.get(op.name)
            if fn is None:
                raise TaskGraphError(f"{op.name} on stage {p} (op #{pos}): the system VM has no handler for this op")
            try:
                fn(self, op, p, k, pos)
            except (KeyError, TypeError, ValueError) as exc:
                raise TaskGraphError(f"{op.name} on stage {p} (op #{pos}): malformed op ({exc!r})") from None

    def produce(self, op, k, ids):
        """Record the op's results as available after `ids` (per replica)."""
        after = [(i,) if type(i) is int else tuple(i) for i in ids]
        done = self.done[k]
        for v in op.results:
            done[v] = after

    def allocate(self, name: str, size: int, made) -> None:
        """A new buffer, live from the start of `made` (per replica producing task)."""
        tasks = self.prog.tasks
        self.producer[name] = made
        self.readers[name] = []
        for i in made:
            t = tasks[i]
            t.allocs = t.allocs + ((name, size),)

    def memory(self):
        """Frees at each reader's end (allocations were made with their producers); pinned values kept."""
        tasks = self.prog.tasks
        pinned = self.pinned
        for name, lists in self.readers.items():
            if name in pinned:
                continue
            for ids in lists or (self.producer[name],):
                for i in ids:
                    t = tasks[i]
                    t.frees = t.frees + (name,)


def _buffers(tr, op, p, k, ids, made=None):
    """Name the op's result buffers (new, or its last operand's when inplace) and note reads;
    `made`: the tasks at whose start the results become live, if not the op's."""
    made = ids if made is None else made
    a = op.attributes
    sizes = a.get("sizes", [])
    results = op.results
    inplace = len(results) - 1 if a.get("inplace") and op.operands else -1   # the result that reuses
    buffer, producer = tr.buffer[k], tr.producer
    for j, v in enumerate(results):
        if j == inplace:
            buffer[v] = buffer.get(op.operands[-1])
            continue
        size = int(sizes[j]) if j < len(sizes) else 0
        if size <= 0:
            continue
        name = f"step{k}.{v.name or 'v'}"
        while name in producer:
            name += "'"
        buffer[v] = name
        tr.allocate(name, size, made)
    readers = tr.readers
    for v in op.operands:
        name = buffer.get(v)
        if name is not None:
            readers[name].append(ids)


@handler("life.param", "life.opt")
def _state(tr, op, p, k, pos):
    """Long-lived state: made at the first step's start, carried over by later steps."""
    unit = op.attributes["unit"]
    (v,) = op.results
    if k == 0:
        ids = tr.add(op, p, k, (), 0, lambda r: (), pos)
        tr.produce(op, k, ids)
        _buffers(tr, op, p, k, ids)
        tr.pinned.add(tr.buffer[k].get(v))
        tr.state[(p, op.name, unit)] = v
        return
    prev = tr.views.get((k - 1, p, unit)) if op.name == "life.param" else None
    if tr.barrier and op.name == "life.param":
        tr.done[k][v] = [(i,) for i in tr.step_ends[(k - 1, p)]]
    else:
        tr.done[k][v] = tr.done[k - 1][prev] if prev is not None else [() for _ in range(tr.R)]
    tr.buffer[k][v] = tr.buffer[0].get(tr.state[(p, op.name, unit)])


@handler("life.fwd", "life.bwd", "life.bwd_i", "life.bwd_w", "life.recover")
def _compute(tr, op, p, k, pos):
    """Main-path and recovery work: the stage's compute engine, in scheduled order.

    A co-running Recover (fsr) holds no engine of its own: it starts with its host, the
    compute op before it, once its own operands are there too, and lasts as long as the
    host, whose duration is the pair's; the stream goes on after the host. One that streams
    into what its host frees (`stream`) holds only that headroom while it runs; its result
    becomes live when it ends (a zero-time marker task), as its host's is released."""
    deps = tr.operand_deps(op, k)
    a = op.attributes
    if a.get("placement") == "corun":
        host_deps, cycles, corun = tr.hosts[p]
        ids = tr.add(op, p, k, (), cycles, lambda r: host_deps(r) + deps(r), pos, corun)
        tr.produce(op, k, ids)
        if "stream" in a:
            whole = tr.add(op, p, k, (), 0, lambda r: (ids[r],), pos)
            _buffers(tr, op, p, k, ids, made=whole)
            if int(a["stream"]) > 0:
                name = f"step{k}.{op.results[0].name or 'v'}.stream"
                while name in tr.producer:
                    name += "'"
                tr.allocate(name, int(a["stream"]), ids)
        else:
            _buffers(tr, op, p, k, ids)
        return
    chain = tr.chains[p]
    # After codegen a task runs for exactly its kernels' cycles (plus the rest, rounded once).
    cycles = a["cycles"] if "cycles" in a else tr.cycles(a["dur"])
    in_order = lambda r: deps(r) + ((chain[r],) if chain[r] is not None else ())  # noqa: E731
    corun = tr.cycles(a["corun"]) if "corun" in a else 0
    ids = tr.add(op, p, k, ((p, "compute"),), cycles, in_order, pos, corun)
    tr.hosts[p] = (in_order, cycles, corun)
    tr.chains[p] = list(ids)
    tr.produce(op, k, ids)
    _buffers(tr, op, p, k, ids)


@handler("life.update")
def _ddr(tr, op, p, k, pos):
    """DDR-bound state work (the optimizer step); on a host, in the compute stream's order
    (its one thread runs it between the compute tasks, which wait for it)."""
    if tr.update_in_stream:
        ids = _in_stream(tr, op, p, k, pos, op.attributes["dur"])
    else:
        ids = tr.add(op, p, k, ((p, "ddr"),), tr.cycles(op.attributes["dur"]), tr.background(op, p, k), pos)
        tr.queues[tr.queue_key(op, p)] = [(i,) for i in ids]
    tr.produce(op, k, ids)
    _buffers(tr, op, p, k, ids)


@handler("life.send")
def _send(tr, op, p, k, pos):
    """A stage-boundary transfer on this stage's transmit and the peer's receive port."""
    a = op.attributes
    ids = tr.add(op, p, k, ((p, "tx"), (a["peer"], "rx")), tr.cycles(a["dur"]), tr.background(op, p, k), pos)
    tr.queues[tr.queue_key(op, p)] = [(i,) for i in ids]
    tr.sends[(*message(op, p), k)] = [(i,) for i in ids]
    tr.produce(op, k, ids)
    _buffers(tr, op, p, k, ids)


@handler("life.recv")
def _recv(tr, op, p, k, pos):
    """The arrival of a peer's send, awaited in the compute stream's order: compute ops
    scheduled after it start only once the message is here (so a Recover placed after
    the gradient's recv is backward-time, one placed before it can fill the wait)."""
    chain = tr.chains[p]
    ids = tr.add(op, p, k, (), 0, lambda r: (chain[r],) if chain[r] is not None else (), pos)
    tr.chains[p] = list(ids)
    tr.recvs.append(((*message(op, p), k), ids))
    tr.produce(op, k, ids)
    _buffers(tr, op, p, k, ids)


def _in_stream(tr, op, p, k, pos, dur: float) -> list:
    """A task in the stage's compute stream, in its scheduled order, after its operands."""
    chain = tr.chains[p]
    deps = tr.operand_deps(op, k)
    ids = tr.add(op, p, k, ((p, "compute"),), tr.cycles(dur),
                 lambda r: deps(r) + ((chain[r],) if chain[r] is not None else ()), pos)
    tr.chains[p] = list(ids)
    return ids


@handler(*_COLLECTIVE)
def _collective(tr, op, p, k, pos):
    """A ring collective over the stage's D replicas; `dur` is the whole collective. Where the
    ranks' threads take every core of a host (Platform.collectives_in_compute_stream) it runs
    in the compute stream's order, the compute waiting for it."""
    a = op.attributes
    kind = _COLLECTIVE[op.name] or a["kind"].replace("-", "_")
    n_steps = (2 if kind == "all_reduce" else 1) * (tr.D - 1)
    deps = tr.background(op, p, k)
    if n_steps and tr.comm_in_stream:
        ids = _in_stream(tr, op, p, k, pos, a["dur"])
        done = [(i,) for i in ids]
    elif n_steps == 0:
        ids = tr.add(op, p, k, (), 0, deps, pos)
        done = [(i,) for i in ids]
    else:
        prio = (a.get("prio", 0) << _ORDER_BITS) | pos
        inputs = [tuple(dict.fromkeys(deps(r))) for r in range(tr.R)]
        done = ring_of_steps(tr.prog, kind, p, tr.cycles(a["dur"] / n_steps), inputs, token(op, p),
                             TASK_KINDS[op.name], layer=a.get("unit", -1), step=k, priority=prio)
        ids = [d[0] for d in done]
    tr.queues[tr.queue_key(op, p)] = done
    tr.produce(op, k, done)
    _buffers(tr, op, p, k, ids)
    if op.name == "life.prefetch":
        tr.views[(k, p, a["unit"])] = op.results[0]


@handler("life.tie_sum")
def _tie_sum(tr, op, p, k, pos):
    """The sum of a tied gradient's copies: on this stage's link (an all-reduce with the
    group's other stages, which it waits for) or, with every copy here, a local add."""
    a = op.attributes
    ids = tr.add(op, p, k, ((p, "tx"),), tr.cycles(a["dur"]), tr.background(op, p, k), pos)
    tr.queues[tr.queue_key(op, p)] = [(i,) for i in ids]
    if len(a["stages"]) > 1:
        group = next(n for n, g in enumerate(tr.plan.attributes.get("ties", [])) if a["unit"] in g)
        tr.tie_sums.setdefault((k, group), []).append(ids)
    tr.produce(op, k, ids)
    _buffers(tr, op, p, k, ids)


@handler("life.step_end")
def _step_end(tr, op, p, k, pos):
    """The stage's step boundary: its operands are the views the next step starts from."""
    ids = tr.add(op, p, k, (), 0, tr.operand_deps(op, k), pos)
    tr.step_ends[(k, p)] = ids
    for v in op.operands:
        unit = v.owner.attributes.get("unit")
        tr.views.setdefault((k, p, unit), v)
        tr.pinned.add(tr.buffer[k].get(v))


# Ring collectives have 2 (D - 1) steps per replica, so memory grows with D even when one
# replica stands for all; explicit replicas multiply every stage's tasks by D.
MAX_REPLICAS, MAX_EXPLICIT_REPLICAS = 8192, 64


def translate(module, platform, steps: int = 2, symmetric: bool = True, macs_per_step: float = 0.0,
              memory_limit: bool = True) -> TaskGraph:
    """The VM program of a module holding a scheduled life.pipeline (and its life.plan); with
    `memory_limit` a stage over the plan's memory budget stops the run (OutOfMemory)."""
    if steps < 1:
        raise RatcError(f"steps must be at least 1, got {steps}")
    from ratc.lifecycle.lowering import find_plan

    D = find_plan(module).attributes["D"]
    if D > MAX_REPLICAS or (not symmetric and D > MAX_EXPLICIT_REPLICAS):
        limit = MAX_REPLICAS if symmetric else MAX_EXPLICIT_REPLICAS
        raise RatcError(f"D = {D} data-parallel replicas: the VM simulates at most {limit}"
                        + ("" if symmetric else " with --explicit-replicas (each is a whole copy of every "
                           "stage's tasks; without it one replica stands for all)"))
    # many long-lived small objects: cyclic GC over them cost more than the translation
    with gc_paused():
        return _Translation(module, platform, steps, symmetric, macs_per_step, memory_limit).run()

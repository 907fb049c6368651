"""Build 1F1B training-step programs from per-unit costs in cycles.

The stage order is non-interleaved 1F1B (Megatron-LM's
forward_backward_pipelining_without_interleaving): min(P-p-1, M) warm-up forwards, then
one forward and one backward alternately, then the remaining backwards. Every unit
(embedding, decoder layer, head) of every micro-batch is a task; a unit's work is a
compute-bound part on the compute engine followed by a DDR-bound part on the DDR engine,
so a forward-side recovery (FSR) can use the compute engine while the DDR part runs.
FSR recovers layer by layer, in the order the backwards consume them, into `rec_slots`
one-layer buffers: a recovery starts once its checkpoint exists and a buffer is free.

State policies (paper Eq. 2-4): `bulk` runs every GradSync, then every UpdateShard, then
every PrefetchW after the stage's last backward; `layerwise` starts GradSync(l) when the
last micro-batch's Backward(l) ends, then updates and prefetches in bulk; `deadline` also
chains UpdateShard(l) -> PrefetchW(l) per layer, ordered by the next step's first use
(forward order), and the next step's first Forward(l) waits for that layer's view only;
under `bulk` and `layerwise` the stage's next step waits for the whole step-end phase.
`none` leaves state tasks out.
"""

from __future__ import annotations

from dataclasses import dataclass

from ratc.errors import RatcError
from ratc.lifecycle.onefoneb import stage_order
from ratc.vm.system.collectives import ring
from ratc.vm.system.program import Link, Program

ACT_POLICIES = ("full", "ckpt", "fsr")
STATE_POLICIES = ("none", "bulk", "layerwise", "deadline")
# Background work yields to the main path: FSR recovery below forward/backward, and
# deadline-ordered state tasks below everything else, earliest next use first.
FSR_PRIORITY = 3
DEADLINE_PRIORITY = 4


@dataclass(frozen=True)
class Work:
    """Cycles of compute-bound work followed by cycles of DDR-bound work."""

    compute: int
    ddr: int = 0


@dataclass(frozen=True)
class UnitSpec:
    """One layer of a stage, per micro-batch, in cycles and bytes."""

    name: str
    fwd: Work
    bwd: Work
    rec: Work | tuple | None = None  # recomputation (a Work or a sequence of them); None: saved
    grad_bytes: int = 0          # full gradient synchronized across the replicas
    update: int = 0              # UpdateShard cycles (DDR)
    param_bytes: int = 0         # parameter view PrefetchW all-gathers (0: none)
    saved_bytes: int = 0         # activations kept for backward under full-save
    ckpt_bytes: int = 0          # the checkpoint (layer input) under ckpt / FSR


@dataclass(frozen=True)
class StepSpec:
    """A training configuration with its costs, ready to be laid out as tasks."""

    P: int
    D: int
    M: int
    stages: tuple                # per stage: tuple of UnitSpec in forward order
    boundary_bytes: int          # activation (and activation gradient) per micro-batch
    p2p: Link                    # stage-boundary link
    ring_link: Link              # data-parallel ring link
    act: str = "fsr"
    state: str = "deadline"
    sync: str = "reduce_scatter"
    static: tuple = ()           # per stage: ((value, bytes), ...) live all the time
    memory_budget: int | None = None
    clock: float = 1.0
    tokens_per_step: int = 0
    macs_per_step: float = 0.0
    peak_mac_rate: float = 0.0
    rec_slots: int = 2           # FSR recovery buffers (one layer each): one filled while one is consumed
    steps: int = 2
    symmetric: bool = True


def build(spec: StepSpec) -> Program:
    """The program of `spec.steps` consecutive steps."""
    _check(spec)
    prog = Program(stages=spec.P, replicas=spec.D, symmetric=spec.symmetric, steps=spec.steps, clock=spec.clock,
                   memory_budget=spec.memory_budget, tokens_per_step=spec.tokens_per_step,
                   macs_per_step=spec.macs_per_step, peak_mac_rate=spec.peak_mac_rate)
    R = prog.simulated_replicas
    for p, values in enumerate(spec.static):
        for r in range(R):
            prog.static[(p, r)] = tuple(values)
    return _Builder(spec, prog, R).run()


def _check(spec: StepSpec) -> None:
    if spec.act not in ACT_POLICIES:
        raise RatcError(f"unknown activation policy {spec.act!r} (known: {', '.join(ACT_POLICIES)})")
    if spec.state not in STATE_POLICIES:
        raise RatcError(f"unknown state policy {spec.state!r} (known: {', '.join(STATE_POLICIES)})")
    if len(spec.stages) != spec.P or any(not units for units in spec.stages):
        raise RatcError(f"a {spec.P}-stage step needs {spec.P} non-empty unit lists, got {len(spec.stages)}")
    if spec.M < 1 or spec.D < 1 or spec.steps < 1 or spec.rec_slots < 1:
        raise RatcError(f"need M, D, steps and rec_slots >= 1 (got M={spec.M}, D={spec.D}, steps={spec.steps}, "
                        f"rec_slots={spec.rec_slots})")


class _Builder:
    """Lays out tasks; each logical task has one copy per simulated replica."""

    def __init__(self, spec: StepSpec, prog: Program, R: int):
        self.spec, self.prog, self.R = spec, prog, R

    def add(self, name, kind, p, resources, duration, deps=(), priority=None, allocs=(), frees=(),
            layer=-1, mb=-1, step=0):
        """One logical task: per replica r its index; deps and resources are per replica."""
        ids = []
        for r in range(self.R):
            res = tuple((s, r, x) for s, x in resources)
            ids.append(self.prog.add(name, kind, p, res, duration, deps=deps(r) if callable(deps) else deps,
                                     replica=r, priority=priority, allocs=allocs, frees=frees, layer=layer,
                                     micro_batch=mb, step=step, template=ids[0] if ids else -1))
        return ids

    def work(self, name, kind, p, w, priority=None, allocs=(), frees=(), layer=-1, mb=-1, step=0):
        """A Work (or a sequence of them) as chained tasks, one per run on one engine: (first ids, last ids)."""
        parts = []
        for piece in (w if isinstance(w, tuple) else (w,)):
            for res, cyc in (("compute", piece.compute), ("ddr", piece.ddr)):
                if cyc > 0 and parts and parts[-1][0] == res:
                    parts[-1] = (res, parts[-1][1] + cyc)
                elif cyc > 0:
                    parts.append((res, cyc))
        parts = parts or [("compute", 0)]
        first = last = None
        for n, (res, cyc) in enumerate(parts):
            ids = self.add(name, kind, p, [(p, res)], cyc, priority=priority,
                           allocs=allocs if n == 0 else (), frees=frees if n == len(parts) - 1 else (),
                           layer=layer, mb=mb, step=step)
            if last is not None:
                self.dep(ids, last)
            first = first or ids
            last = ids
        return first, last

    def dep(self, ids, on):
        """Make each replica copy of `ids` wait for the same replica's copy of `on`."""
        for r in range(self.R):
            t = self.prog.tasks[ids[r]]
            t.deps = t.deps + (on[r],)

    def run(self) -> Program:
        spec = self.spec
        first, last = {}, {}       # (step, 'F'|'B'|'R', p, m, j) -> per replica ids
        prev_main = [None] * spec.P
        fsr_order = [[] for _ in range(spec.P)]   # per stage: the Backwards consuming each recovery, in order
        for k in range(spec.steps):
            for p, units in enumerate(spec.stages):
                U = len(units)
                for op, m in stage_order(spec.P, spec.M, p):
                    js = range(U) if op == "F" else range(U - 1, -1, -1)
                    for j in js:
                        u = units[j]
                        key = (k, op, p, m, j)
                        tag = f"step{k}.m{m}.u{j}"
                        if op == "F":
                            recovered = spec.act != "full" and u.rec is not None
                            alloc = ((f"{tag}.ckpt", u.ckpt_bytes),) if recovered else ((f"{tag}.act", u.saved_bytes),)
                            first[key], last[key] = self.work(f"{p}F{m}", "forward", p, u.fwd, allocs=alloc,
                                                              layer=j, mb=m, step=k)
                        else:
                            if spec.act != "full" and u.rec is not None:
                                rkey = (k, "R", p, m, j)
                                prio = 1 if spec.act == "ckpt" else FSR_PRIORITY
                                first[rkey], last[rkey] = self.work(f"{p}R{m}", "recover", p, u.rec, priority=prio,
                                                                    allocs=((f"{tag}.act", u.saved_bytes),),
                                                                    layer=j, mb=m, step=k)
                                if spec.act == "ckpt":
                                    self._chain(p, first[rkey], last[rkey], prev_main)
                                else:
                                    self.dep(first[rkey], last[(k, "F", p, m, j)])
                                    recs = fsr_order[p]
                                    if len(recs) >= spec.rec_slots:
                                        self.dep(first[rkey], last[recs[-spec.rec_slots]])
                                    recs.append((k, "B", p, m, j))
                                frees = (f"{tag}.act", f"{tag}.ckpt")
                            else:
                                frees = (f"{tag}.act",)
                            first[key], last[key] = self.work(f"{p}B{m}", "backward", p, u.bwd, frees=frees,
                                                              layer=j, mb=m, step=k)
                            if (k, "R", p, m, j) in last:
                                self.dep(first[key], last[(k, "R", p, m, j)])
                        self._chain(p, first[key], last[key], prev_main)
        for k in range(spec.steps):
            self._sends(k, first, last)
            self._state(k, first, last)
        return self.prog

    def _chain(self, p, first_ids, last_ids, prev_main):
        """Keep the stage's main path in its scheduled order."""
        if prev_main[p] is not None:
            self.dep(first_ids, prev_main[p])
        prev_main[p] = last_ids

    def _sends(self, k, first, last):
        """Activations forward and activation gradients backward across stage boundaries."""
        spec = self.spec
        nb = spec.boundary_bytes
        cyc = spec.p2p.cycles(nb)
        for p in range(spec.P - 1):
            U = len(spec.stages[p])
            for m in range(spec.M):
                # the receiving stage holds each incoming buffer until its consumer ends
                for op, src, dst, producer, consumer in (("F", p, p + 1, (k, "F", p, m, U - 1), (k, "F", p + 1, m, 0)),
                                                         ("B", p + 1, p, (k, "B", p + 1, m, 0), (k, "B", p, m, U - 1))):
                    buf = f"step{k}.m{m}.recv_{op}"
                    ids = self.add(f"{src}SEND_{op}{m}", "send", src, [(src, "tx"), (dst, "rx")], cyc, mb=m, step=k,
                                   allocs=((buf, nb, dst),))
                    self.dep(ids, last[producer])
                    self.dep(first[consumer], ids)
                    for r in range(self.R):
                        t = self.prog.tasks[last[consumer][r]]
                        t.frees = t.frees + (buf,)

    def _state(self, k, first, last):
        """GradSync -> UpdateShard -> PrefetchW per unit, and the next step's wait for its view."""
        spec = self.spec
        if spec.state == "none":
            return
        M = spec.M
        for p, units in enumerate(spec.stages):
            U = len(units)
            stage_done = last[(k, "B", p, M - 1, 0)]
            synced, updated, viewed = {}, {}, {}
            for j in range(U - 1, -1, -1):
                after = stage_done if spec.state == "bulk" else last[(k, "B", p, M - 1, j)]
                prio = DEADLINE_PRIORITY + j if spec.state == "deadline" else None
                synced[j] = ring(self.prog, spec.sync, p, units[j].grad_bytes, spec.ring_link,
                                 [(after[r],) for r in range(self.R)], f"{p}SYNC{j}", "grad_sync",
                                 layer=j, step=k, priority=prio)
            all_synced = [sum((synced[j][r] for j in range(U)), ()) for r in range(self.R)]
            for j in range(U):
                prio = DEADLINE_PRIORITY + j if spec.state == "deadline" else None
                deps = synced[j] if spec.state == "deadline" else all_synced
                updated[j] = self.add(f"{p}UPDATE{j}", "update", p, [(p, "ddr")], units[j].update,
                                      deps=lambda r, d=deps: d[r], priority=prio, layer=j, step=k)
            all_updated = [tuple(updated[j][r] for j in range(U)) for r in range(self.R)]
            for j in range(U):
                prio = DEADLINE_PRIORITY + j if spec.state == "deadline" else None
                deps = [(updated[j][r],) for r in range(self.R)] if spec.state == "deadline" else all_updated
                if units[j].param_bytes and spec.sync == "reduce_scatter":
                    viewed[j] = ring(self.prog, "all_gather", p, units[j].param_bytes, spec.ring_link, deps,
                                     f"{p}PREFETCH{j}", "prefetch", layer=j, step=k, priority=prio)
                else:
                    viewed[j] = [(updated[j][r],) for r in range(self.R)]
            if k + 1 < spec.steps:
                # deadline hands each unit's view to its next Forward; bulk and layerwise end
                # the step with one update-prefetch phase that the stage's next step waits for
                waits = {j: (j,) for j in range(U)} if spec.state == "deadline" else {0: tuple(range(U))}
                for j, views in waits.items():
                    nxt = first[(k + 1, "F", p, 0, j)]
                    for r in range(self.R):
                        t = self.prog.tasks[nxt[r]]
                        t.deps = t.deps + tuple(x for v in views for x in viewed[v][r])

"""Where the lifecycle tasks go in a 1F1B stage program (paper Eq. 2-4 and 7).

- state pipeline (Eq. 2): GradSync(l) right after Backward(l, M-1), the end of layer l's
  gradient accumulation, so it overlaps the backward of layers l-1, l-2, ...; or, bulk,
  after the whole backward -- except under ZeRO >= 2, where GradSync is the reduce-scatter
  of the last micro-batch's bucket, which ZeRO-2 (DeepSpeed) issues as backward produces it
  whatever the optimizer step does; bulk then defers only UpdateShard and PrefetchW.
- update-prefetch (Eq. 3, 4): UpdateShard(l) -> PrefetchW(l) inside [t_sync(l), t_use(l)),
  ordered earliest-deadline-first on the DDR and the link (deadline), in release order
  right after each GradSync (eager), or all at the step end (bulk).
- FSR (Eq. 7): each Recover(l, m) co-runs with the compute task issued before it, sharing
  the cluster's compute and DDR engines (ratc.planner.corun); a Backward's first Recover
  moves ahead of the wait for its gradient, next to the Forward before it.
"""

from __future__ import annotations

from ratc.errors import RatcError
from ratc.ir.attributes import ByteSize
from ratc.lifecycle.checks import HOST_OPS, REC, plan_of
from ratc.lifecycle.schedule import GRAD_OPS, main_task
from ratc.lifecycle.timeline import estimate
from ratc.planner.corun import extra, scaled, solo
from ratc.step.rules import gather_ahead, reduces_per_micro_batch
from ratc.step.schedules import recover_hosts
from ratc.step.unit_costs import recover_work


def _by(ops, name: str) -> dict:
    return {op.attributes["unit"]: op for op in ops if op.name == name}


def _reinsert(ops: list, moving: list, after) -> None:
    """Remove `moving` ops and put each right after the op `after(op)` returns (in order)."""
    moving_set = set(moving)
    ops[:] = [op for op in ops if op not in moving_set]
    for op in moving:
        anchor = after(op)
        ops.insert(ops.index(anchor) + 1, op)


def state_pipeline(pipe, mode: str) -> None:
    """Place each GradSync at its layer's accumulation end (layerwise) or after the backward (bulk)."""
    # Bulk under ZeRO >= 2 keeps each bucket's reduce-scatter at its Backward, as every
    # earlier micro-batch's: deferring it would hold every layer's full bucket to the step end.
    plan = plan_of(pipe).attributes
    layerwise = mode == "layerwise" or reduces_per_micro_batch(plan["Z"])
    for stage in pipe.region.ops:
        ops = stage.region.ops
        syncs = [op for op in ops if op.name == "life.grad_sync"]
        if layerwise:
            last_bwd = {op.attributes["unit"]: op for op in ops
                        if op.name in GRAD_OPS and op.attributes["mb"] == plan["A"] - 1}
            _reinsert(ops, syncs, lambda op: last_bwd[op.attributes["unit"]])
        else:
            main_end = max(i for i, op in enumerate(ops) if main_task(op) is not None)
            anchor = ops[main_end]
            _reinsert(ops, syncs[::-1], lambda op: anchor)
    pipe.attributes["state"] = mode


def _serve(tasks: list[dict], edf: bool) -> None:
    """One non-preemptive server: each task gets 'start'; picks by deadline (EDF) or release."""
    t = 0.0
    pending = sorted(tasks, key=lambda x: (x["release"], x["unit"]))
    while pending:
        avail = [x for x in pending if x["release"] <= t]
        if not avail:
            t = pending[0]["release"]
            continue
        pick = min(avail, key=(lambda x: (x["deadline"], x["unit"])) if edf else (lambda x: (x["release"], x["unit"])))
        pick["start"] = t
        t += pick["dur"]
        pending.remove(pick)


def update_prefetch(pipe, mode: str) -> None:
    """Order and place UpdateShard/PrefetchW; annotate release, deadline, planned start, exposure."""
    tl = estimate(pipe)
    for stage in pipe.region.ops:
        ops = stage.region.ops
        syncs, updates, prefetches = (_by(ops, n) for n in ("life.grad_sync", "life.update", "life.prefetch"))
        # a tied unit's gradient is complete when its TieSum (after the GradSync) is
        syncs.update(_by(ops, "life.tie_sum"))
        if not updates:
            continue        # every unit of the stage frozen: no state chain
        first_fwd = {op.attributes["unit"]: op for op in ops if op.name == "life.fwd" and op.attributes["mb"] == 0}
        # The next step repeats this one: its Forward(l, 0) starts one makespan later.
        use = {i: tl.makespan + tl.start[first_fwd[i]] for i in updates}
        bulk_release = max(tl.end[op] for op in syncs.values())
        upd = [{"unit": i, "release": bulk_release if mode == "bulk" else tl.end[syncs[i]],
                "deadline": use[i] - (prefetches[i].attributes["dur"] if i in prefetches else 0.0),
                "dur": op.attributes["dur"]} for i, op in updates.items()]
        _serve(upd, edf=mode == "deadline")
        upd_end = {x["unit"]: x["start"] + x["dur"] for x in upd}
        pre = [{"unit": i, "release": (max(upd_end.values()) if mode == "bulk" else upd_end[i]),
                "deadline": use[i], "dur": op.attributes["dur"]} for i, op in prefetches.items()]
        _serve(pre, edf=mode == "deadline")
        for tasks, table in ((upd, updates), (pre, prefetches)):
            for x in tasks:
                a = table[x["unit"]].attributes
                a["release"], a["deadline"], a["start"] = x["release"], x["deadline"], x["start"]
                a["exposed"] = max(0.0, x["start"] + x["dur"] - x["deadline"])
        for x in pre:   # Eq. 4: the prefetch's exposure is what it adds beyond its update's
            a = prefetches[x["unit"]].attributes
            a["exposed"] = max(0.0, a["exposed"] - updates[x["unit"]].attributes["exposed"])
        seq_u = [updates[x["unit"]] for x in sorted(upd, key=lambda x: (x["start"], x["unit"]))]
        seq_p = [prefetches[x["unit"]] for x in sorted(pre, key=lambda x: (x["start"], x["unit"]))]
        if mode == "bulk":
            last_sync = max(syncs.values(), key=ops.index)
            chain = seq_u + seq_p
            _reinsert(ops, chain, lambda op: chain[chain.index(op) - 1] if chain.index(op) else last_sync)
        else:
            prev = {op: seq[k - 1] for seq in (seq_u, seq_p) for k, op in enumerate(seq) if k}
            own = {op: (syncs if op.name == "life.update" else updates)[op.attributes["unit"]]
                   for op in seq_u + seq_p}
            _reinsert(ops, seq_u + seq_p,
                      lambda op: max((own[op], prev[op]) if op in prev else (own[op],), key=ops.index))
    pipe.attributes["update"] = mode


def fsr(pipe, plan, rec_buffers: int, clock: float | None = None, stream: bool = True) -> None:
    """Co-schedule each Recover with the compute task issued before it (Eq. 7).

    A Backward's first Recover moves from behind the wait for its gradient to right after
    the stage's previous compute task: the last unit's Forward of the micro-batch issued
    before it in the 1F1B steady state (panel b of the paper's Fig. 6), the previous
    Backward's first unit in the cool-down. Each later Recover(l-1, m) follows
    Backward(l, m). Every Recover then co-runs with that task, its host, both sharing the
    cluster's compute and DDR engines (ratc.planner.corun): the host's `dur` (and `cycles`,
    after codegen) become the pair's and `corun` says by how much it grew; the Recover
    gets placement = "corun", `window` (its host's time alone) and `exposed` (what the
    pair adds). A host that itself reads a recovery buffer needs a second one: with
    rec-buffers = 1 such Recovers stay where they are, backward-time (placement = "bwd").
    With `stream` such a Recover fills what its host frees as it goes instead: it gets
    `stream`, the headroom over one buffer its host's unit needs (ratc.planner.corun).
    Under ZeRO-3 a co-running Recover's view is gathered one compute task earlier, so that
    it is there when its host starts.
    """
    units = plan.region.ops
    for u in units:
        if "fwd_phases" not in u.attributes or "bwd_phases" not in u.attributes:
            raise RatcError(f"fsr: life.unit #{u.attributes['index']} has no phases (fwd_phases, bwd_phases) to co-schedule "
                            "its recovery with; re-plan it with this version of ratc")
    added: dict = {}      # (host name, host unit, guest unit, host's own s, guest's s) -> added s
    # interleaved (v > 1), each chunk's Backward of a micro-batch is a Backward of its own
    chunk_of = {u.attributes["index"]: u.attributes["chunk"] for u in units} if plan.attributes.get("v", 1) > 1 \
        else None
    zb = plan.attributes.get("sched", "1f1b") != "1f1b"
    for stage in pipe.region.ops:
        ops = stage.region.ops
        slots = _w_slots(ops, chunk_of) if zb and plan.attributes.get("corun", "prev") == "w" else {}
        _move_first_recovers(ops, rec_buffers, chunk_of, zb, slots)
        host = None
        last = None               # the last compute task so far (hosts never move here)
        before: dict = {}         # id(host) -> the compute task issued before it
        early: dict = {}          # id(compute task) -> ZeRO-3 views to gather just before it
        for op in list(ops):
            if op.name == "life.recv":
                host = None          # a wait point: what follows starts after the message
            elif op.name == "life.recover":
                if host is not None and (rec_buffers >= 2 or not _reads_recovery(host)):
                    view = _corun(host, op, units, clock, added)
                    # (an attention core's Recover makes its probabilities at once: a buffer of its own)
                    whole = units[op.attributes["unit"]].attributes.get("keep") != "selective"
                    if stream and whole and _reads_recovery(host):
                        need = units[host.attributes["unit"]].attributes.get("stream", 0)
                        op.attributes["stream"] = ByteSize(int(need))
                    if view is not None:
                        # gathered ahead of its host, so that it is there when the host starts
                        # (the stage's first task has none before it)
                        target = host
                        for _ in range(gather_ahead(True) - 1):
                            target = before[id(target)] or target
                        early.setdefault(id(target), []).append(view)
                else:
                    op.attributes.update(placement="bwd", window=0.0, exposed=op.attributes["dur"])
                host = None
            elif _hosts(op):
                before[id(op)] = last
                host = last = op
        if early:
            moved = {id(v) for views in early.values() for v in views}
            ops[:] = [x for op in ops if id(op) not in moved for x in (*early.get(id(op), ()), op)]
    pipe.attributes["fsr"] = True


def _move_first_recovers(ops: list, rec_buffers: int, chunk_of: dict | None = None, zb: bool = False,
                         slots: dict | None = None) -> None:
    """Each Backward's first Recover (if it comes before that Backward's first unit) moves
    right behind the last compute task issued before the Backward's first op; interleaved
    (`chunk_of`, {unit: chunk}), each chunk's Backward of a micro-batch is one; zero bubble
    (`zb`), its I, behind whichever task the rank runs before it (a Forward, I or W), or
    behind the W `slots` names for it (_w_slots).

    One pass: moving a Recover (never a host) changes neither which hosts precede a later
    Backward nor their order, so every target is found in the original order. Recovers
    moved behind one host keep the order repeated inserts right after it would give them
    (the latest first).
    """
    groups: dict = {}        # Backward -> [index of its first op, its first Recover, first bwd seen]
    last_host = None
    host_before: list = []   # per op index: the last host strictly before it
    for op in ops:
        host_before.append(last_host)
        if _hosts(op):
            last_host = op
    for i, op in enumerate(ops):
        task = main_task(op, chunk_of, zb)
        if task is None or task[0] != ("I" if zb else "B"):
            continue
        g = groups.setdefault(task, [i, None, False])
        if op.name == "life.recover" and g[1] is None and not g[2]:
            g[1] = op
        elif op.name in ("life.bwd", "life.bwd_i"):
            g[2] = True
    behind: dict = {}        # id(host) -> Recovers moved behind it, in the order they were chosen
    moved = set()
    for task, (head, first, _) in groups.items():
        host = (slots or {}).get(task, host_before[head])
        if first is None or host is None:
            continue
        if rec_buffers >= 2 or not _reads_recovery(host):
            behind.setdefault(id(host), []).append(first)
            moved.add(id(first))
    if not moved:
        return
    order = []
    for op in ops:
        if id(op) in moved:
            continue
        order.append(op)
        order.extend(reversed(behind.get(id(op), ())))
    ops[:] = order


def _w_slots(ops: list, chunk_of: dict) -> dict:
    """{zero-bubble I task: the W op whose slot hosts its first Recover} by the plan's corun
    'w' (ratc.step.schedules.recover_hosts), over the rank's tasks in the order their compute
    ops run."""
    tasks, last = [], {}
    for op in ops:
        if _hosts(op):
            task = main_task(op, chunk_of, True)
            if task not in last:
                tasks.append(task)
            last[task] = op
    order = [(chunk, kind, m) for kind, m, chunk in tasks]
    return {tasks[i]: last[tasks[j]] for i, j in recover_hosts(order, "w").items() if tasks[j][0] == "W"}


def _hosts(op) -> bool:
    """Whether a co-running Recover may ride on this op: a Forward or a Backward (an I or W)."""
    return op.name in HOST_OPS


def _reads_recovery(op) -> bool:
    """Whether the op reads a recovery buffer (a recovered layer's Backward)."""
    return any(str(v.type) == REC for v in op.operands)


def _phases(flat) -> tuple:
    """((compute s, DDR s), ...) from a unit's flat `fwd_phases` / `bwd_phases` attribute."""
    return tuple(zip(flat[0::2], flat[1::2]))


def _corun(host, guest, units, clock, memo: dict):
    """Make `guest` co-run with `host` (the pair's duration, the attributes); returns the
    guest's ZeRO-3 view gather, which the caller moves one compute task earlier, or None.

    The plan's phases (per unit, from the planner's execution profile) give the shape of
    each task's engine use; they are scaled to the task's own time (codegen may have
    charged other tiles). A task's time beyond its phases is its TP all-reduces, which run
    on the link: the guest's after its host's.
    """
    h, g = host.attributes, guest.attributes
    own = h["dur"] - h.get("corun", 0.0)
    # (what a pair adds depends on these alone, and a stage repeats a few pairs per micro-batch;
    # zero times are not kept: 0.0 and -0.0 are one key)
    key = (host.name, h["unit"], g["unit"], own, g["dur"]) if own and g["dur"] else None
    added = memo.get(key) if key is not None else None
    if added is None:
        added = _added(host.name, units[h["unit"]].attributes, units[g["unit"]].attributes, own, g["dur"])
        if key is not None:
            memo[key] = added
    _set_corun(host, added, clock)
    g.update(placement="corun", window=own, exposed=added)
    view = guest.operands[-1].owner if guest.operands else None
    return view if view is not None and view.name == "life.gather" else None


def _added(host: str, hu: dict, gu: dict, own: float, dur: float) -> float:
    """Seconds a Recover of `dur` (unit attributes `gu`) adds to a `host` task of `own`
    seconds alone (unit attributes `hu`)."""
    host_ph = _phases(hu["fwd_phases" if host == "life.fwd" else "bwd_phases"])
    work = recover_work(gu)
    guest_ph = _phases(gu[work["phases"]])
    # (a zero-bubble I or W runs its share of the Backward's phases, scaled to its own time;
    # the TP all-reduces are all the I's)
    tp_h = 0.0 if host == "life.bwd_w" else max(0.0, hu["fwd" if host == "life.fwd" else "bwd"] - solo(host_ph))
    tp_g = max(0.0, gu[work["dur"]] - solo(guest_ph))
    return extra(_to(host_ph, own - tp_h), _to(guest_ph, dur - tp_g)) + tp_g


def _to(ph, seconds: float) -> tuple:
    """Phases scaled to last `seconds` alone."""
    total = solo(ph)
    return scaled(ph, seconds / total) if total > 0 else ph


def _set_corun(op, added: float, clock: float | None) -> None:
    """Charge a host task what its co-running Recover adds (`corun`, in `dur` and `cycles`)."""
    a = op.attributes
    old = a.get("corun", 0.0)
    a["corun"] = added
    if "cycles" in a:
        if not clock:
            raise RatcError("fsr: the program has cycle counts (codegen ran) but no platform clock")
        a["cycles"] = a["cycles"] - int(round(old * clock)) + int(round(added * clock))
        a["dur"] = a["cycles"] / clock
    else:
        a["dur"] = a["dur"] - old + added

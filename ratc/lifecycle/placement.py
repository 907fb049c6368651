"""Where the lifecycle tasks go in a 1F1B stage program (paper Eq. 2-4 and 7).

- state pipeline (Eq. 2): GradSync(l) right after Backward(l, M-1), the end of layer l's
  gradient accumulation, so it overlaps the backward of layers l-1, l-2, ...; or, bulk,
  after the whole backward -- except under ZeRO >= 2, where GradSync is the reduce-scatter
  of the last micro-batch's bucket, which ZeRO-2 (DeepSpeed) issues as backward produces it
  whatever the optimizer step does; bulk then defers only UpdateShard and PrefetchW.
- update-prefetch (Eq. 3, 4): UpdateShard(l) -> PrefetchW(l) inside [t_sync(l), t_use(l)),
  ordered earliest-deadline-first on the DDR and the link (deadline), in release order
  right after each GradSync (eager), or all at the step end (bulk).
- FSR (Eq. 7): Recover(l, m) moved from right before Backward(l, m) into the forward-side
  or idle slot before the stage's backward of micro-batch m, as many layers as there are
  recovery buffers; the rest, and any recovery without a window, stay backward-time.
"""

from __future__ import annotations

from ratc.lifecycle.schedule import main_task
from ratc.lifecycle.timeline import estimate


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
    layerwise = mode == "layerwise" or pipe.attributes["Z"] >= 2
    for stage in pipe.region.ops:
        ops = stage.region.ops
        syncs = [op for op in ops if op.name == "life.grad_sync"]
        if layerwise:
            last_bwd = {op.attributes["unit"]: op for op in ops
                        if op.name == "life.bwd" and op.attributes["mb"] == pipe.attributes["M"] - 1}
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


def fsr(pipe, rec_buffers: int) -> None:
    """Move recoveries into the idle or forward-side slot before each backward (Eq. 7)."""
    recovers = [op for s in pipe.region.ops for op in s.region.ops if op.name == "life.recover"]
    tl = estimate(pipe, skip=frozenset(recovers))
    for stage in pipe.region.ops:
        ops = stage.region.ops
        groups: dict = {}
        for op in ops:
            task = main_task(op)
            if task is not None and task[0] == "B":
                groups.setdefault(task[1], []).append(op)
        for m, group in groups.items():
            recs = [op for op in group if op.name == "life.recover"]
            for op in recs:
                op.attributes.update(placement="bwd", window=0.0, exposed=op.attributes["dur"])
            if not recs:
                continue
            head = ops.index(group[0])
            prev_compute = [op for op in ops[:head] if op.attributes.get("res") == "compute"]
            free_at = tl.end[prev_compute[-1]] if prev_compute else 0.0
            first_bwd = next(op for op in group if op.name == "life.bwd")
            window = tl.start[first_bwd] - free_at
            if window <= 0.0:
                continue    # no idle slot: recovery stays on the backward path (fallback)
            before = main_task(prev_compute[-1]) if prev_compute else None
            placement = "fwd-side" if before is not None and before[0] == "F" else "idle"
            early = recs[:rec_buffers]
            moving = []
            used = 0.0
            for op in early:
                gathers = [g for g in group if g.name == "life.gather" and g.attributes["phase"] == "rec"
                           and g.attributes["unit"] == op.attributes["unit"]]
                moving += gathers + [op]
                w = max(0.0, window - used)
                op.attributes.update(placement=placement, window=w, exposed=max(0.0, op.attributes["dur"] - w))
                used += op.attributes["dur"]
            anchor = ops[head - 1]
            moved = set(moving)
            ops[:] = [op for op in ops if op not in moved]
            at = ops.index(anchor) + 1
            ops[at:at] = moving
    pipe.attributes["fsr"] = True

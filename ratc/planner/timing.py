"""Step time by exposed latency (paper Eq. 11, 12) over the non-interleaved 1F1B schedule.

All arrays are [C, P] (candidates x stages) or [C, P, U] (x units of a stage, forward
order); the pieces (per-stage task times, collectives, windows) stay available so the
system VM can check them task by task.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ratc.planner.collectives import all_gather, all_reduce, link_for, reduce_scatter
from ratc.planner.config import ACT_POLICIES, PREF_POLICIES, RECIPE, CandidateBatch
from ratc.planner.opcost import TP_ALLREDUCES_PER_LAYER
from ratc.planner.stages import StageCosts

FULL, CKPT, FSR = (ACT_POLICIES.index(a) for a in ("full", "ckpt", "fsr"))
BULK, LAYERWISE, DEADLINE = (PREF_POLICIES.index(p) for p in ("bulk", "layerwise", "deadline"))


@dataclass(frozen=True)
class StepTime:
    """The timing model's pieces for a batch of candidates."""

    fwd: np.ndarray          # [C, P] Forward task of one micro-batch on stage p (incl. TP / ZeRO-3 / send)
    bwd: np.ndarray          # [C, P] Backward task, without recovery
    rec: np.ndarray          # [C, P] Recover task (re-run forward of the stage's decoder layers)
    rec_exposed: np.ndarray  # [C, P] what Recover adds to the stage's steady 1F1B slot (Eq. 7)
    rec_hidden: np.ndarray   # [C, P] FSR recovery hidden in the stage's wait before its last Backward
    rec_hidden_warm: np.ndarray  # [C, P] ... before its first Backward (see makespan)
    tp_allreduce: np.ndarray     # [C, 1] one Megatron all-reduce of the hidden stream
    p2p: np.ndarray              # [C, 1] one stage-boundary transfer
    link_busy: np.ndarray        # [C, P] link seconds per micro-batch (without recovery)
    sync: np.ndarray             # [C, P] GradSync of the stage (last micro-batch)
    update: np.ndarray           # [C, P] UpdateShard of the stage
    prefetch: np.ndarray         # [C, P] PrefetchW (parameter all-gather) of the stage
    window: np.ndarray           # [C, P] drain + next-warm-up slack after the stage's last backward
    t_1f1b: np.ndarray           # [C]
    e_comm: np.ndarray           # [C]
    e_upd: np.ndarray            # [C]
    e_pref: np.ndarray           # [C]
    e_rec: np.ndarray            # [C]

    @property
    def t_step(self) -> np.ndarray:
        """Eq. 12."""
        return self.t_1f1b + self.e_comm + self.e_upd + self.e_pref + self.e_rec


def one_f_one_b(fwd: np.ndarray, bwd: np.ndarray, M, send=None) -> np.ndarray:
    """Non-interleaved 1F1B makespan (see makespan).

    fwd and bwd include the stage's boundary sends (`send` [C, 1] seconds each, default 0);
    a send runs on the link, not in the compute stream (see steady_slot).
    """
    send = np.zeros((fwd.shape[0], 1)) if send is None else send
    return makespan(fwd + bwd, fwd + bwd - _sends(fwd.shape[1], send), send, M, fwd=fwd)


def makespan(trip: np.ndarray, work: np.ndarray, send: np.ndarray, M, warm=None, hide=None, fwd=None,
             cool=None) -> np.ndarray:
    """[C] makespan of Megatron's non-interleaved 1F1B order: its longest path.

    trip [C, P]: a micro-batch's Forward plus Backward on stage p, boundary sends included
    (FSR: less the recovery the last micro-batch's wait hides, `cool`); work [C, P]: the
    stage's compute-stream slot; fwd [C, P]: the Forward part of trip (send included).

    Stage p runs min(P-p, M) Forwards, then pairs (Backward i, Forward), then the remaining
    Backwards. The longest path circulates on one stage k: it enters k at its first Forward
    (the first micro-batch's Forwards before k) or at its first Backward (the first
    micro-batch's whole trip to the last stage and back to k), spends the pairs there at
    the steady period S_k (slot_periods: k's own slot, or a cycle through stages before it
    when sends make that longer), and leaves at its last Backward (the last micro-batch's
    Backwards of the stages before k) or at its last Forward (that micro-batch's whole
    trip down and back). The maximum over k and the four ways is the makespan: exact for
    uniform stages; for unequal ones it keeps that a bottleneck stage k runs its P-1-k
    warm-up Forwards off the path (one early in the pipeline costs less than one late).
    Paths that change stage in the drain are not among these, so it can undershoot a
    little (tests/test_timing.py).

    `warm` [C, P]: what stage p hides in its wait before its first Backward (FSR): the first
    micro-batch's trip back to k is shorter by the warm of stages k..P-1. `hide` [C, P]:
    see steady_slot.
    """
    C, P = work.shape
    zero = np.zeros((C, P))
    fwd = trip / 2 if fwd is None else fwd
    warm = zero if warm is None else warm
    cool = zero if cool is None else cool
    send = np.broadcast_to(send, (C, 1))
    stage = np.arange(P)[None, :]
    fc = fwd - send * (stage < P - 1)                    # the Forward's compute-stream part
    bc = work - fc
    S = slot_periods(work, send, hide)
    M = np.broadcast_to(M, (C, 1))
    col = np.zeros((C, 1))
    cf = np.concatenate([col, np.cumsum(fwd, axis=1)], axis=1)           # cf[:, k] = sum_{q<k} fwd
    back = trip - fwd
    cb = np.concatenate([col, np.cumsum(back, axis=1)], axis=1)
    # the first micro-batch's trip back hides `warm` (not `cool`) at each stage
    first = np.concatenate([col, np.cumsum(back + cool - warm, axis=1)], axis=1)
    enter_f = cf[:, :-1]
    enter_b = cf[:, -1:] + first[:, -1:] - first[:, 1:]
    leave_b = np.where(stage > 0, send, 0.0) + cb[:, :-1]
    leave_f = np.where(stage < P - 1, send, 0.0) + cf[:, -1:] - cf[:, 1:] + cb[:, -1:]
    n_f = np.minimum(P - stage, M)                       # Forwards before the first Backward
    pairs = M - n_f
    own_f, own_b, steady = n_f * fc, (M - pairs) * bc, pairs * S
    ways = np.stack([enter_f + own_f + steady + own_b + leave_b,
                     enter_f + own_f + steady + leave_f,
                     enter_b - warm + steady + own_b + leave_b,
                     np.where(pairs >= 1, enter_b - warm + steady + leave_f, -np.inf)])
    return ways.max(axis=(0, 2))


def _sends(P: int, send: np.ndarray) -> np.ndarray:
    """[C, P] boundary sends per slot: activation out (p < P-1), gradient out (p > 0)."""
    stage = np.arange(P)[None, :]
    return send * ((stage < P - 1).astype(float) + (stage > 0))


def steady_slot(work: np.ndarray, send: np.ndarray, hide=None) -> np.ndarray:
    """[C] the period of 1F1B's steady state from each stage's compute-stream work per slot.

    A stage's compute stream runs one Forward and one Backward per slot; its sends overlap
    it, but they lie on the dependency cycles between stages: stage p's Backward(m) waits
    for stage p+1's, which followed p+1's Forward of a micro-batch p sent one slot earlier.
    A cycle through stages p..p+k-1 spans k slots and holds their work plus 2(k-1) sends,
    so the period is the largest of (sum of k consecutive stages' work + 2(k-1) s) / k
    (k = 1: the slowest stage). With no sends this is the slowest stage's slot.

    `hide` [C, P]: work a stage runs ahead of its wait for a Backward's gradient (FSR's first
    Recover, placed before that receive). On such a cycle the gradient's path to the
    stage's Backward does not pass through it, so the cycle through stages p..p+k-1 leaves
    out what its k-1 receiving stages p..p+k-2 hide; the stage's own slot keeps it.
    """
    return _cycle_means(work, send, hide).max(axis=1)


def slot_periods(work: np.ndarray, send: np.ndarray, hide=None) -> np.ndarray:
    """[C, P] the steady period a path circulating on stage k sees: the largest cycle mean
    over the runs of consecutive stages that end at k (k alone included)."""
    return np.maximum.reduceat(_cycle_means(work, send, hide), _windows(work.shape[1])[3], axis=1)


def _cycle_means(work, send, hide):
    """[C, windows] (work + 2(k-1) sends - hidden) / k of every run of k consecutive stages."""
    hi, lo, k, _ = _windows(work.shape[1])
    zero = np.zeros((work.shape[0], 1))
    cum = np.concatenate([zero, np.cumsum(work, axis=1)], axis=1)
    top = cum
    if hide is not None:
        # the run p..q-1 leaves out the hide of p..q-2: folded into the two gathered ends
        cum_h = np.concatenate([zero, np.cumsum(hide, axis=1)], axis=1)
        top = cum - np.concatenate([zero, cum_h[:, :-1]], axis=1)
        cum = cum - cum_h
    cycles = top[:, hi]
    cycles -= cum[:, lo]
    cycles += send * (2 * (k - 1))
    cycles *= 1.0 / k
    return cycles


@lru_cache(maxsize=None)
def _windows(P: int):
    """Every run of k consecutive stages as (end, start, k) index arrays, grouped by its last
    stage, and where each last stage's group starts."""
    pairs = [(q + 1, q + 1 - k, k) for q in range(P) for k in range(1, q + 2)]
    hi, lo, k = (np.array(x) for x in zip(*pairs))
    return hi, lo, k.astype(float), np.searchsorted(hi - 1, np.arange(P))


def step_time(sc: StageCosts, c: CandidateBatch, platform, seq_len: int, hidden: int, elem: int,
              recipe=RECIPE) -> StepTime:
    """Eq. 12 for every candidate of the batch."""
    P = sc.P
    D, T, Z, b, M = c.D, c.T, c.Z, c.b, c.M
    ddr = platform.cluster.ddr_bandwidth
    # Rank layout: TP innermost, then DP, then PP (Megatron's order).
    tp_link = link_for(platform, T)
    dp_link = link_for(platform, D * T)
    pp_link = link_for(platform, D * T + 1)
    act_bytes = b * seq_len * hidden * elem          # one micro-batch's hidden stream, [C, 1]
    tp_ar = all_reduce(T, act_bytes, tp_link)
    p2p = pp_link.send(act_bytes) if P > 1 else np.zeros_like(act_bytes)
    stage = np.arange(P)[None, :]
    n_dec = sc.n_dec
    tp_layer = TP_ALLREDUCES_PER_LAYER * n_dec * tp_ar
    # Megatron's vocab-parallel embedding all-reduces its output (forward, first stage) and
    # the column-parallel LM head all-reduces its input gradient (backward, last stage).
    tp_fwd = tp_layer + np.where(stage == 0, tp_ar, 0.0)
    tp_bwd = tp_layer + np.where(stage == P - 1, tp_ar, 0.0)

    # ZeRO-3: each unit's parameters are all-gathered before its forward and its backward,
    # one unit ahead, so only the part not hidden by the previous unit's compute shows.
    u_ag = (all_gather(D[:, :, None], sc.u_params * recipe.param_bytes, _ex(dp_link))
            * (Z >= 3)[:, :, None] * (sc.u_params > 0))
    pad = np.zeros(sc.u_fwd.shape[:-1] + (1,))
    prev_f = b[:, :, None] * np.concatenate([pad, sc.u_fwd[..., :-1]], axis=-1)
    next_b = b[:, :, None] * np.concatenate([sc.u_bwd[..., 1:], pad], axis=-1)
    z3_fwd = np.maximum(0.0, u_ag - prev_f).sum(axis=2)
    z3_bwd = np.maximum(0.0, u_ag - next_b).sum(axis=2)

    fwd = b * sc.fwd + tp_fwd + z3_fwd + np.where(stage < P - 1, p2p, 0.0)
    bwd = b * sc.bwd + tp_bwd + z3_bwd + np.where(stage > 0, p2p, 0.0)
    rec = b * sc.rec + tp_layer

    # Per micro-batch the cluster's link carries: TP all-reduces, boundary transfers, ZeRO-3
    # gathers, and (ZeRO >= 2) the reduce-scatter of that micro-batch's gradients.
    grad_rs = reduce_scatter(D, sc.params * recipe.grad_bytes, dp_link) * (Z >= 2)
    recovers = c.act != FULL
    fsr = c.act == FSR
    link_busy = tp_fwd + tp_bwd + 2 * p2p + 2 * u_ag.sum(axis=2) + grad_rs
    # Recover re-runs the forward: its TP all-reduces again, and under ZeRO-3 FSR gathers the
    # layer's parameters once more (it runs ahead of, not next to, the Backward that gathers
    # them); checkpointing recomputes right before Backward and shares that gather.
    link_rec = np.where(recovers, tp_layer, 0.0) + np.where(fsr, u_ag.sum(axis=2), 0.0)
    # MT-3000 links move data DDR to DDR: each byte sent is read from DDR, each byte received
    # is written to it, so communication also takes DDR time.
    comm_ddr = 2 * (link_busy + link_rec) * dp_link.bandwidth / ddr

    # A slot (one Forward and one Backward of a stage) lasts at least its critical path and
    # at least as long as each resource is busy. Recover runs as whole-layer tasks in the
    # stage's in-order compute stream (the lifecycle's program), so with either policy it
    # adds to the path of every slot; FSR differs only in the waits it fills (_fsr_hidden).
    path = fwd + bwd
    busy_c = b * (sc.fwd_c + sc.bwd_c)
    busy_d = b * (sc.fwd_d + sc.bwd_d) + comm_ddr
    rec_on = np.where(recovers, rec, 0.0)
    rec_c, rec_d = np.where(recovers, b * sc.rec_c, 0.0), np.where(recovers, b * sc.rec_d, 0.0)
    rec1 = b * sc.rec1 + TP_ALLREDUCES_PER_LAYER * tp_ar * (sc.rec1 > 0)
    sync, update, prefetch, window, e_comm, e_upd, e_pref = _state_pipeline(sc, c, fwd, bwd, dp_link, ddr, recipe)
    # The fsr pass estimates the step with list-order links: the gradient's send, and a
    # layer-wise GradSync queued after a stage's last Backward, hold the sender's link before
    # the last gradient reaches the stage below.
    sync_lag = p2p + np.where((c.pref != BULK) | (Z >= 2), sync, 0.0)
    rec_hidden, rec_hidden_warm = (np.where(fsr, h, 0.0) for h in _fsr_hidden(fwd, bwd, rec, rec1, sync_lag))
    # A hidden Recover takes its compute and DDR time into the wait with it (layers of a stage
    # are alike, so in the proportions of the stage's whole recovery).
    kept = 1.0 - np.divide(rec_hidden, rec, out=np.zeros_like(rec), where=rec > 0)

    def slots(on_path, c_rec, d_rec, l_rec):
        """A stage's slot by its busiest resource: the compute stream's path and each engine."""
        return np.maximum.reduce([path + on_path, busy_c + c_rec, busy_d + d_rec, link_busy + l_rec])

    # Three makespans: recovery-free main path; + resource bounds; + recovery. The trip runs
    # one micro-batch through every stage (sends included, FSR's hidden recovery excluded);
    # the steady slot counts compute-stream work, which the sends leave (steady_slot).
    sends = _sends(P, p2p)
    slot_norec = slots(0.0, 0.0, 0.0, 0.0)
    slot = slots(rec_on, rec_c, rec_d, link_rec)
    trip = slots(rec_on - rec_hidden, rec_c * kept, rec_d * kept, link_rec)
    rec_exposed = slot - slot_norec
    t_1f1b = makespan(path, path - sends, p2p, M, fwd=fwd)
    e_link = makespan(slot_norec, slots(-sends, 0.0, 0.0, 0.0), p2p, M, fwd=fwd) - t_1f1b
    e_rec = (makespan(trip, slots(rec_on - sends, rec_c, rec_d, link_rec), p2p, M, rec_hidden_warm,
                      np.where(fsr, rec1, 0.0), fwd=fwd, cool=rec_hidden)
             - t_1f1b - e_link)

    return StepTime(fwd=fwd, bwd=bwd, rec=rec, rec_exposed=rec_exposed, rec_hidden=rec_hidden,
                    rec_hidden_warm=rec_hidden_warm, tp_allreduce=tp_ar, p2p=p2p,
                    link_busy=link_busy, sync=sync, update=update, prefetch=prefetch, window=window,
                    t_1f1b=t_1f1b, e_comm=e_comm + e_link, e_upd=e_upd, e_pref=e_pref, e_rec=e_rec)


def _fsr_hidden(fwd, bwd, rec, rec1, sync_lag=None):
    """Recovery FSR hides per stage (Eq. 7 with one recovery buffer): two [C, P] arrays.

    The lifecycle's `fsr` pass moves only the first Recover of a backward (one buffer) ahead
    of the stage's wait for that backward's gradient, and only where the recovery-free
    schedule waits there; it hides min(first Recover, the wait). Two waits matter:

    * the last micro-batch's gradient trip P-1 -> 0, on the step's path (first result).
      Gradients reach stage p A_{p+1} apart, A_{P-1} = F_{P-1} + B'_{P-1} (the last stage
      runs its final Forward and Backward back to back), and a stage that hides h_p in each
      wait passes them on A_p = max(A_{p+1}, B'_p - h_p) apart. A stage that hid R1 in its
      previous wait is ahead by it, so it waits A_{p+1} - B'_p + R1_p:
      h_p = clip(A_{p+1} - B'_p + R1_p, 0, R1_p) (equal stages: the whole R1; a stage
      slower than the gradients arriving runs its Backwards back to back and hides 0);
    * the first micro-batch's: stage p ran P-p Forwards back to back and waits
      sum_{q>p} (F_q + B'_q) - (P-1-p) F_p for its first gradient (second result; on the
      path only from the slowest stage on, see makespan).

    Idle time in the steady state shortens nothing: a stage's compute stream does its whole
    work, Recover included, every slot, so the period is at least the slowest stage's work
    whatever the waits hold. The last stage never waits: its Backward follows its Forward.
    """
    cool, warm = np.zeros_like(fwd), np.zeros_like(fwd)
    if fwd.shape[1] == 1:
        return cool, warm
    lag = 0.0 if sync_lag is None else sync_lag[:, 1:]
    moved = _last_wait(fwd, bwd) + lag > 0.0        # the pass estimates with recoveries free
    full = bwd + rec
    spacing = fwd[:, -1] + full[:, -1]
    for p in range(fwd.shape[1] - 2, -1, -1):
        cool[:, p] = np.where(moved[:, p], np.clip(spacing - full[:, p] + rec1[:, p], 0.0, rec1[:, p]), 0.0)
        spacing = np.maximum(spacing, full[:, p] - cool[:, p])
    moved = _first_wait(fwd, bwd) > 0.0
    warm[:, :-1] = np.where(moved, np.minimum(rec1[:, :-1], np.maximum(0.0, _first_wait(fwd, full))), 0.0)
    return cool, warm


def _first_wait(fwd, bwd):
    """[C, P-1] each stage's wait for the first micro-batch's gradient (see _fsr_hidden)."""
    P = fwd.shape[1]
    down = np.cumsum((fwd + bwd)[:, ::-1], axis=1)[:, ::-1]     # sum over stages q >= p
    return down[:, 1:] - (P - 1 - np.arange(P - 1)) * fwd[:, :-1]


def _last_wait(fwd, bwd):
    """[C, P-1] each stage's wait for the last micro-batch's gradient: A_p - B_p (see above)."""
    last = fwd[:, -1:] + bwd[:, -1:]
    # max of B_q over p < q < P-1, for each p < P-1 (a suffix maximum)
    inner = np.concatenate([bwd[:, 1:-1], np.zeros_like(last)], axis=1)
    inner = np.maximum.accumulate(inner[:, ::-1], axis=1)[:, ::-1]
    return np.maximum(last, inner) - bwd[:, :-1]


def _ex(link):
    """A link whose per-candidate arrays broadcast over units."""
    return type(link)(np.asarray(link.latency)[..., None], np.asarray(link.bandwidth)[..., None])


def _state_pipeline(sc, c, fwd, bwd, dp_link, ddr, recipe):
    """GradSync -> UpdateShard -> PrefetchW per unit (Eq. 2-4) and the exposed tail."""
    D, Z, b, pref = c.D[:, :, None], c.Z[:, :, None], c.b[:, :, None], c.pref[:, 0]
    link = _ex(dp_link)
    grads = sc.u_params * recipe.grad_bytes
    # ZeRO-0 all-reduces gradients and updates every parameter locally; ZeRO >= 1 reduce-
    # scatters, updates a 1/D shard, and (ZeRO 1, 2) all-gathers the updated parameters.
    real = sc.u_params > 0                     # zero padding is not a unit: no message latency
    rs = np.where(Z == 0, all_reduce(D, grads, link), reduce_scatter(D, grads, link)) * real
    upd = sc.u_params / np.where(Z >= 1, D, 1) * recipe.update_traffic_bytes / ddr
    ag = np.where((Z == 1) | (Z == 2), all_gather(D, sc.u_params * recipe.param_bytes, link), 0.0) * real
    u_fwd = b * sc.u_fwd
    # The last micro-batch's Backward of a unit, whose end releases its GradSync; with
    # recovery its Recover runs in the compute stream right before it.
    u_bwd = b * sc.u_bwd + np.where(c.act[:, :, None] != FULL, u_fwd * sc.u_dec, 0.0)
    # Backward visits units last-to-first; unit j's sync is released when its backward ends.
    # S_exp = max_j (sum_{k<=j} RS_k - sum_{k<j} B_k): the sync tail after the stage's backward.
    s_exp = (np.cumsum(rs, axis=2) - (np.cumsum(u_bwd, axis=2) - u_bwd)).max(axis=2)
    drain = np.cumsum(bwd, axis=1) - bwd            # stages before p still running backward
    warm = np.cumsum(fwd, axis=1) - fwd             # next step reaches stage p this much later
    window = drain + warm
    # Unit j's view is due when the next step's first Forward(j) starts, `due` after the
    # stage's last Backward; whatever ends later delays the next step by as much.
    due = window[:, :, None] + np.cumsum(u_fwd, axis=2) - u_fwd
    # Deadline: updates and prefetches follow their syncs in release order (earliest deadline
    # first among the released), so every unit's prefetch but the first's shares the link
    # with the remaining syncs (which go first) while the backward drains: that busy period
    # ends at L = max_j (sum_{k<=j} (RS_k + AG_k [k > 0]) - sum_{k<j} B_k). The first unit,
    # released last, gathers after its update and after L.
    cum_ag = np.cumsum(ag, axis=2)
    busy = (np.cumsum(rs, axis=2) + cum_ag - ag[:, :, :1] - (np.cumsum(u_bwd, axis=2) - u_bwd)).max(axis=2)
    first_end = np.maximum(s_exp + upd[:, :, 0], busy) + ag[:, :, 0]
    later = busy - due[:, :, 1] if due.shape[2] > 1 else np.full_like(busy, -np.inf)
    e_deadline = np.maximum.reduce([np.zeros_like(busy), first_end - due[:, :, 0], later])
    dl_comm = np.maximum(0.0, s_exp - window)
    dl_upd = np.maximum(0.0, s_exp + upd[:, :, 0] - window) - dl_comm
    sum_rs, sum_upd, sum_ag = rs.sum(axis=2), upd.sum(axis=2), ag.sum(axis=2)
    # Bulk defers what DeepSpeed defers: the gradient all-reduce / reduce-scatter under ZeRO
    # 0/1; under ZeRO >= 2 each bucket is reduce-scattered as backward produces it (the last
    # micro-batch's too), so its GradSyncs overlap the backward as layer-wise ones do.
    sync_end = np.where((pref[:, None] == BULK) & (Z[:, :, 0] < 2), sum_rs, s_exp)
    # Layer-wise and bulk run UpdateShard and PrefetchW at the step end (update-prefetch
    # bulk): the updates one after another in forward order from the last sync on, and each
    # prefetch after its unit's update and the previous prefetch, i.e.
    # P_j = max_{k<=j}(U_k + sum_{i=k..j} AG_i). They too are due at the next step's first
    # Forward of their unit, so the window hides them as it hides the deadline chain.
    u_end = sync_end[:, :, None] + np.cumsum(upd, axis=2)
    p_end = cum_ag + np.maximum.accumulate(u_end - (cum_ag - ag), axis=2)
    e_bulk = np.maximum(0.0, (p_end - due).max(axis=2))
    bk_comm = np.maximum(0.0, sync_end - window)
    bk_upd = np.maximum(0.0, np.maximum(0.0, (u_end - due).max(axis=2)) - bk_comm)
    dl = pref[:, None] == DEADLINE
    total = np.where(dl, e_deadline, e_bulk)
    worst = total.argmax(axis=1)
    pick = lambda a: np.take_along_axis(a, worst[:, None], axis=1)[:, 0]  # noqa: E731
    e_total = pick(total)
    e_comm = pick(np.where(dl, dl_comm, bk_comm))
    e_upd = np.minimum(pick(np.where(dl, dl_upd, bk_upd)), e_total - e_comm)
    e_pref = np.maximum(0.0, e_total - e_comm - e_upd)
    return sum_rs, sum_upd, sum_ag, window, e_comm, e_upd, e_pref

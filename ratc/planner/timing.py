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
    """Non-interleaved 1F1B makespan: one micro-batch's trip plus (M-1) steady slots.

    fwd and bwd include the stage's boundary sends (`send` [C, 1] seconds each, default 0);
    a send runs on the link, not in the compute stream (see steady_slot).
    """
    send = np.zeros((fwd.shape[0], 1)) if send is None else send
    return makespan(fwd + bwd, fwd + bwd - _sends(fwd.shape[1], send), send, M)


def makespan(trip: np.ndarray, work: np.ndarray, send: np.ndarray, M, warm=None) -> np.ndarray:
    """[C] one micro-batch's trip (sum of the stages' [C, P] trip) plus (M-1) steady slots.

    `warm` [C, P]: what stage p hides in its wait before its first Backward (FSR). The step's
    path runs through the slowest stage k, entered when the first micro-batch's gradient
    came back to it; that trip crosses the first Backward of stages k..P-2, so it is shorter
    by their `warm` (none when k is the last stage). Stage k keeps that lead only while it
    stays the slowest: each later slot the others catch up by w_k - (second slowest), so at
    most that much is kept.
    """
    steady = steady_slot(work, send)
    out = trip.sum(axis=1) + (M[:, 0] - 1) * steady
    if warm is None or work.shape[1] == 1:
        return out
    k = work.argmax(axis=1)[:, None]
    rows = np.arange(work.shape[0])[:, None]
    ahead = np.cumsum(warm[:, ::-1], axis=1)[:, ::-1][rows, k][:, 0]     # sum of warm over stages k..P-1
    top2 = np.sort(work, axis=1)[:, -2:]
    kept = np.minimum(ahead, top2[:, 1] - top2[:, 0])
    return out - np.where(M[:, 0] > 1, kept, 0.0)


def _sends(P: int, send: np.ndarray) -> np.ndarray:
    """[C, P] boundary sends per slot: activation out (p < P-1), gradient out (p > 0)."""
    stage = np.arange(P)[None, :]
    return send * ((stage < P - 1).astype(float) + (stage > 0))


def steady_slot(work: np.ndarray, send: np.ndarray) -> np.ndarray:
    """[C] the period of 1F1B's steady state from each stage's compute-stream work per slot.

    A stage's compute stream runs one Forward and one Backward per slot; its sends overlap
    it, but they lie on the dependency cycles between stages: stage p's Backward(m) waits
    for stage p+1's, which followed p+1's Forward of a micro-batch p sent one slot earlier.
    A cycle through stages p..p+k-1 spans k slots and holds their work plus 2(k-1) sends,
    so the period is the largest of (sum of k consecutive stages' work + 2(k-1) s) / k
    (k = 1: the slowest stage). With no sends this is the slowest stage's slot.
    """
    P = work.shape[1]
    hi, lo, k = _windows(P)
    cum = np.concatenate([np.zeros((work.shape[0], 1)), np.cumsum(work, axis=1)], axis=1)
    return ((cum[:, hi] - cum[:, lo] + 2 * (k - 1) * send) / k).max(axis=1)


@lru_cache(maxsize=None)
def _windows(P: int):
    """Index pairs (end, start) of every run of k consecutive stages, and k."""
    pairs = [(p + k, p, k) for k in range(1, P + 1) for p in range(P - k + 1)]
    hi, lo, k = (np.array(x) for x in zip(*pairs))
    return hi, lo, k.astype(float)


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
    sync_lag = p2p + np.where(c.pref != BULK, sync, 0.0)
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
    t_1f1b = makespan(path, path - sends, p2p, M)
    e_link = makespan(slot_norec, slots(-sends, 0.0, 0.0, 0.0), p2p, M) - t_1f1b
    e_rec = (makespan(trip, slots(rec_on - sends, rec_c, rec_d, link_rec), p2p, M, rec_hidden_warm)
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
    u_bwd = b * sc.u_bwd
    u_fwd = b * sc.u_fwd
    # Backward visits units last-to-first; unit j's sync is released when its backward ends.
    # S_exp = max_j (sum_{k<=j} RS_k - sum_{k<j} B_k): the sync tail after the stage's backward.
    s_exp = (np.cumsum(rs, axis=2) - (np.cumsum(u_bwd, axis=2) - u_bwd)).max(axis=2)
    drain = np.cumsum(bwd, axis=1) - bwd            # stages before p still running backward
    warm = np.cumsum(fwd, axis=1) - fwd             # next step reaches stage p this much later
    window = drain + warm
    # Deadline: unit j's view is due when the next step's first Forward(j) starts; prefetches
    # follow the last sync and the first unit's update, in forward order.
    chain = s_exp[:, :, None] + upd[:, :, :1] + np.cumsum(ag, axis=2)
    due = window[:, :, None] + np.cumsum(u_fwd, axis=2) - u_fwd
    e_deadline = np.maximum(0.0, (chain - due).max(axis=2))
    dl_comm = np.maximum(0.0, s_exp - window)
    dl_upd = np.maximum(0.0, s_exp + upd[:, :, 0] - window) - dl_comm
    sum_rs, sum_upd, sum_ag = rs.sum(axis=2), upd.sum(axis=2), ag.sum(axis=2)
    lw_comm = np.maximum(0.0, s_exp - drain)
    total = np.where(pref[:, None] == DEADLINE, e_deadline,
                     np.where(pref[:, None] == LAYERWISE, lw_comm + sum_upd + sum_ag, sum_rs + sum_upd + sum_ag))
    worst = total.argmax(axis=1)
    pick = lambda a: np.take_along_axis(a, worst[:, None], axis=1)[:, 0]  # noqa: E731
    e_total = pick(total)
    e_comm = np.where(pref == DEADLINE, pick(dl_comm), np.where(pref == LAYERWISE, pick(lw_comm), pick(sum_rs)))
    e_upd = np.where(pref == DEADLINE, pick(dl_upd), pick(sum_upd))
    e_pref = np.maximum(0.0, e_total - e_comm - e_upd)
    return sum_rs, sum_upd, sum_ag, window, e_comm, e_upd, e_pref

"""Step time by exposed latency (paper Eq. 11, 12) over the non-interleaved 1F1B schedule.

All arrays are [C, P] (candidates x stages) or [C, P, U] (x units of a stage, forward
order); the pieces (per-stage task times, collectives, windows) stay available so the
system VM can check them task by task.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    rec_exposed: np.ndarray  # [C, P] what Recover adds to the stage's slot (Eq. 7)
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


def one_f_one_b(fwd: np.ndarray, bwd: np.ndarray, M) -> np.ndarray:
    """Non-interleaved 1F1B makespan: one micro-batch's trip plus (M-1) bottleneck slots."""
    return (fwd + bwd).sum(axis=1) + (M[:, 0] - 1) * (fwd + bwd).max(axis=1)


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
    link_busy = tp_fwd + tp_bwd + 2 * p2p + 2 * u_ag.sum(axis=2) + grad_rs
    # Recover re-runs the forward: its TP all-reduces again, and under ZeRO-3 FSR gathers the
    # layer's parameters once more (it runs ahead of, not next to, the Backward that gathers
    # them); checkpointing recomputes right before Backward and shares that gather.
    link_rec = np.where(recovers, tp_layer, 0.0) + np.where(c.act == FSR, u_ag.sum(axis=2), 0.0)
    # MT-3000 links move data DDR to DDR: each byte sent is read from DDR, each byte received
    # is written to it, so communication also takes DDR time.
    comm_ddr = 2 * (link_busy + link_rec) * dp_link.bandwidth / ddr

    # A slot (one Forward and one Backward of a stage) lasts at least its critical path and
    # at least as long as each resource is busy. Checkpointing puts Recover on the path
    # (Eq. 7 with no window); FSR runs it in the slot's idle compute, DDR and link time.
    path = fwd + bwd
    busy_c = b * (sc.fwd_c + sc.bwd_c)
    busy_d = b * (sc.fwd_d + sc.bwd_d) + comm_ddr
    slot_norec = np.maximum.reduce([path, busy_c, busy_d, link_busy])
    fsr = c.act == FSR
    slot = np.maximum.reduce([path + np.where(c.act == CKPT, rec, 0.0),
                              busy_c + np.where(fsr, b * sc.rec_c, 0.0),
                              busy_d + np.where(fsr, b * sc.rec_d, 0.0),
                              link_busy + link_rec])
    rec_exposed = slot - slot_norec

    t_1f1b = one_f_one_b(fwd, bwd, M)
    e_link = one_f_one_b(fwd, slot_norec - fwd, M) - t_1f1b
    e_rec = one_f_one_b(fwd, slot - fwd, M) - t_1f1b - e_link

    sync, update, prefetch, window, e_comm, e_upd, e_pref = _state_pipeline(sc, c, fwd, bwd, dp_link, ddr, recipe)
    return StepTime(fwd=fwd, bwd=bwd, rec=rec, rec_exposed=rec_exposed, tp_allreduce=tp_ar, p2p=p2p,
                    link_busy=link_busy, sync=sync, update=update, prefetch=prefetch, window=window,
                    t_1f1b=t_1f1b, e_comm=e_comm + e_link, e_upd=e_upd, e_pref=e_pref, e_rec=e_rec)


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

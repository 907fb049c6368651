"""Step time by exposed latency (paper Eq. 11, 12) over the 1F1B schedule (interleaved when v > 1).

All arrays are [C, P] (candidates x stages) or [C, P, U] (x units of a stage, forward
order); with v > 1 (interleaved) the stages are the P*v virtual stages, except the state
chain's pieces (sync, update, prefetch, window), which are per rank. The pieces (per-stage
task times, collectives, windows) stay available so the system VM can check them task by task.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ratc.planner.collectives import Link, all_reduce, reduce_scatter
from ratc.planner.config import CandidateBatch
from ratc.planner.order_makespan import interleaved_rank_ends
from ratc.planner.stages import StageCosts
from ratc.planner.stream_update import in_stream_tail
from ratc.step.schedules import rank_columns
from ratc.planner.state_chain import gather_time, rank_links, state_costs
from ratc.step.config import ACT_POLICIES, PREF_POLICIES, RECIPE
from ratc.step.rules import (bucket_chain, first_reach, gathers, gather_ahead, next_step_start, recomputes,
                             reduces_per_micro_batch, tp_allreduces)
from ratc.step.schedules import chunk_lead_ins

CKPT, FSR = (ACT_POLICIES.index(a) for a in ("ckpt", "fsr"))
BULK, LAYERWISE, DEADLINE = (PREF_POLICIES.index(p) for p in ("bulk", "layerwise", "deadline"))


@dataclass(frozen=True)
class StepTime:
    """The timing model's pieces for a batch of candidates."""

    fwd: np.ndarray          # [C, P] Forward task of one micro-batch on stage p (incl. TP / ZeRO-3 / send)
    bwd: np.ndarray          # [C, P] Backward task, without recovery
    rec: np.ndarray          # [C, P] Recover work of a micro-batch (re-run forward of the stage's recovered layers)
    rec_exposed: np.ndarray  # [C, P] what recovery adds to the stage's steady 1F1B slot (Eq. 7)
    host_f: np.ndarray       # [C, P] FSR: what a Forward adds hosting the next Backward's first Recover
    host_b: np.ndarray       # [C, P] ... what a Backward's units add hosting its other Recovers
    host_c: np.ndarray       # [C, P] ... what a cool-down Backward adds hosting the next one's first
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
    e_link: np.ndarray           # [C] the part of e_comm from link saturation (policy-independent)
    state_by_pref: np.ndarray    # [C, 3, len(PREF_POLICIES)] the state chain's (E_comm, E_upd, E_pref)
    #                              under each policy; e_comm - e_link, e_upd, e_pref are the candidate's own

    @property
    def t_step(self) -> np.ndarray:
        """Eq. 12."""
        return self.t_1f1b + self.e_comm + self.e_upd + self.e_pref + self.e_rec


def one_f_one_b(fwd: np.ndarray, bwd: np.ndarray, M, send=None) -> np.ndarray:
    """Non-interleaved 1F1B makespan (see makespan).

    fwd and bwd include the stage's boundary sends (`send` [C, 1] seconds each, default 0);
    a send runs on the link, not in the compute stream.
    """
    send = np.zeros((fwd.shape[0], 1)) if send is None else send
    return makespan(fwd + bwd - _sends(fwd.shape[1], send), send, M, fwd=fwd)


def makespan(work: np.ndarray, send, M, fwd: np.ndarray, host_f=None, host_c=None, plain=None) -> np.ndarray:
    """[C] makespan of Megatron's non-interleaved 1F1B order: the longest path of its task graph.

    work [C, P]: a stage's compute-stream time per steady-state slot (one Forward and one
    Backward, sends excluded: they run on the link); fwd [C, P]: a plain Forward, its send
    included (a stage's Backward is the rest of the slot); send [C, 1]: a stage-boundary
    transfer, which the receiver waits for. FSR (ratc.planner.corun): `host_f` [C, P] is
    what a Forward adds when it hosts the next Backward's first Recover (a Forward issued
    right before a Backward: every one of the steady state, and the last of the warm-up
    when there is none; `work` counts it), `host_c` what a Backward adds when it hosts the
    next one's (one issued right before another Backward, in the cool-down). `plain` [C, P]:
    the slot's work without any co-run, where a resource (link, DDR) rather than the compute
    stream sets it: a Backward no hosting Forward precedes (the cool-down's) keeps at least
    that slot's rest, since a Forward's co-run only fills the time the resource leaves idle.

    Stage p issues W_p = min(P-1-p, M) Forwards, then pairs (Forward W_p + i, Backward i),
    then its remaining Backwards; Forward m waits for stage p-1's, Backward m for stage
    p+1's. Every task's end is computed exactly, round by round (round r: each stage's
    Forward W_p + r, then its Backward r), vectorized over candidates and stages: within a
    round the Backwards form one chain down the stages (and, where M < P, the warm-up
    Forwards of the stages with W_p = M one up them), a max-plus recurrence that prefix
    maxima solve.
    """
    C, P = work.shape
    zero = np.zeros((C, P))
    send = np.broadcast_to(np.asarray(send, dtype=float), (C, 1))
    stage = np.arange(P)
    fc = fwd - send * (stage < P - 1)                    # a plain Forward's compute-stream part
    host_f = zero if host_f is None else host_f + zero
    host_c = zero if host_c is None else host_c + zero
    bc = work - fc - host_f                              # ... and a Backward's
    # ... and one after no hosting Forward
    parts = [fc, bc, host_f, host_c] + ([] if plain is None else [np.maximum(bc, plain - fc)])
    M = np.broadcast_to(np.asarray(M), (C, 1))[:, :1].astype(float)
    # candidates that differ only where the main path does not look (state policy, ...) share a row
    key, inverse = _distinct_rows(np.concatenate([M, send, *parts], axis=1))
    M, send = key[:, 0].astype(int), key[:, 1:2]
    fc, bc, host_f, host_c, *more = (key[:, 2 + i * P:2 + (i + 1) * P] for i in range(len(parts)))
    alone = more[0] if more else bc
    out = np.empty(len(key))
    for m in np.unique(M):
        rows = M == m
        out[rows] = _longest_path(fc[rows], bc[rows], host_f[rows], host_c[rows], send[rows], int(m), alone[rows])
    return out[inverse]


def _distinct_rows(rows: np.ndarray) -> tuple:
    """(the distinct rows in order of first appearance, each row's index among them); hashing
    the rows' bytes is far cheaper than np.unique(axis=0), which sorts them."""
    rows = np.ascontiguousarray(rows)
    seen: dict = {}
    firsts = []
    inverse = np.empty(len(rows), dtype=np.intp)
    for i, r in enumerate(map(bytes, rows)):
        j = seen.get(r)
        if j is None:
            j = seen[r] = len(firsts)
            firsts.append(i)
        inverse[i] = j
    return rows[firsts], inverse


def _longest_path(fc, bc, host_f, host_c, send, M: int, alone=None) -> np.ndarray:
    """[C] end of the last task of the 1F1B task graph with M micro-batches (see makespan).

    With M >= P the warm-up is a pipeline fill of Forwards only, whose ends have a closed
    form: stage p's Forward m (m < W_p) ends at sum_{q<=p} F_q + p s + m max_{q<=p} F_q.
    In the steady state every round is the same max-plus linear map of the stages' ends, so
    once a candidate's ends equal those of k rounds before plus one common shift (the map's
    periodic regime), its ends at the last steady round follow from the last k rounds
    (`_Periods`). Every round has Forwards (the last stage's Forward r is in round r).
    """
    C, P = fc.shape
    alone = bc if alone is None else alone
    stage = np.arange(P)
    W = np.minimum(P - 1 - stage, M)                     # warm-up Forwards per stage
    n_cap = int((W == M).sum())                          # stages whose Forwards all come first (M < P - p)
    col = np.zeros((C, 1))
    if n_cap == 0:
        fill = np.cumsum(fc + send, axis=1) - send + (W - 1) * np.maximum.accumulate(fc, axis=1)
        last = np.where(W > 0, fill, 0.0)                # each stage's last warm-up Forward
        r = 0
    else:
        last = np.zeros((C, P))
        r = -int(W[0])
    f_prev = last.copy()                                 # each stage's Forward of the previous round
    # rounds [0, steady_end) run one map: every stage one hosting Forward, one plain Backward
    steady_end = M - int(W[0]) - 1
    d_steady = fc + host_f
    H_steady = np.concatenate([col, np.cumsum(bc + send, axis=1)], axis=1)[:, :P]
    dH_steady = bc + H_steady
    periods = _Periods(C, P, steady_end) if steady_end > 4 * (2 * P + 2) else None
    while r < M:
        m = W + r
        steady = 0 <= r < steady_end
        # a Forward hosts when a Backward follows it: from round 0 on, or the last warm-up one
        d = d_steady if r >= 0 else fc + host_f * (m == M - 1)
        cross = np.concatenate([col, f_prev[:, :-1] + send], axis=1)
        f = np.maximum(last, cross) + d
        if n_cap > 1 and r < 0:
            # stages with W_p = M run Forward m in the same round as the stage before them
            k = n_cap
            K = np.cumsum(d[:, :k] + send, axis=1)
            f[:, :k] = np.maximum.accumulate(last[:, :k] + d[:, :k] - K, axis=1) + K
        if not steady:
            f = np.where((m >= 0) & (m < M), f, last)
        f_prev = last = f
        if r >= 0:
            if steady:
                H, dH = H_steady, dH_steady
            else:
                # Backward r hosts the next one's first Recover when another Backward follows
                # it; in the cool-down no hosting Forward comes before it (a stage whose
                # Forwards all ran in the warm-up has its last one, which hosts, before Backward 0)
                cool = (m >= M) & ~((r == 0) & (W == M))
                d = np.where(cool, alone, bc) + host_c * ((r >= M - W - 1) & (r < M - 1))
                H = np.concatenate([col, np.cumsum(d + send, axis=1)], axis=1)[:, :P]
                dH = d + H
            # b[p] = max(last[p], b[p+1] + send) + d[p] = max_{q >= p} (last[q] + d[q] + H[q]) - H[p]
            last = np.maximum.accumulate((last + dH)[:, ::-1], axis=1)[:, ::-1] - H
            if steady and periods is not None:
                done = periods.record(r, last, f_prev)
                if done is not None:
                    last, f_prev = done
                    r = steady_end - 1
                    periods = None
        r += 1
    return last.max(axis=1)


class _Periods:
    """The steady rounds' ends, to find each candidate's period and skip to the last steady round.

    A max-plus linear map commutes with adding a constant, so if a candidate's ends at round
    r are those of round r - k plus one shift, they repeat every k rounds with that shift
    from there on, exactly. Periods up to 2P + 1 are looked for (a critical cycle through
    the stages spans at most P rounds), every K rounds; a candidate whose stages drift apart
    for long (a slow tail catching up) keeps the rounds going for all.
    """

    def __init__(self, C: int, P: int, steady_end: int):
        self.K = 2 * P + 2
        self.hist = np.empty((self.K, C, 2 * P))
        self.end = steady_end - 1                     # the last steady round
        self.period = np.zeros(C, dtype=int)

    def record(self, r: int, last, f_prev):
        """Note round r's ends; when every candidate's period is known, their ends at the last
        steady round (last, f_prev), else None."""
        K, P = self.K, last.shape[1]
        x = np.concatenate([last, f_prev], axis=1)
        self.hist[r % K] = x
        if r < K or r % K or self.end - r < K:
            return None
        open_ = np.flatnonzero(self.period == 0)
        ks = np.arange(1, K)
        diff = x[open_][None] - self.hist[(r - ks) % K][:, open_]          # [K-1, open, 2P]
        tol = 1e-12 * (np.abs(x[open_]).max(axis=1) + 1.0)
        uniform = np.ptp(diff, axis=2) <= tol                              # [K-1, open]
        hit = uniform.any(axis=0)
        self.period[open_[hit]] = ks[uniform[:, hit].argmax(axis=0)]
        if not hit.all():
            return None
        k = self.period
        rows = np.arange(len(k))
        shift = x[:, 0] - self.hist[(r - k) % K, rows, 0]
        q, rho = np.divmod(self.end - (r - k), k)
        out = self.hist[(r - k + rho) % K, rows] + (q * shift)[:, None]
        return out[:, :P], out[:, P:]


def _boundaries(P: int, sched: str = "1f1b") -> tuple:
    """([P], [P]) 1.0 where a (virtual) stage's Forward sends its activation to another rank,
    and where its Backward sends its gradient: but on the last and the first; ZBV's V hands
    both over on one rank at its bottom (stages P/2 - 1 and P/2)."""
    stage = np.arange(P)
    out_f, out_b = (stage < P - 1).astype(float), (stage > 0).astype(float)
    if sched == "zbv":
        out_f[P // 2 - 1] = out_b[P // 2] = 0.0
    return out_f, out_b


def _sends(P: int, send: np.ndarray, sched: str = "1f1b") -> np.ndarray:
    """[C, P] boundary sends per slot: activation out (p < P-1), gradient out (p > 0)."""
    return send * sum(_boundaries(P, sched))


def step_time(sc: StageCosts, c: CandidateBatch, platform, seq_len: int, hidden: int, elem: int,
              recipe=RECIPE) -> StepTime:
    """Eq. 12 for every candidate of the batch."""
    P = sc.P
    D, T, Z, b, M = c.D, c.T, c.Z, c.b, c.M
    ddr = platform.cluster.ddr_bandwidth
    tp_link, dp_link, pp_link = rank_links(platform, D, T, P)
    act_bytes = b * seq_len * hidden * elem          # one micro-batch's hidden stream, [C, 1]
    stage = np.arange(P)[None, :]
    n_dec, n_rec = sc.n_dec, sc.n_rec_tp     # (a selective Recover re-runs no TP all-reduce)
    recovers = recomputes(c.act)
    fsr = c.act == FSR

    # Megatron's vocab-parallel embedding all-reduces its output (forward, first stage) and
    # the column-parallel LM head all-reduces its input gradient (backward, last stage).
    first, last = (stage == 0).astype(float), (stage == P - 1).astype(float)
    per_layer, _ = tp_allreduces("decoder")     # (in backward, n_dec_bwd counts the layers that have one)
    embedding_f, _ = tp_allreduces("embedding")

    def traffic(tp, pp, dp):
        """Per micro-batch over links (tp, pp, dp): one TP all-reduce, a stage's decoder
        layers' TP all-reduces in forward and in backward, one boundary send, the ZeRO-3 gathers per unit, what a
        cluster sends outside recovery, and for it.

        Outside recovery: the TP all-reduces, the boundary sends (the activation out but on
        the last stage, the gradient out but on the first), each unit's view gathered for
        its forward and again for its backward (a recovered layer's Backward reuses its
        Recover's) and, at ZeRO >= 2, the reduce-scatter of the micro-batch's gradients.
        For recovery: the whole-layer Recovers' TP all-reduces."""
        ar = all_reduce(T, act_bytes, tp)
        send = pp.send(act_bytes) if P > 1 else np.zeros_like(act_bytes)
        ag = gather_time(D[:, :, None], Z[:, :, None], sc.u_params, _ex(dp), recipe)
        rs = reduce_scatter(D, sc.trainable * recipe.grad_bytes, dp) * reduces_per_micro_batch(Z) * (sc.trainable > 0)
        # (a layer with no backward, behind frozen inputs, has no backward all-reduces)
        layers = per_layer * np.stack([n_dec, sc.n_dec_bwd]) * ar
        busy = (layers.sum(axis=0) + (first * embedding_f + sc.head_tp_bwd) * ar + _sends(P, send, c.sched)
                + 2 * ag.sum(axis=2) + rs)
        return ar, layers, send, ag, rs, busy, np.where(recovers, per_layer * n_rec * ar, 0.0)

    tp_ar, (tp_layer_f, tp_layer_b), p2p, u_ag, reduces, link_busy, link_rec = traffic(tp_link, pp_link, dp_link)
    tp_fwd, tp_bwd = tp_layer_f + first * embedding_f * tp_ar, tp_layer_b + sc.head_tp_bwd * tp_ar
    # MT-3000 links move data DDR to DDR: each byte a cluster sends is read from its DDR and
    # each byte it receives written to it, so communication takes DDR time too: that of its
    # bytes (the same traffic over a latency-free 1 B/s link), not of message latencies.
    per_byte = Link(0.0, 1.0)
    *_, reduced, sent, sent_rec = traffic(per_byte, per_byte, per_byte)
    comm_ddr = 2 * (sent + sent_rec) / ddr

    # On a host whose ranks take every core a rank's collectives run in its compute stream
    # (Platform.collectives_in_compute_stream, which the data-parallel link carries): every ZeRO-3
    # gather (a unit's Forward's, and its Backward's or its Recover's) and a micro-batch's ZeRO >= 2
    # reduce-scatters add to its tasks.
    inline = np.asarray(dp_link.inline)
    z3_fwd, z3_bwd = _zero3_exposed(sc, b, u_ag, fsr & gathers(Z))
    if inline.any():        # (each unit's reduce a message of its own, as the Backwards issue them)
        unit_reduces = _unit_reduces(sc, D, dp_link, recipe).sum(axis=2) * reduces_per_micro_batch(Z)
        z3_fwd, z3_bwd = (np.where(inline, u_ag.sum(axis=2), z3_fwd),
                          np.where(inline, u_ag.sum(axis=2) + unit_reduces, z3_bwd))

    fwd = b * sc.fwd + tp_fwd + z3_fwd + _boundaries(P, c.sched)[0] * p2p
    bwd = b * sc.bwd + tp_bwd + z3_bwd + _boundaries(P, c.sched)[1] * p2p
    tp_one = per_layer * tp_ar
    rec = b * sc.rec + tp_one * n_rec

    host_f, host_b, host_c = _fsr_hosts(sc, b, tp_one, fsr, c.sched)
    path = fwd + bwd
    busy_c = b * (sc.fwd_c + sc.bwd_c)
    busy_d = b * (sc.fwd_d + sc.bwd_d) + comm_ddr
    rec_on = np.where(recovers, rec, 0.0)
    rec_c, rec_d = np.where(recovers, b * sc.rec_c, 0.0), np.where(recovers, b * sc.rec_d, 0.0)
    u_rec = _unit_recovery(sc, c, b, tp_one, fsr)

    buckets = _buckets(sc, c, b, u_rec, dp_link, recipe, inline=inline)
    slots, wait, wait_rec = _slot_bounds(c, path, busy_c, busy_d, link_busy, (reduces, 2 * reduced / ddr), buckets)
    on_slot = np.where(fsr, host_f + host_b, rec_on)
    rec_exposed = slots(on_slot, rec_c, rec_d, link_rec, wait_rec) - slots(0.0, 0.0, 0.0, 0.0, wait)
    sends, wc = _sends(P, p2p, c.sched), (b * sc.bwd_w if c.sched != "1f1b" else None)    # (wc: its Ws)
    slot_rec = slots(on_slot - sends, rec_c, rec_d, link_rec, wait_rec)
    t_1f1b, e_link, e_rec, window = (
        (*_makespans(slots, path, fwd, sends, p2p, M, host_f, host_c, slot_rec, wait), None) if c.v == 1 else
        _interleaved_makespans(slots, path, fwd, sends, p2p, c, host_f, host_c, slot_rec, wc, buckets))
    sync, update, prefetch, window, e_comm, e_upd, e_pref, by_pref = _state_chain(
        sc, c, fwd, bwd, u_rec, dp_link, pp_link, ddr, recipe, window=window, inline=inline)
    return StepTime(fwd=fwd, bwd=bwd, rec=rec, rec_exposed=rec_exposed, host_f=host_f, host_b=host_b,
                    host_c=host_c, tp_allreduce=tp_ar, p2p=p2p,
                    link_busy=link_busy, sync=sync, update=update, prefetch=prefetch, window=window,
                    t_1f1b=t_1f1b, e_comm=e_comm + e_link, e_upd=e_upd, e_pref=e_pref, e_rec=e_rec,
                    e_link=e_link, state_by_pref=by_pref)



def _slot_bounds(c: CandidateBatch, path, busy_c, busy_d, link_busy, reduces: tuple, buckets) -> tuple:
    """(slots, wait, wait_rec): slots(on_path, c_rec, d_rec, l_rec, waits) a stage's slot by
    its busiest resource, the compute stream's path (with its bucket waits) and each engine;
    wait, wait_rec [C, P] the v = 1 bucket waits (_bucket_waits) without and with recovery.
    `reduces`: (link, DDR) seconds of a micro-batch's reduce-scatters under ZeRO >= 2."""
    # v = 1: a stage's Backwards wait for their buckets within one micro-batch's run (the
    # link-bound slot covers a backlog across runs); ordered plans carry the link across actions
    wait, wait_rec = _bucket_waits(buckets, _boundaries(path.shape[1])[1]) if c.v == 1 else (0.0, 0.0)
    # Ordered plans: the bucket chains price the link's reduces action by action; the DDR
    # traffic of the reduces runs while the compute stream waits for them, not beside its work.
    # (ZeRO 3's gathers share the link with them: there the slot keeps its whole link bound)
    chained = c.v > 1 and buckets is not None
    link, ddr = reduces
    link_slot = link_busy - (np.where(gathers(c.Z), 0.0, link) if chained else 0.0)

    def slots(on_path, c_rec, d_rec, l_rec, waits=0.0):
        overlap = ddr if chained else np.minimum(ddr, waits)
        return np.maximum.reduce([path + on_path + waits, busy_c + c_rec, busy_d + d_rec - overlap, link_slot + l_rec])

    return slots, wait, wait_rec


def _buckets(sc: StageCosts, c: CandidateBatch, b, u_rec, dp_link, recipe, whole: bool = False, inline=False):
    """ZeRO >= 2, the bucket chain's units per (virtual) stage in Backward issue order, [C, S, U]
    each: (the holder's gradient task: a Backward, a zero-bubble W; its micro-batch's reduce;
    whether it holds a bucket; what recovery runs before it, checkpointing's Recover; what
    recovery adds to it, FSR's co-run); None when no candidate's bucket chain can bind.
    `whole`: zero bubble too, whole Backwards (the state chain's clock). `inline` [C, 1]:
    candidates whose collectives run in the compute stream, their reduces in the Backwards.

    A candidate's chains bind only where one waits, started on a free link, or a stage's
    gradient send would queue behind its reduces: else its holds stay False and it keeps
    the plain makespans (the search's usual case; what that leaves out, a reduce still on
    the link when the next gradient task's second unit is due, only back to back ones meet)."""
    # (zero bubble under ZeRO 3: its I's keep the link's slot bound, gathers and reduces
    # alike, and the W's no chain of their own, which would count the reduces twice)
    per_mb = (reduces_per_micro_batch(c.Z)[:, :, None] & ~(gathers(c.Z)[:, :, None] & (c.sched != "1f1b"))
              & ~np.asarray(inline, dtype=bool)[..., None])
    if not per_mb.any():
        return None
    holds = per_mb & (sc.u_trainable > 0)
    red = np.where(holds, _unit_reduces(sc, c.D, dp_link, recipe), 0.0)
    zb = c.sched != "1f1b" and not whole          # (a W holds the bucket; recovery comes before its I)
    work = b[:, :, None] * (sc.u_bwd_w if zb else sc.u_bwd)
    ckpt = (c.act == CKPT)[:, :, None] & (not zb)
    before = np.where(ckpt, u_rec, 0.0)
    work_rec = work + np.where(ckpt | zb, 0.0, u_rec)
    shape = np.broadcast_shapes(red.shape, work.shape, np.shape(u_rec))
    work, red, holds, before, work_rec = (np.ascontiguousarray(np.broadcast_to(a, shape)[..., ::-1])
                                          for a in (work, red, holds, before, work_rec))
    # Without waits unit j ends at e_j and the link frees after its reduce at d_j = max_{i<=j}
    # (e_i + R_i + ... + R_j); the holder two later, which starts at e_{j+1}, waits iff d_j >
    # e_{j+1}; so does a gradient send after the last unit behind the last but one's reduce.
    if shape[2] < 2:            # (a lone unit per stage takes over no buffer)
        return None
    e, cum = np.cumsum(work, axis=2), np.cumsum(red, axis=2)
    late = (cum + np.maximum.accumulate(e - cum + red, axis=2))[..., :-1] > e[..., 1:]
    sends = _boundaries(shape[1], c.sched)[1] > 0
    waits = late[..., :-1].any(axis=2) | (late[..., -1] & sends)
    holds = holds & waits.any(axis=1)[:, None, None]
    return (work, red, holds, before, work_rec) if holds.any() else None


def _unit_reduces(sc: StageCosts, D, dp_link, recipe) -> np.ndarray:
    """[C, P, U] one micro-batch's reduce-scatter of each unit's gradient, a message of its own
    (none for a unit that trains nothing)."""
    grads = sc.u_trainable * recipe.grad_bytes
    return reduce_scatter(D[:, :, None], grads, _ex(dp_link)) * (sc.u_trainable > 0)


def _bucket_waits(buckets, out_b) -> tuple:
    """([C, P], [C, P]) how long a stage's compute stream waits for buckets in one micro-batch's
    Backward, without and with recovery (ratc.step.rules.bucket_chain, the link free at its
    start), and after it where it sends its gradient (`out_b` [P]): that send, and the next
    Forward's activation coming in, queue behind the reduce still on the link when the
    Backward ends (the last but one; the last is released after them)."""
    if buckets is None:
        return 0.0, 0.0
    work, red, holds, before, work_rec = buckets

    def wait(before, work):
        ends, ring = bucket_chain(before, work, red, holds)
        end = ends[..., -1]
        behind = np.maximum(0.0, ring[..., -2] - end) * out_b
        return end + behind - (before + work).sum(axis=2)

    return wait(0.0, work), wait(before, work_rec)


def _zero3_exposed(sc: StageCosts, b, u_ag, fsr) -> tuple:
    """(forward, backward) [C, P] of the ZeRO-3 gathers not hidden: each runs beside the compute
    task it is issued before (ratc.step.rules.gather_ahead), so only the part longer than that
    task shows.

    A Forward's view hides behind the previous unit's Forward, a Backward's behind the next
    unit's Backward. Under FSR (`fsr` [C, 1], where ZeRO-3 gathers) a whole-layer recovered
    unit's Backward reads the view its Recover gathered, and that Recover starts with its
    host, the Backward of the unit after it: the view hides behind the task before that
    host, the Backward two units on with its own co-run; the stage's last two units'
    Recovers ride on the Forwards the 1F1B steady state runs before the Backward (the last
    unit's, hosting, and the one before it), as _fsr_hosts prices them (interleaved and
    zero bubble: the same approximation)."""
    bb = b[:, :, None]
    pad = np.zeros(sc.u_fwd.shape[:-1] + (1,))
    prev_f = bb * np.concatenate([pad, sc.u_fwd[..., :-1]], axis=-1)
    next_b = bb * np.concatenate([sc.u_bwd[..., 1:], pad], axis=-1)
    exposed_b = np.maximum(0.0, u_ag - next_b)
    if np.any(fsr):
        ahead = gather_ahead(fsr[:, :, None] & (sc.u_whole > 0))
        exposed_b = np.where(ahead == 2, np.maximum(0.0, u_ag - bb * _before_host(sc)), exposed_b)
    return np.maximum(0.0, u_ag - prev_f).sum(axis=2), exposed_b.sum(axis=2)


def _before_host(sc: StageCosts) -> np.ndarray:
    """[P, U] or [C, P, U] per sequence, the compute task before the host of each unit's FSR
    Recover (see _zero3_exposed): unit j + 2's Backward with its co-run, for the stage's last
    but one unit the last unit's Forward with its co-run, for the last the Forward before."""
    U = sc.u_fwd.shape[-1]
    n = (sc.u_fwd > 0).sum(axis=-1, keepdims=True)            # units on the stage (the rest pads)
    j = np.arange(U)
    host_b = sc.u_bwd + sc.u_co
    two_on = np.concatenate([host_b[..., 2:], np.zeros(sc.u_fwd.shape[:-1] + (min(2, U),))], axis=-1)[..., :U]
    at = lambda k: np.take_along_axis(sc.u_fwd, np.clip(n - k, 0, U - 1), axis=-1)  # noqa: E731
    last_f = at(1) + np.asarray(sc.co_f)[..., None]
    # (a lone unit: the Forward before its own hosting one follows a Backward of the same unit)
    before_last = np.where(n >= 2, at(2), sc.u_bwd[..., :1])
    return np.where(j == n - 2, last_f, np.where(j == n - 1, before_last, two_on))


def _fsr_hosts(sc: StageCosts, b, tp_one, fsr, sched: str = "1f1b") -> tuple:
    """(host_f, host_b, host_c) [C, P]: what FSR's co-runs add to the Forward, the Backwards and
    the cool-down's first Backward unit hosting them; under a zero-bubble `sched` host_b is
    the Is' and host_c the pair (an I's, a W's), each its share of the Backward's phases.

    Checkpointing runs every Recover in the stage's compute stream right before its Backward.
    FSR co-runs each with the compute task issued before it, sharing the cluster's compute
    and DDR engines (ratc.planner.corun): unit j's Backward hosts j - 1's Recover, and the
    Recover of the stage's last unit, which no Backward follows on the stage, rides on the
    Forward before the Backward, or in the cool-down on the previous Backward's first unit
    (on the last stage the head is last, and its Backward hosts the last decoder layer's).
    A guest's TP all-reduces still run on the link, after its host's."""
    has = sc.last_rec_tp
    zb = sched != "1f1b"
    host_f = np.where(fsr & sc.last_rec, b * sc.co_f + tp_one * has, 0.0)
    host_b = np.where(fsr, b * (sc.co_bi if zb else sc.co_b) + tp_one * (sc.n_rec_tp - has), 0.0)
    host_c = tuple(np.where(fsr & sc.last_rec, b * co + tp_one * has, 0.0)
                   for co in ((sc.co_i, sc.co_w) if zb else (sc.co_c,)))
    return host_f, host_b, host_c if zb else host_c[0]


def _unit_recovery(sc: StageCosts, c: CandidateBatch, b, tp_one, fsr):
    """[C, P, U] what recovery adds to each unit's Backward of the last micro-batch (the state
    pipeline's clock): checkpointing its own Recover, FSR the co-run it hosts."""
    u_whole = sc.u_whole if sc.u_whole.ndim == 3 else sc.u_whole[None]
    u_co = sc.u_co if sc.u_co.ndim == 3 else sc.u_co[None]
    # (a guest's TP all-reduces follow its host's: whole-layer guests only)
    hosts = (np.concatenate([np.zeros_like(u_whole[..., :1]), u_whole[..., :-1]], axis=-1) > 0) & (sc.u_params > 0)
    u_host = b[:, :, None] * u_co + tp_one[:, :, None] * hosts
    return np.where((c.act == CKPT)[:, :, None], b[:, :, None] * sc.u_rec,
                    np.where(fsr[:, :, None], u_host, 0.0))


def _makespans(slots, path, fwd, sends, p2p, M, host_f, host_c, slot_rec, wait=0.0) -> tuple:
    """(T_1F1B, E_link, E_rec) [C]: three makespans in one pass over the rounds: the
    recovery-free main path; with the resource bounds (and the bucket waits, `wait`); with
    recovery. The steady slot counts compute-stream work, which the sends leave."""
    zero = np.zeros_like(path)
    bound = slots(-sends, 0.0, 0.0, 0.0, wait)
    three = makespan(np.concatenate([path - sends, bound, slot_rec]),
                     np.concatenate([p2p + zero[:, :1]] * 3), np.concatenate([M + zero[:, :1]] * 3),
                     fwd=np.concatenate([fwd] * 3), host_f=np.concatenate([zero, zero, host_f + zero]),
                     host_c=np.concatenate([zero, zero, host_c + zero]),
                     plain=np.concatenate([path - sends, bound, bound]))
    return _three(three)


def _three(three: np.ndarray) -> tuple:
    """(T_1F1B, E_link, E_rec) from the stacked makespans: main path, with the resource
    bounds, with recovery."""
    C = len(three) // 3
    t_1f1b = three[:C]
    e_link = three[C:2 * C] - t_1f1b
    return t_1f1b, e_link, three[2 * C:] - t_1f1b - e_link


def _interleaved_makespans(slots, path, fwd, sends, p2p, c: CandidateBatch, host_f, host_c, slot_rec,
                           wc=None, buckets=None) -> tuple:
    """(T_1F1B, E_link, E_rec) [C] of interleaved 1F1B, each the next step's start
    (ratc.step.rules.next_step_start), and the state chain's window [C, P]: _makespans'
    three slots (the arrays are per virtual stage, [C, P*v]) over its order, each Forward its
    compute-stream part, each Backward the rest of its slot (so recovery, under Ckpt, is on
    the Backward). The state chain is costed per rank (_state_chain, _per_rank_units, and its approximation).
    Given wc [C, P*v] (ZB1P), each backward is an I, the rest of the slot, and a W of wc.
    FSR (host_f, host_c [C, P*v], _fsr_hosts): the co-run of a Backward's first Recover is
    on the task its rank runs before it, a Forward or a Backward of any chunk, not on the
    Backward (an approximation: priced with the guest stage's own Forward or Backward unit
    as the host, the ones v = 1 pairs); zero bubble, host_c is (host_i, host_w), an I's or
    a W's (_zero_bubble_hosts)."""
    S = path.shape[1]
    fc = fwd - p2p * _boundaries(S, c.sched)[0]
    zero = np.zeros_like(fc)
    hf, *hc = (h + zero for h in (host_f, *(host_c if isinstance(host_c, tuple) else (host_c,))))
    works = [path - sends, slots(-sends, 0.0, 0.0, 0.0), slot_rec - hf]
    C = len(fc)
    w = [] if wc is None else [np.concatenate([wc + zero] * 3)]
    rows = np.concatenate([np.concatenate([c.M + np.zeros((C, 1)), p2p + np.zeros((C, 1))], axis=1)] * 3)
    back = np.concatenate([x - fc for x in works]) - (w[0] if w else 0.0)
    fsr = [np.concatenate([zero, zero, h]) for h in (hf, *hc)] if hf.any() or any(h.any() for h in hc) else []
    bk = _bucket_rows(buckets, C)
    rows = np.concatenate([rows, np.concatenate([fc] * 3), back] + w + fsr + bk, axis=1)
    # rows that differ only where the main path does not look (state policy, ZeRO, ...) are one
    key, inverse = _distinct_rows(rows)
    n = 2 + len(w) + len(fsr)
    cols = [key[:, 2 + k * S:2 + (k + 1) * S] for k in range(n)]
    chains = None
    if bk:
        U = buckets[0].shape[2]
        chains = tuple(key[:, 2 + n * S + k * S * U:2 + n * S + (k + 1) * S * U].reshape(-1, S, U) for k in range(4))
    ends = interleaved_rank_ends(cols[0], cols[1], key[:, 1:2], c.P, c.v, key[:, :1],
                                 cols[2] if w else None, c.sched, tuple(cols[2 + len(w):n]) if fsr else None,
                                 c.corun, chains)[inverse]
    # Steady state: a rank reached late by the next step's first micro-batch runs its last
    # tasks beside that step's first Forwards (ZB-V's trailing Ws on the V's bottom ranks).
    reach = np.tile(first_reach(fwd[:, :c.P]), (3, 1))
    start = next_step_start(ends, reach)
    # the state chain's window: from each rank's last task (with recovery) to the next step's reach
    window = (start[:, None] + reach - ends)[2 * C:]
    return (*_three(start), window)


def _bucket_rows(buckets, C: int) -> list:
    """The bucket chains (_buckets) of the three makespans' rows, flat, [3C, S*U] each of
    (before, work, reduce, holds): none on the main path, without recovery, with it."""
    if buckets is None:
        return []
    work, red, holds, before, work_rec = buckets
    flat = lambda a: np.broadcast_to(a, work.shape).reshape(C, -1)  # noqa: E731
    none = np.zeros_like(flat(work))
    return [np.concatenate([none, none, flat(before)]), np.concatenate([none, flat(work), flat(work_rec)]),
            np.concatenate([none, flat(red), flat(red)]), np.concatenate([none, flat(holds), flat(holds)]).astype(float)]


def _state_chain(sc: StageCosts, c: CandidateBatch, fwd, bwd, u_rec, *links_ddr_recipe, window=None,
                 inline=False) -> tuple:
    """_state_pipeline per stage; with v > 1 per rank, its chunks' units in one row (the
    sync, update, prefetch and window it returns are then [C, P]; `window` the order's)."""
    if c.v == 1:
        return _state_pipeline(sc, c, fwd, bwd, u_rec, *links_ddr_recipe, inline=inline)
    view, rank_rec = _per_rank_units(sc, c.v, u_rec, c.sched)
    # (the chunks' lead-ins are counted over interleaved 1F1B's order; the zero-bubble
    # schedules keep the per-rank row's deadlines, within 1 % of the VM as they are)
    late = _chunk_deadlines(view, c, fwd) if c.sched == "1f1b" else 0.0
    return _state_pipeline(view, c, fwd[:, :c.P], bwd[:, :c.P], rank_rec, *links_ddr_recipe, late=late,
                           window=window, inline=inline)


def _chunk_deadlines(view, c: CandidateBatch, fwd) -> np.ndarray:
    """[C, P, v*U] how much later the next step's first Forward reaches each unit than the
    per-rank row assumes (it has each chunk's units due right after the chunk before's, one
    micro-batch of Forwards apart).

    In interleaved 1F1B's order the next step reaches chunk k on rank p after that rank's
    Forwards of the chunks before it (a round of micro-batches each:
    ratc.step.schedules.chunk_lead_ins) and after the Forwards of virtual stages p to
    kP + p - 1 (the chain through the other ranks), whichever is later. (The units' release,
    the last micro-batch's Backwards back to back, stays as it is: measured against the
    system VM, moving it earlier by the cool-down's other Backwards overshoots.)"""
    P, v = c.P, c.v
    U = view.u_fwd.shape[-1] // v
    u_fwd = c.b[:, :, None] * view.u_fwd
    f_chunk = u_fwd.reshape(*u_fwd.shape[:2], v, U).sum(axis=3)     # [C, P, v]
    start = np.cumsum(fwd, axis=1) - fwd                              # [C, P*v] the chain's reach
    stages = np.arange(v)[None, :] * P + np.arange(P)[:, None]        # [P, v] chunk k of rank p
    reach = start[:, stages] - start[:, :P, None]
    lower = np.tril(np.ones((v, v)), -1)                              # the chunks before k, one micro-batch each
    late = np.zeros(f_chunk.shape)
    for m in np.unique(c.M[:, 0]):
        rows = c.M[:, 0] == m
        before = np.array(chunk_lead_ins(P, v, int(m)), dtype=float)    # [P, v, v]
        own = np.einsum("cpj,pkj->cpk", f_chunk[rows], before)
        late[rows] = np.maximum(own, reach[rows]) - f_chunk[rows] @ lower.T
    return np.repeat(late, U, axis=2)


def _per_rank_units(sc: StageCosts, v: int, u_rec, sched: str = "1f1b") -> tuple:
    """(stage table, unit recovery) with each rank's units in one row, chunk 0's first: a
    rank's v chunks share its link and DDR engine, so their state chains run as one.

    An approximation of interleaved 1F1B's tail: the chain releases a rank's units as if the
    last micro-batch's Backwards ran back to back (chunk v-1's down to chunk 0's; the order
    puts other micro-batches' between chunks), and each unit is due a chunk 0's window (the
    next step's Forwards reach rank p after chunk 0 of the ranks before it) plus the
    Forwards of the units before it on the rank."""
    P = sc.P // v
    cols = rank_columns(P, v, sched)        # (ZBV: a rank's chunks lie in a V)

    def fold(a):
        """[..., P*v, U] -> [..., P, v*U]."""
        lead, U = a.shape[:-2], a.shape[-1]
        return np.swapaxes(a[..., cols, :].reshape(*lead, v, P, U), -3, -2).reshape(*lead, P, v * U)

    view = dataclasses.replace(sc, P=P, **{k: fold(getattr(sc, k)) for k in
                                           ("u_params", "u_trainable", "u_fwd", "u_bwd", "u_bwd_w", "u_tied")})
    return view, fold(u_rec)


def _ex(link):
    """A link whose per-candidate arrays broadcast over units."""
    return dataclasses.replace(link, latency=np.asarray(link.latency)[..., None],
                               bandwidth=np.asarray(link.bandwidth)[..., None], inline=np.asarray(link.inline)[..., None])


def _state_pipeline(sc, c, fwd, bwd, u_rec, dp_link, pp_link, ddr, recipe, late=0.0, window=None, inline=False):
    """GradSync -> UpdateShard -> PrefetchW per unit (Eq. 2-4) and the exposed tail; `late`
    [C, P, U] moves each unit's deadline later (interleaved: _chunk_deadlines); `window` [C, P]
    from a stage's last Backward to the next step's first Forward (default 1F1B's); `inline` [C, 1]
    the candidates whose syncs and prefetches run in the compute stream (their ZeRO >= 2
    reduce-scatter is the last micro-batch's, in its Backward already)."""
    D, Z, b, pref = c.D[:, :, None], c.Z[:, :, None], c.b[:, :, None], c.pref[:, 0]
    link = _ex(dp_link)
    # ZeRO-0 all-reduces gradients and updates every parameter locally; ZeRO >= 1 reduce-
    # scatters, updates a 1/D shard, and (ZeRO 1, 2) all-gathers the updated parameters. All
    # three concern trainable parameters only: a frozen one has no gradient and never changes.
    trained = sc.u_trainable
    real = trained > 0                 # zero padding and frozen units send nothing: no message latency
    # A tied parameter's synchronized gradient (shard) is summed over its copies before the
    # update, on the same link queue after the GradSync: the frontend ties the embedding and
    # the head only, on two stages when P > 1.
    cost = state_costs(D, Z, trained, sc.u_tied, min(sc.P, 2), link, _ex(pp_link), ddr, recipe)
    rs, upd, ag = cost.sync + cost.tie, cost.update, cost.prefetch
    inline = np.asarray(inline, dtype=bool)[..., None]
    rs = np.where(inline & reduces_per_micro_batch(Z), cost.tie, rs)
    u_fwd = b * sc.u_fwd
    # The last micro-batch's Backward of a unit, whose end releases its GradSync, with what
    # its recovery adds (checkpointing: the Recover before it; FSR: the co-run it hosts).
    u_bwd = b * sc.u_bwd + u_rec
    # Backward visits units last-to-first; unit j's sync is released when its backward ends,
    # and the syncs run on the link one at a time in that order. The last, unit 0's, ends
    # S_exp = max_j (sum_{k<=j} RS_k - sum_{k<j} B_k) after the stage's backward.
    released = -(np.cumsum(u_bwd, axis=2) - u_bwd)     # Backward(j) ends, relative to the stage's last
    buckets = _buckets(sc, c, c.b, u_rec, dp_link, recipe, whole=True, inline=inline[..., 0])
    if buckets is not None:      # ZeRO >= 2: ... each waiting for its bucket (bucket_chain)
        work, red, holds, before, work_rec = buckets
        ends = bucket_chain(before, work_rec, red, holds)[0]
        released = np.flip(ends - ends[..., -1:], axis=2)
    cum_rs = np.cumsum(rs, axis=2)
    sync_end = _fifo_ends(released, rs, cum_rs)
    s_exp = sync_end[:, :, 0]
    if window is None:
        drain = np.cumsum(bwd, axis=1) - bwd        # stages before p still running backward
        window = drain + first_reach(fwd)           # (the next step reaches stage p this much later)
    # Unit j's view is due when the next step's first Forward(j) starts, `due` after the
    # stage's last Backward; whatever ends later delays the next step by as much.
    due = window[:, :, None] + np.cumsum(u_fwd, axis=2) - u_fwd + late
    e_deadline, dl_comm, dl_upd = (in_stream_tail(released, rs, upd, ag, window, due, real, c.sched == "1f1b",
                                                  inline=inline)
                                   if recipe.update_in_stream
                                   else _deadline_tail(real, rs, ag, upd, released, sync_end, due, cum_rs))
    sum_rs, sum_upd, sum_ag = rs.sum(axis=2), upd.sum(axis=2), ag.sum(axis=2)

    # Bulk defers what DeepSpeed defers: the gradient all-reduce / reduce-scatter under ZeRO
    # 0/1; under ZeRO >= 2 each bucket is reduce-scattered as backward produces it (the last
    # micro-batch's too), so its GradSyncs overlap the backward as layer-wise ones do.
    tails = {BULK: _stepend(np.where(reduces_per_micro_batch(Z[:, :, 0]), s_exp, sum_rs), upd, ag, window),
             LAYERWISE: _stepend(s_exp, upd, ag, window),
             DEADLINE: (e_deadline, dl_comm, dl_upd)}
    # [C, 3, len(PREF_POLICIES)]: (E_comm, E_upd, E_pref) of the state chain under each policy
    by_pref = np.stack([np.stack(_worst_stage(*tails[i]), axis=1) for i in range(len(PREF_POLICIES))], axis=-1)
    chosen = np.take_along_axis(by_pref, pref.astype(int)[:, None, None], axis=2)[:, :, 0]
    e_comm, e_upd, e_pref = chosen.T
    return sum_rs, sum_upd, sum_ag, window, e_comm, e_upd, e_pref, by_pref


def _deadline_tail(real, rs, ag, upd, released, sync_end, due, cum_rs) -> tuple:
    """(exposed tail, its comm part, its update part) [C, P] of the deadline state chain."""
    # Deadline: updates and prefetches follow their syncs in release order (earliest deadline
    # first among the released), so every unit's prefetch but the first's shares the link
    # with the remaining syncs (which go first) while the backward drains: that busy period
    # ends at L = max_j (sum_{k<=j} (RS_k + AG_k [k != f]) - sum_{k<j} B_k). The first unit f,
    # released last, gathers after its update and after L. "First" and "next" count trained
    # units only: a frozen one has no chain, and its view is ready whenever it is due.
    trained_u = np.broadcast_to(real, rs.shape)
    units = np.arange(rs.shape[2])
    f = trained_u.argmax(axis=2)[:, :, None]                  # the first trained unit
    later_u = trained_u & (units > f)
    nxt = later_u.argmax(axis=2)[:, :, None]                   # the next one
    has_f, has_next = trained_u.any(axis=2), later_u.any(axis=2)

    def at(a, i, there, none):
        """a[..., i], or `none` where there is no such unit."""
        return np.where(there, np.take_along_axis(np.broadcast_to(a, rs.shape), i, axis=2)[:, :, 0], none)

    ag_f, due_f, due_next = at(ag, f, has_f, 0.0), at(due, f, has_f, np.inf), at(due, nxt, has_next, np.inf)
    cum_ag = np.cumsum(ag, axis=2)
    busy = (cum_rs + cum_ag + released).max(axis=2) - ag_f
    # Each update runs on the DDR engine once its sync is done, one at a time, earliest
    # deadline first among the released (the update-prefetch pass's order): the first unit's,
    # released last, may find the engine busy with one released before it.
    upd_end = _updates(sync_end, upd, due - ag, real) + upd
    upd_end_f = at(upd_end, f, has_f, -np.inf)
    first_end = np.maximum(upd_end_f, busy) + ag_f
    # another unit's view is gathered after its own update at the earliest
    others = np.where(later_u, upd_end + ag - due, -np.inf).max(axis=2)
    e_deadline = np.maximum.reduce([np.zeros_like(busy), first_end - due_f, busy - due_next, others])
    dl_comm = np.maximum(0.0, sync_end[:, :, 0] - due_f)
    return e_deadline, dl_comm, np.maximum(0.0, upd_end_f - due_f) - dl_comm


# Layer-wise and bulk run UpdateShard and PrefetchW at the step end (update-prefetch
# bulk): the updates one after another in forward order from the last sync on, and each
# prefetch after its unit's update and the previous prefetch, i.e.
# P_j = max_{k<=j}(U_k + sum_{i=k..j} AG_i). As one step-end phase (optimizer.step()
# before the next iteration) they are all due when the stage's next step starts, at the
# window: only the deadline chain hands a unit's view to its next Forward on its own.
def _stepend(sync_end, upd, ag, window):
    """(exposed tail, its comm part, its update part) [C, P] of a step-end update-prefetch."""
    cum_ag = np.cumsum(ag, axis=2)
    u_end = sync_end[:, :, None] + np.cumsum(upd, axis=2)
    p_end = cum_ag + np.maximum.accumulate(u_end - (cum_ag - ag), axis=2)
    total = np.maximum(0.0, p_end.max(axis=2) - window)
    comm = np.maximum(0.0, sync_end - window)
    return total, comm, np.maximum(0.0, np.maximum(0.0, u_end.max(axis=2) - window) - comm)


def _fifo_ends(release, dur, cum=None):
    """[C, P, U] ends of jobs served one at a time in release order, the last unit's first
    (releases do not decrease towards the first unit): end_j = max(release_j, end_{j+1}) +
    dur_j, i.e. max_{i >= j} (release_i + sum_{k=j..i} dur_k). `cum`: dur's cumsum, if known."""
    cum = np.cumsum(dur, axis=2) if cum is None else cum
    latest = np.flip(np.maximum.accumulate(np.flip(release + cum, axis=2), axis=2), axis=2)
    return latest - (cum - dur)


def _updates(release, dur, deadline, real):
    """[C, P, U] start of each update on the DDR engine (see _edf). The updates are released
    last unit first; while none is released before the one ahead of it starts, EDF serves
    them in that order, so only rows where two wait at once need the event loop."""
    shape = np.broadcast_shapes(release.shape, dur.shape, np.shape(real))
    real = np.broadcast_to(real, shape)
    release = np.where(real, np.broadcast_to(release, shape), -np.inf)
    dur = np.where(real, np.broadcast_to(dur, shape), 0.0)
    start = _fifo_ends(release, dur) - dur
    # the release of the next real job (the nearest real unit below): releases do not
    # decrease towards the first unit, so it is the smallest of those below
    below = np.minimum.accumulate(np.where(real, release, np.inf), axis=2)
    below = np.concatenate([np.full(shape[:2] + (1,), np.inf), below[:, :, :-1]], axis=2)
    contended = (real & (below <= start)).any(axis=2)
    if contended.any():
        rows = np.nonzero(contended)
        start[rows] = _edf(release[rows][None], dur[rows][None],
                           np.broadcast_to(deadline, shape)[rows][None], real[rows][None])[0]
    return start


def _edf(release, dur, deadline, real):
    """[C, P, U] start times of one non-preemptive server running each real job once it is
    released, earliest deadline first among the released (ties: the lower unit), idle only
    when nothing is: ratc.lifecycle.placement's _serve, vectorized over rows."""
    shape = release.shape
    release, dur, deadline = (np.broadcast_to(x, shape) for x in (release, dur, deadline))
    pending = np.broadcast_to(real, shape).copy()
    start = np.zeros(shape)
    t = np.full(shape[:2], -np.inf)
    for _ in range(shape[2]):
        if not pending.any():
            break
        # idle until the next release when nothing is waiting (rows done: t = inf, no pick)
        t = np.maximum(t, np.where(pending, release, np.inf).min(axis=2))
        ready = pending & (release <= t[..., None])
        pick = np.where(ready, deadline, np.inf).argmin(axis=2)[..., None]
        picked = ready.any(axis=2)[..., None] & (np.arange(shape[2]) == pick)
        start = np.where(picked, t[..., None], start)
        t = t + np.where(picked, dur, 0.0).sum(axis=2)
        pending &= ~picked
    return start


def _worst_stage(total, comm, upd):
    """(E_comm, E_upd, E_pref) [C] of the stage with the largest exposed state tail."""
    worst = total.argmax(axis=1)[:, None]
    pick = lambda a: np.take_along_axis(a, worst, axis=1)[:, 0]  # noqa: E731
    e_total, e_comm = pick(total), pick(comm)
    e_upd = np.minimum(pick(upd), e_total - e_comm)
    return e_comm, e_upd, np.maximum(0.0, e_total - e_comm - e_upd)

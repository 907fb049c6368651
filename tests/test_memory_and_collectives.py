"""Planner memory and timing, the system VM's ring collectives and memory, against hand-computed oracles.

Each test pins a behaviour that a hand mutation of ratc/planner/memory.py, ratc/planner/timing.py,
ratc/vm/system/collectives.py or ratc/vm/system/memory.py changed without any other test noticing.
The expected values come from the ZeRO paper's bytes per parameter, the ring algorithm's
alpha-beta cost, Megatron's 1F1B order simulated here, or the moments docs/planner.md and the
docstrings describe, worked out by hand on tiny synthetic stages (numbers in the comments).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.planner.config import CandidateBatch
from ratc.step.config import ACT_POLICIES
from ratc.planner.memory import stage_memory
from ratc.planner.stages import StageCosts
from ratc.planner.timing import makespan, one_f_one_b, step_time
from ratc.vm.system.collectives import ring
from ratc.vm.system.engine import simulate
from ratc.vm.system.memory import OutOfMemory
from ratc.vm.system.task_graph import CycleLink, TaskGraph, TaskGraphError


def costs(stages, **per_stage) -> StageCosts:
    """Synthetic StageCosts: `stages` lists each stage's units as (params, is_decoder) in forward
    order; every per-stage field is 0 unless given (a scalar or a per-stage list)."""
    P, U = len(stages), max(len(s) for s in stages)
    u_params, u_recovered = np.zeros((P, U)), np.zeros((P, U))
    for p, units in enumerate(stages):
        for j, (n, dec) in enumerate(units):
            u_params[p, j], u_recovered[p, j] = n, float(dec)
    fields = {}
    for f in dataclasses.fields(StageCosts):
        if f.name in ("P", "T", "balance", "ranges", "names"):
            continue
        fields[f.name] = np.zeros((P, U)) if f.name.startswith("u_") else np.zeros(P)
    fields.update(u_params=u_params, u_recovered=u_recovered, n_dec=u_recovered.sum(axis=1), params=u_params.sum(axis=1))
    # every decoder layer has a backward and is recovered whole (nothing behind frozen inputs,
    # no selective layer: its Recover re-runs the layer, TP all-reduces and scratch included)
    last = np.array([bool(units[-1][1]) for units in stages])
    fields.update(n_dec_bwd=u_recovered.sum(axis=1), n_rec=u_recovered.sum(axis=1), n_rec_tp=u_recovered.sum(axis=1),
                  last_rec=last, last_rec_tp=last, u_whole=u_recovered.copy())
    if "trainable" in fields:             # every parameter trainable (no frozen ones)
        fields.update(trainable=u_params.sum(axis=1), u_trainable=u_params.copy())
    for k, v in per_stage.items():
        fields[k] = np.broadcast_to(np.asarray(v, dtype=float), (P,)).copy()
    if "guest_workspace" not in per_stage:      # a whole-layer Recover's scratch is its layer's
        fields["guest_workspace"] = fields["rec_workspace"].copy()
    return StageCosts(P=P, T=1, balance="time", ranges=tuple((0, len(s)) for s in stages),
                      names=tuple(tuple(f"u{j}" for j in range(len(s))) for s in stages), **fields)


def batch(P, act, Z=0, D=1, M=4, b=1) -> CandidateBatch:
    """One candidate (T = 1, deadline policy) as a CandidateBatch."""
    def col(x):
        return np.array([[float(x)]])
    return CandidateBatch(P=P, T=col(1), D=col(D), Z=col(Z), b=col(b), M=col(M), act=col(ACT_POLICIES.index(act)),
                          pref=col(2))


# Three stages of one decoder layer each (the embedding before stage 0's, the head after stage
# 2's); per layer a 1000 B checkpoint, a 100 B recovery buffer, 5 B of FSR stream headroom,
# 7 B decoder scratch (also the largest op output), 3 B edge scratch; no parameters.
THREE = [[(0, False), (0, True)], [(0, True)], [(0, True), (0, False)]]
ACTS = {"ckpt": 1000, "rec_buf": 100, "stream_buf": 5, "rec_workspace": 7, "workspace": 7, "edge_workspace": [3, 0, 3]}


def test_fsr_stage_peaks_hand_computed_from_the_moments():
    """FSR peaks per stage (P=3, M=4) worked by hand from docs/planner.md's moments: N_act checkpoints + the larger moment."""
    mem = stage_memory(costs(THREE, **ACTS), batch(3, "fsr"), 0.0)
    # N_act = min(P - p, M) = 3, 2, 1 checkpoints of 1000 B.
    # stage 0: its layer's Backward hosts no Recover (the unit below is the embedding): 100 + 7;
    #   the embedding's Backward hosts the next micro-batch's first Recover: 100 + 7 + 3 = 110;
    #   a Forward hosting the next Backward's first Recover: 100 + 7 (own scratch) + 7 = 114 -> 114.
    # stage 1 (middle): its layer's Backward hosts the next micro-batch's first Recover in the
    #   cool-down: 100 + 5 headroom + 2 x 7 scratch = 119 (Forward moment 114).
    # stage 2 (last): no Forward hosts; the head's Backward hosts the layer's Recover: 100 + 7 + 3
    #   = 110 > the layer's own Backward, 100 + 7.
    assert mem.total[0].tolist() == [3000 + 114, 2000 + 119, 1000 + 110]


def test_ckpt_stage_peaks_hand_computed():
    """Checkpointing: N_act checkpoints + one recovery buffer + decoder scratch, never an edge peak (docs/planner.md)."""
    mem = stage_memory(costs(THREE, **ACTS), batch(3, "ckpt"), 0.0)
    assert mem.total[0].tolist() == [3000 + 107, 2000 + 107, 1000 + 107]
    assert not mem.at_edge.any()


# ZeRO-3 (fp16 views and buckets, 2 B per parameter each), no activations, 1 B decoder scratch
# (the largest op output too), no edge scratch. Stage 0: embedding 30, two layers of 10; stage 1:
# a layer of 10 and the head, 30.
Z3_TWO = [[(30, False), (10, True), (10, True)], [(10, True), (30, False)]]


@pytest.mark.parametrize("M,stage0", [(2, 161), (4, 200)])
def test_zero3_embedding_stage_moments_hand_computed(M, stage0):
    """ZeRO-3 stage buffers at M = P and M > P, by hand from _zero3_views_and_buckets' docstring; state = 16/D B per parameter (ZeRO paper)."""
    mem = stage_memory(costs(Z3_TWO, workspace=1, rec_workspace=1), batch(2, "full", Z=3, D=2, M=M), 0.0)
    # stage 0, in parameters (x 2 B):
    #   Backward(layer 1): views 10 + 30 (j - 1), buckets 10 + 10 -> 120 B (+1 scratch);
    #   embedding's Backward hosting nothing, its next task B(next) gathering the stage's last
    #   layer: views 30 + 10, buckets 30 + 10 -> 160 B; in the steady state (M > P only) the
    #   next Forward gathers the embedding again: views 30 + 30, buckets 40 -> 200 B;
    #   Forward(embedding): views 30 + 10, the previous backward's last two buckets 30 + 10
    #   -> 160 B (+1 scratch).
    # M = 2 = P: no steady state, the Forward's 161 is the peak; M = 4: the embedding's 200.
    assert mem.state[0].tolist() == [50 * 16 / 2, 40 * 16 / 2]
    # stage 1: layer's Backward: views 10 + 30 (the next task is the head, the next micro-
    # batch's first unit's Forward or the last unit's Backward, the larger), buckets 10 + 30 -> 160 B (+1)
    assert mem.buffers[0].tolist() == [stage0, 161]


def test_zero3_first_decoder_unit_gathers_the_larger_next_view():
    """ZeRO-3 Backward of a stage's first decoder unit holds max(first, last) as its next view (docstring), hand-computed."""
    # middle stage of decoder layers 10, 12, 1, 20 (forward order):
    #   Backward(0): views 10 + max(10, 20), buckets 10 + 12 -> 2 x 52 = 104 B, the largest
    #   (Backward(3): 20 + 1, 20 + 10 -> 102 B; Forward(0): 10 + 12, 10 + 12 -> 88 B)
    sc = costs([[(1, False), (1, True)], [(10, True), (12, True), (1, True), (20, True)], [(1, True), (1, False)]],
               workspace=1, rec_workspace=1)
    mem = stage_memory(sc, batch(3, "full", Z=3), 0.0)
    assert mem.buffers[0, 1] == 104 + 1


def test_zero3_recovered_layer_has_two_views():
    """ZeRO-3 + checkpointing: a lone recovered layer's param_view is its Recover's and its Backward's views, 2 x 2 B x params (docs/planner.md)."""
    sc = costs([[(1, False), (1, True)], [(10, True)], [(1, True), (1, False)]], view_pair=[2, 10, 2],
               max_rec_params=[1, 10, 1])
    mem = stage_memory(sc, batch(3, "ckpt", Z=3), 0.0)
    # Backward: views 10 + 10, buckets 10 + 10 (its own and the previous micro-batch's) -> 80 B
    assert (mem.param_view[0, 1], mem.grad_bucket[0, 1]) == (40, 40)


def test_zero3_fsr_hosting_forward_holds_three_views():
    """ZeRO-3 + FSR: a Forward hosting the stage's first Recover holds its own, that layer's and the next one's views (docstring), hand-computed."""
    # middle stage, layers 10 and 20: Forward(1) hosting Recover(layer 1): views 20 + 2 x 20
    # (bounded by the largest layer), the previous backward's two buckets 10 + 20 -> 180 B,
    # above every Backward (views j, j - 1, j - 2: 50 params; buckets 30 -> 160 B); scratch 1 + 1.
    sc = costs([[(1, False), (1, True)], [(10, True), (20, True)], [(1, True), (1, False)]], workspace=1,
               rec_workspace=1)
    mem = stage_memory(sc, batch(3, "fsr", Z=3), 0.0)
    assert mem.buffers[0, 1] == 180 + 2


# --- timing -----------------------------------------------------------------------------


def one_f_one_b_sim(F, B, M, host_f, host_c, send=0.0):
    """Brute force: each stage runs Megatron's non-interleaved 1F1B order (warm-up min(P-1-p, M)
    Forwards, then Forward/Backward pairs, then the rest); a Forward issued right before a
    Backward takes host_f[p] longer, a Backward issued right before another Backward host_c[p];
    a boundary transfer takes `send` after its sender's task, off the sender's stream."""
    P = len(F)
    orders = []
    for p in range(P):
        warm = min(P - 1 - p, M)
        seq = [("F", m) for m in range(warm)]
        nf = warm
        for nb in range(M):
            if nf < M:
                seq.append(("F", nf))
                nf += 1
            seq.append(("B", nb))
        orders.append(seq)
    end, clock, pos = {}, [0.0] * P, [0] * P
    while any(pos[p] < len(orders[p]) for p in range(P)):
        moved = False
        for p in range(P):
            while pos[p] < len(orders[p]):
                kind, m = orders[p][pos[p]]
                dep = (p - 1, "F", m) if kind == "F" else (p + 1, "B", m)
                if kind == "F" and p == 0:
                    ready = 0.0
                elif kind == "B" and p == P - 1:
                    ready = end[(p, "F", m)]
                elif dep in end:
                    ready = end[dep] + send
                else:
                    break
                nxt = orders[p][pos[p] + 1][0] if pos[p] + 1 < len(orders[p]) else None
                t = F[p] + (host_f[p] if nxt == "B" else 0.0) if kind == "F" else B[p] + (host_c[p] if nxt == "B" else 0.0)
                clock[p] = max(clock[p], ready) + t
                end[(p, kind, m)] = clock[p]
                pos[p] += 1
                moved = True
        assert moved
    return max(clock)


@pytest.mark.parametrize("seed", range(4))
def test_makespan_with_cooldown_hosts_on_unbalanced_stages(seed):
    """makespan (FSR host_f / host_c) equals a brute-force 1F1B event simulation on strongly unbalanced stages (M around P)."""
    rng = np.random.default_rng(seed)
    for _ in range(40):
        P = int(rng.integers(2, 5))
        M = int(rng.integers(1, 2 * P + 2))
        F, B = rng.uniform(0.1, 3, P), rng.uniform(0.1, 3, P) * rng.choice([1, 10], P)
        hf, hc = rng.uniform(0, 2, P), rng.uniform(0, 5, P)
        hf[-1] = hc[-1] = 0.0                        # the last stage's Forwards/Backwards host nothing
        got = makespan((F + B + hf)[None], 0.0, np.array([[M]]), fwd=F[None], host_f=hf[None], host_c=hc[None])[0]
        assert got == pytest.approx(one_f_one_b_sim(F, B, M, hf, hc), rel=1e-12), (P, M, F, B, hf, hc)


def toy_platform(bw=1e9, lat=1e-5, ddr=1e12):
    """One link class everywhere (8 clusters per node, all groups here intra-node)."""
    net = SimpleNamespace(clusters_per_node=8, intra_node_bandwidth=bw, intra_node_latency=lat,
                          inter_node_bandwidth=bw / 10, inter_node_latency=10 * lat)
    return SimpleNamespace(cluster=SimpleNamespace(ddr_bandwidth=ddr), network=net)


def ring_rs(n, nbytes, bw, lat):
    """Ring reduce-scatter / all-gather (Thakur et al. 2005): (n-1) steps of nbytes/n."""
    return (n - 1) / n * nbytes / bw + (n - 1) * lat


SEQ, HID, ELEM = 8, 4, 2                      # one sequence's hidden stream: 64 B


def test_recover_reruns_the_forwards_tp_allreduces():
    """Recover R_p = b x re-run forward + Megatron's 2 TP all-reduces per decoder layer (2 x ring RS each)."""
    sc = costs([[(0, False), (0, True), (0, True)], [(0, True), (0, False)]], rec=[3.0, 5.0])
    bw, lat, b, T = 1e9, 1e-5, 2, 4
    st = step_time(sc, dataclasses.replace(batch(2, "ckpt", b=b), T=np.array([[float(T)]])), toy_platform(bw, lat),
                   SEQ, HID, ELEM)
    ar = 2 * ring_rs(T, b * SEQ * HID * ELEM, bw, lat)
    assert st.rec[0].tolist() == pytest.approx([b * 3.0 + 2 * 2 * ar, b * 5.0 + 2 * 1 * ar], rel=1e-12)


def test_middle_stage_link_carries_two_boundary_messages():
    """A middle stage sends an activation and a gradient per micro-batch: link_busy = 2 (latency + bytes / bandwidth)."""
    sc = costs([[(0, False), (0, True)], [(0, True)], [(0, True), (0, False)]])
    bw, lat, b = 1e9, 1e-5, 3
    st = step_time(sc, batch(3, "full", b=b), toy_platform(bw, lat), SEQ, HID, ELEM)
    assert st.link_busy[0, 1] == pytest.approx(2 * (lat + b * SEQ * HID * ELEM / bw), rel=1e-12)
    # ... the first and the last stage one each (the activation out, the gradient out)
    one = lat + b * SEQ * HID * ELEM / bw
    assert st.link_busy[0, 0] == pytest.approx(one, rel=1e-12) and st.link_busy[0, 2] == pytest.approx(one, rel=1e-12)


@pytest.mark.parametrize("Z", [0, 1, 2, 3])
def test_per_micro_batch_gradient_reduce_scatter_only_from_zero2(Z):
    """ZeRO >= 2 reduce-scatters each micro-batch's fp16 gradients (ring formula on the link); ZeRO 0/1 accumulate locally."""
    phi, D, bw, lat = 1e6, 4, 1e9, 1e-5
    sc = costs([[(phi, True)]])
    st = step_time(sc, batch(1, "full", Z=Z, D=D), toy_platform(bw, lat), SEQ, HID, ELEM)
    rs = ring_rs(D, 2 * phi, bw, lat) if Z >= 2 else 0.0
    gathers = 2 * ring_rs(D, 2 * phi, bw, lat) if Z == 3 else 0.0     # ZeRO-3: forward's and backward's view
    assert st.link_busy[0, 0] == pytest.approx(rs + gathers, rel=1e-12)


def test_link_traffic_also_costs_ddr_read_and_write():
    """MT-3000 links move data DDR to DDR: a ring's sent and received bytes (2 (D-1)/D g) at DDR bandwidth bound the slot."""
    phi, D, M, bw = 1e6, 2, 3, 1e9
    sc = costs([[(phi, True)]])
    st = step_time(sc, batch(1, "full", Z=2, D=D, M=M), toy_platform(bw, 0.0, ddr=bw), SEQ, HID, ELEM)
    g = 2 * phi
    # P = 1: M slots of max(compute 0, link (D-1)/D g / bw, DDR 2 (D-1)/D g / ddr)
    assert st.t_1f1b[0] == 0.0
    assert st.e_link[0] == pytest.approx(M * 2 * (D - 1) / D * g / bw, rel=1e-12)


def test_state_window_is_drain_plus_next_warmup():
    """window_p = sum_{q<p} (B_q + F_q): stages before p finish their Backwards, then the next step's Forward reaches p (hand sum)."""
    sc = costs([[(0, False), (0, True)], [(0, True)], [(0, True), (0, False)]], fwd=[1.0, 2.0, 3.0],
               bwd=[4.0, 5.0, 6.0])
    bw, lat = 1e9, 1e-5
    st = step_time(sc, batch(3, "full"), toy_platform(bw, lat), SEQ, HID, ELEM)
    s = lat + SEQ * HID * ELEM / bw                  # one boundary transfer, in the sender's task
    F = [1 + s, 2 + s, 3]                            # Forwards send their activation (not the last stage)
    B = [4, 5 + s, 6 + s]                            # Backwards send their gradient (not the first stage)
    assert st.window[0].tolist() == pytest.approx([0.0, B[0] + F[0], B[0] + B[1] + F[0] + F[1]], rel=1e-12)


def test_link_bound_alone_sets_the_slot():
    """With free compute and DDR, M slots each carrying one gradient ring reduce-scatter: e_link = M (D-1)/D g / bw."""
    phi, D, M, bw = 1e6, 4, 5, 1e9
    st = step_time(costs([[(phi, True)]]), batch(1, "full", Z=2, D=D, M=M), toy_platform(bw, 0.0, ddr=1e30),
                   SEQ, HID, ELEM)
    assert st.e_link[0] == pytest.approx(M * (D - 1) / D * 2 * phi / bw, rel=1e-12)


def test_state_tail_is_the_worst_stages_whole_tail():
    """Bulk ZeRO-0: the exposed state tail is the worst stage's max(0, sum RS_p + sum U_p - window_p), split into its own comm/update (hand-computed)."""
    # 1 s latency, 1 GB/s links, Adam's 28 B per parameter at 0.28 GB/s. Stage 0: one unit of
    # 1e8 parameters: all-reduce (D = 2) 2 x (1 + 0.1) = 2.2 s, update 10 s, window 0 -> tail
    # 12.2 s. Stage 1: four units of one parameter: 4 x 2 x 1 s = 8 s of latency, update ~0,
    # window = stage 0's Forward, its ~1 s activation send -> tail ~7 s, the larger comm part.
    phi, bw, lat, ddr = 1e8, 1e9, 1.0, 2.8e8
    sc = costs([[(phi, True)], [(1.0, True)] * 4])
    c = dataclasses.replace(batch(2, "full", Z=0, D=2, M=1), pref=np.array([[0.0]]))
    st = step_time(sc, c, toy_platform(bw, lat, ddr=ddr), SEQ, HID, ELEM)
    assert st.window[0].tolist() == pytest.approx([0.0, lat + SEQ * HID * ELEM / bw], rel=1e-12)
    sync0, upd0 = 2 * ring_rs(2, 2 * phi, bw, lat), 28 * phi / ddr
    # e_comm also holds e_link (the slot's link / DDR bound), which the state tail does not include
    assert (st.e_comm[0] - st.e_link[0], st.e_upd[0], st.e_pref[0]) == pytest.approx((sync0, upd0, 0.0), rel=1e-9)


def test_dp_and_pp_groups_span_megatron_rank_order():
    """Megatron rank order (TP innermost, then DP, then PP): a DP group spans D*T clusters, a stage boundary D*T+1 (inter-node past 8)."""
    phi, bw, lat = 1e6, 1e9, 1e-5            # intra-node; inter-node: bw / 10, 10 x lat
    sc = costs([[(phi, True)], [(phi, True)]])
    c = dataclasses.replace(batch(2, "full", Z=0, D=4, M=1, b=1), T=np.array([[2.0]]), pref=np.array([[0.0]]))
    st = step_time(sc, c, toy_platform(bw, lat), SEQ, HID, ELEM)
    # DP group: 4 ranks 2 apart -> 8 clusters, one node; ZeRO-0 all-reduce of 2 B / parameter
    assert st.sync[0, 0] == pytest.approx(2 * ring_rs(4, 2 * phi, bw, lat), rel=1e-12)
    # stage boundary: rank r and r + 8 -> 9 clusters, two nodes
    assert st.p2p[0, 0] == pytest.approx(10 * lat + SEQ * HID * ELEM / (bw / 10), rel=1e-12)
    c = dataclasses.replace(c, D=np.array([[8.0]]))
    st = step_time(sc, c, toy_platform(bw, lat), SEQ, HID, ELEM)
    # D * T = 16 clusters: the DP ring crosses nodes
    assert st.sync[0, 0] == pytest.approx(2 * ring_rs(8, 2 * phi, bw / 10, 10 * lat), rel=1e-12)


def test_one_f_one_b_takes_sends_off_the_compute_stream():
    """one_f_one_b with `send`: equals the brute-force 1F1B simulation with sends on the link (hand case: P=2, M=1 -> 5.0)."""
    # F0 [0,1], send, F1 [1.5,2.5], B1 [2.5,3.5], send, B0 [4,5]
    assert one_f_one_b(np.array([[1.5, 1.0]]), np.array([[1.0, 1.5]]), np.array([[1]]), send=np.array([[0.5]]))[0] == 5.0
    rng = np.random.default_rng(7)
    for _ in range(40):
        P, M, s = int(rng.integers(1, 5)), int(rng.integers(1, 9)), float(rng.uniform(0, 1))
        F, B = rng.uniform(0.1, 3, P), rng.uniform(0.1, 3, P)
        stage = np.arange(P)
        fwd, bwd = F + s * (stage < P - 1), B + s * (stage > 0)      # tasks with their sends
        got = one_f_one_b(fwd[None], bwd[None], np.array([[M]]), send=np.array([[s]]))[0]
        assert got == pytest.approx(one_f_one_b_sim(F, B, M, np.zeros(P), np.zeros(P), send=s), rel=1e-12)


def test_checkpointing_recovers_only_decoder_layers_in_the_sync_clock():
    """Layer-wise ZeRO-2 sync tail S = max_j (sum_{k<=j} RS_k - sum_{k<j} B_k): the embedding's Backward has no Recover (hand-computed)."""
    # P = 1: the embedding (1e9 params, Backward 0.5 s, Forward 0.3 s) and a decoder layer (5e9).
    # Reduce-scatter over D = 2 at 1 GB/s, no latency: 1 s and 5 s. The decoder's sync is released
    # first (Backward runs last to first), the embedding's 0.5 s later: S = 1 + 5 - 0.5 = 5.5 s.
    sc = costs([[(1e9, False), (5e9, True)]])
    sc = dataclasses.replace(sc, u_fwd=np.array([[0.3, 0.0]]), u_bwd=np.array([[0.5, 0.0]]), fwd=np.array([0.3]),
                             bwd=np.array([0.5]))
    c = dataclasses.replace(batch(1, "ckpt", Z=2, D=2, M=1), pref=np.array([[1.0]]))
    st = step_time(sc, c, toy_platform(1e9, 0.0, ddr=1e30), SEQ, HID, ELEM)
    assert st.e_comm[0] - st.e_link[0] == pytest.approx(5.5, rel=1e-9)


# --- bugs this audit found (fixed) -------------------------------------------------------


def test_fsr_is_never_faster_than_full_save():
    """A plan with FSR recovery cannot step faster than the same plan saving every activation (recovery only adds work)."""
    F, B, co = np.array([0.717, 0.82, 0.759]), np.array([1.427, 1.781, 1.789]), np.array([0.274, 0.237, 0.0])
    sc = costs([[(1e6, True)] * 2, [(1e6, True)] * 2, [(1e6, True)]], fwd=F, bwd=B, rec=F, co_f=co, co_c=co)
    plat = toy_platform(1e6, 0.0, ddr=1e12)      # slow links: the per-micro-batch reduce-scatter binds the slot
    full, fsr = (step_time(sc, batch(3, act, Z=2, D=4, M=6), plat, SEQ, HID, ELEM) for act in ("full", "fsr"))
    # (it was: full 29.097 s, fsr 28.586 s, e_rec = -0.511 s)
    assert fsr.e_rec[0] >= 0.0
    assert fsr.t_step[0] >= full.t_step[0]


@settings(max_examples=60, deadline=None)
@given(P=st.integers(1, 4), M=st.integers(1, 11), D=st.sampled_from([1, 2, 4]), Z=st.integers(0, 3),
       seed=st.integers(0, 2 ** 32 - 1), log_bw=st.floats(5, 8), log_ddr=st.floats(6, 12))
def test_recovery_never_prices_a_step_below_full_save(P, M, D, Z, seed, log_bw, log_ddr):
    """Property: whatever binds the slot (compute, DDR, link), checkpointing and FSR only add work to full-save's step."""
    rng = np.random.default_rng(seed)
    co = rng.uniform(0, 0.5, P)
    co[-1] = 0.0                                   # the last stage hosts no Forward-side recovery
    sc = costs([[(1e6, True)] * 2] * P, fwd=rng.uniform(0.2, 2, P), bwd=rng.uniform(0.4, 4, P),
               rec=rng.uniform(0.2, 2, P), co_f=co, co_c=co, co_b=rng.uniform(0, 0.3, P))
    plat = toy_platform(10 ** log_bw, 0.0, ddr=10 ** log_ddr)
    full, ckpt, fsr = (step_time(sc, batch(P, act, Z=Z, D=D, M=M), plat, SEQ, HID, ELEM) for act in ("full", "ckpt", "fsr"))
    for st_ in (ckpt, fsr):
        assert st_.e_rec[0] >= -1e-9 and st_.t_step[0] >= full.t_step[0] - 1e-9


def test_link_ddr_traffic_counts_bytes_not_latency():
    """DDR time of communication is 2 x bytes moved / DDR bandwidth: a latency-only message moves (almost) no bytes."""
    D, M, bw, lat = 2, 3, 1e9, 1.0
    st = step_time(costs([[(1.0, True)]]), batch(1, "full", Z=2, D=D, M=M), toy_platform(bw, lat, ddr=bw), SEQ, HID,
                   ELEM)
    # one reduce-scatter of 2 B per micro-batch: link (D-1) x (lat + 1 B / bw) ~ 1 s; DDR 2 x 1 B / ddr ~ 0
    # -> the slot is the link's, M x 1 s (the DDR bound counted 2 x 1 s x 1 GB/s of phantom bytes: 6 s)
    assert st.e_link[0] == pytest.approx(M * (D - 1) * (lat + 1.0 / bw), rel=1e-6)


# --- system VM: explicit ring collectives, hand-timed --------------------------------------


def test_explicit_ring_step_waits_for_the_previous_ranks_chunk():
    """Explicit ring reduce-scatter (D=3, 10-cycle chunks), rank 0's input late (100): step k of rank r forwards what r-1 sent in step k-1 (hand-timed)."""
    prog = TaskGraph(stages=1, replicas=3, symmetric=False)
    late = prog.add("late", "forward", 0, ("compute",), 100, replica=0)
    done = ring(prog, "reduce_scatter", 0, 30, CycleLink(0, 1.0), [(late,), (), ()], "RS")
    tl = simulate(prog)
    # step 0: r0 [100,110), r1 [0,10), r2 [0,10); step 1: r1 forwards r0's chunk, [110,120).
    # Rank 2's result is the chunk r0 -> r1 -> r2: complete at 120.
    ends = [tl.end[d[0]] for d in done]
    assert ends[2] == 120 and tl.makespan == 120


def test_explicit_ring_step_holds_the_receivers_port():
    """Explicit ring: rank r's step uses its own transmit port and rank r+1's receive port (a busy rx1 delays rank 0's chunk, hand-timed)."""
    prog = TaskGraph(stages=1, replicas=2, symmetric=False)
    prog.add("X", "send", 0, ((0, 1, "rx"),), 50, replica=1)          # rank 1's receive port busy [0, 50)
    deps = [(prog.add("d", "forward", 0, ("compute",), 1, replica=r, template=1 if r else -1),) for r in range(2)]
    done = ring(prog, "reduce_scatter", 0, 20, CycleLink(0, 1.0), deps, "RS")
    tl = simulate(prog)
    # rank 0 -> 1 waits for rx1: [50, 60); rank 1 -> 0: [1, 11)
    assert [tl.end[d[0]] for d in done] == [11, 60]


def test_explicit_ring_result_waits_for_the_ranks_own_input():
    """Every rank's reduce-scatter result sums rank 0's contribution: none can be complete before rank 0's input (cycle 100)."""
    prog = TaskGraph(stages=1, replicas=3, symmetric=False)
    late = prog.add("late", "forward", 0, ("compute",), 100, replica=0)
    done = ring(prog, "reduce_scatter", 0, 30, CycleLink(0, 1.0), [(late,), (), ()], "RS")
    tl = simulate(prog)
    # (ranks 0 and 1 were "complete" at 20: rank 0's step 1 forwarded rank 2's chunk [10, 20)
    # without adding its own, late, contribution, before its own step 0 [100, 110))
    assert min(max(tl.end[t] for t in d) for d in done) >= 100


# --- system VM: memory accounting, hand-timed -------------------------------------------------


def two_readers(budget=None):
    """x (100 B) made by A [0,1), read by B [1,2) and C [1,11); D [2,3) makes y (50 B) while C still reads x."""
    prog = TaskGraph(stages=1, replicas=1, memory_budget=budget)
    a = prog.add("A", "forward", 0, ("compute",), 1, allocs=(("x", 100),))
    b = prog.add("B", "forward", 0, ("compute",), 1, deps=(a,), frees=("x",))
    prog.add("C", "send", 0, ("tx",), 10, deps=(a,), frees=("x",))
    prog.add("D", "forward", 0, ("compute",), 1, deps=(b,), allocs=(("y", 50),))
    return prog


def test_value_with_several_readers_lives_until_the_last_ends():
    """MemoryTracker: a value in several tasks' frees is released when the LAST reader ends (its docstring): peak 150 B at cycle 2."""
    tl = simulate(two_readers())
    assert tl.memory.stage_peaks() == [150]
    assert tl.memory.peak_time == [2]


def test_budget_is_exceeded_only_above_it():
    """OutOfMemory means live bytes > budget: a step whose static values fill the budget exactly runs (hand example)."""
    prog = two_readers(budget=250)
    prog.static[(0, 0)] = (("weights", 100),)
    assert simulate(prog).memory.stage_peaks() == [250]
    prog = TaskGraph(stages=1, replicas=1, memory_budget=100)
    prog.static[(0, 0)] = (("weights", 100),)
    prog.add("A", "forward", 0, ("compute",), 1)
    assert simulate(prog).memory.stage_peaks() == [100]
    prog = TaskGraph(stages=1, replicas=1, memory_budget=99)
    prog.static[(0, 0)] = (("weights", 100),)
    prog.add("A", "forward", 0, ("compute",), 1)
    with pytest.raises(OutOfMemory):
        simulate(prog)


def test_allocating_a_live_value_again_is_a_program_error():
    """A task allocating a value that is still live is reported (TaskGraphError naming the task and value), not double counted."""
    prog = TaskGraph(stages=1, replicas=1)
    a = prog.add("A", "forward", 0, ("compute",), 1, allocs=(("x", 100),))
    prog.add("B", "forward", 0, ("compute",), 1, deps=(a,), allocs=(("x", 100),))
    with pytest.raises(TaskGraphError, match="task B: value x allocated on stage 0 replica 0 while still live"):
        simulate(prog)


def test_out_of_memory_report_gives_cycle_and_seconds():
    """OutOfMemory at cycle 4 on a 2 Hz clock is at 4 / 2 = 2 s, with every live value listed largest first (hand example)."""
    prog = TaskGraph(stages=1, replicas=1, memory_budget=150, clock=2.0)
    a = prog.add("A", "forward", 0, ("compute",), 4, allocs=(("small", 60),))
    prog.add("B", "forward", 0, ("compute",), 1, deps=(a,), allocs=(("big", 100),))
    with pytest.raises(OutOfMemory) as err:
        simulate(prog)
    d = err.value.as_dict()
    assert (d["cycle"], d["seconds"], d["task"], d["budget_bytes"]) == (4, 2.0, "B", 150)
    assert d["live"] == [{"value": "big", "bytes": 100}, {"value": "small", "bytes": 60}]
    assert "at cycle 4 (2 s) when task B started: 160 B live > budget 150 B" in str(err.value)


def test_value_made_and_freed_on_another_stage():
    """allocs (name, bytes, stage) / frees (name, stage) act on that stage's cluster: stage 1 peaks at 100 B, not 150 (hand example)."""
    prog = TaskGraph(stages=2, replicas=1)
    a = prog.add("send", "send", 0, ("tx",), 2, allocs=(("x", 100, 1),))          # lands on stage 1
    b = prog.add("use", "forward", 0, ("compute",), 1, deps=(a,), frees=(("x", 1),))
    prog.add("later", "forward", 1, ("compute",), 1, deps=(b,), allocs=(("y", 50),))
    assert simulate(prog).memory.stage_peaks() == [0, 100]

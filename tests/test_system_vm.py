"""System VM: closed-form 1F1B checks, a hand-timed contended link, symmetry, memory.

Whole programs are small hand-written `life.plan`s (tests/life_programs.py) lowered by the
lifecycle passes; costs are in cycles of the MT-3000 clock."""

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.lifecycle.actions import parse
from ratc.vm.system.collectives import ring
from ratc.vm.system.driver import run_module
from ratc.vm.system.engine import simulate
from ratc.vm.system.memory import OutOfMemory
from ratc.vm.system.task_graph import CycleLink, TaskGraph, TaskGraphError
from ratc.vm.system.results import critical_path, summarize
from ratc.vm.system.trace import chrome_trace
from life_programs import Unit, lowered, mt3000, plan_text, simulated


def uniform(P, M, tf, tb, units=1, D=1, **kw):
    """P identical stages of `units` layers whose per-stage F and B total tf and tb (free
    embedding, head and communication)."""
    assert tf % units == 0 and tb % units == 0
    layer = Unit(fwd=(tf // units, 0), bwd=(tb // units, 0))
    return plan_text([[layer] * units] * P, M=M, D=D, **kw)


@settings(max_examples=60, deadline=None)
@given(P=st.integers(1, 6), M=st.integers(1, 10), tf=st.integers(1, 40), tb=st.integers(1, 40),
       units=st.sampled_from([1, 2]), D=st.integers(1, 3), steps=st.integers(1, 3))
def test_uniform_zero_comm_makespan_and_bubble_are_closed_form(P, M, tf, tb, units, D, steps):
    _, res = simulated(uniform(P, M, tf * units, tb * units, units=units, D=D), steps=steps)
    assert res.step_cycles == (M + P - 1) * (tf + tb) * units
    assert res.bubble_fraction == pytest.approx((P - 1) / (M + P - 1), abs=1e-12)
    assert sum(res.critical_cycles.values()) == res.step_cycles


def issue_order(tl, p):
    """Stage p's Forwards and Backwards as (F|B, micro-batch) in the order the VM started them
    (a micro-batch's tasks of one stage, one per unit, count once)."""
    prog = tl.program
    main = sorted((tl.start[i], i) for i, t in enumerate(prog.tasks)
                  if t.stage == p and t.replica == 0 and t.step == 0 and t.kind in ("forward", "backward"))
    out = []
    for _, i in main:
        a = parse(prog.tasks[i].name)
        task = (a.kind, a.mb)
        if not out or out[-1] != task:
            out.append(task)
    return out


@pytest.mark.parametrize("P,M", [(4, 6), (4, 2), (3, 3), (1, 5), (6, 13)])
def test_compiled_programs_issue_the_megatron_order(P, M):
    """Each stage's main tasks, in the order the VM runs them, are Megatron-LM's
    non-interleaved 1F1B (the transcription tests/test_schedule_1f1b.py checks against torch)."""
    from test_schedule_1f1b import megatron_order

    tl, _ = simulated(uniform(P, M, 3, 5), steps=1)
    for p in range(P):
        assert issue_order(tl, p) == megatron_order(P, M, p), p


def contended(symmetric):
    """Stage 0 sends an activation while its all-reduce holds the transmit port.

    CycleLink: 2 cycles latency + 4 B/cycle. The 80-byte all-reduce over D=2 is two ring steps
    of 40 B (12 cycles each); the 40-byte activation send takes 12 cycles.
      ring step 0 [0, 12)   (ready at 0, takes tx)
      F0          [0, 10)   send ready at 10 but tx is busy
      send        [12, 24)  priority over ring step 1, which is also ready at 12
      ring step 1 [24, 36)
      F1          [24, 34)  on stage 1 after the send
    """
    link = CycleLink(2, 4.0)
    prog = TaskGraph(stages=2, replicas=2, symmetric=symmetric)
    R = prog.simulated_replicas
    f0 = [prog.add("0F0", "forward", 0, ("compute",), 10, replica=r, template=0 if r else -1) for r in range(R)]
    done = ring(prog, "all_reduce", 0, 80, link, [() for _ in range(R)], "0SYNC")
    base = len(prog.tasks)
    send = [prog.add("0SEND_F0", "send", 0, ((0, r, "tx"), (1, r, "rx")), link.cycles(40), deps=(f0[r],),
                     replica=r, template=base if r else -1) for r in range(R)]
    base = len(prog.tasks)
    f1 = [prog.add("1F0", "forward", 1, ("compute",), 10, deps=(send[r],), replica=r,
                   template=base if r else -1) for r in range(R)]
    return prog, send, f1, done


@pytest.mark.parametrize("symmetric", [False, True])
def test_hand_computed_contended_link_and_collective(symmetric):
    prog, send, f1, done = contended(symmetric)
    tl = simulate(prog)
    by_name = {}
    for i, t in enumerate(prog.tasks):
        by_name.setdefault(t.name, set()).add((tl.start[i], tl.end[i]))
    assert by_name == {"0F0": {(0, 10)}, "0SYNC#0": {(0, 12)}, "0SEND_F0": {(12, 24)},
                       "0SYNC#1": {(24, 36)}, "1F0": {(24, 34)}}
    assert tl.makespan == 36
    assert all(tl.end[d[0]] == 36 for d in done)
    res = summarize(tl)
    assert res.critical_cycles == {"main": 0, "comm": 36, "update": 0, "prefetch": 0, "recovery": 0}
    assert [prog.tasks[i].name for i in critical_path(tl)] == ["0SYNC#0", "0SEND_F0", "0SYNC#1"]


def test_without_priority_the_ring_step_would_win_the_port():
    prog, send, f1, done = contended(True)
    prog.tasks[send[0]].priority = 5
    tl = simulate(prog)
    assert (tl.start[send[0]], tl.end[f1[0]]) == (24, 46)


def ring_times(D, op, nbytes, link, symmetric):
    prog = TaskGraph(stages=1, replicas=D, symmetric=symmetric)
    done = ring(prog, op, 0, nbytes, link, [() for _ in range(prog.simulated_replicas)], "AR")
    tl = simulate(prog)
    return tl.makespan, [tl.end[d[0]] for d in done]


@given(D=st.integers(2, 6), nbytes=st.integers(1, 10_000), lat=st.integers(0, 50), bw=st.integers(1, 64),
       op=st.sampled_from(["reduce_scatter", "all_gather", "all_reduce"]))
def test_ring_collective_matches_alpha_beta_formula(D, nbytes, lat, bw, op):
    # Ring algorithm (Thakur et al. 2005): (D-1) steps of nbytes/D for RS or AG, twice for AR.
    link = CycleLink(lat, float(bw))
    steps = (2 if op == "all_reduce" else 1) * (D - 1)
    expect = steps * (lat + -(-(-(-nbytes // D)) // bw))
    for symmetric in (False, True):
        span, ends = ring_times(D, op, nbytes, link, symmetric)
        assert span == expect and set(ends) == {expect}


def _times_by_replica(prog, tl):
    out = {}
    for i, t in enumerate(prog.tasks):
        out.setdefault(t.replica, []).append((t.step, t.name, t.layer, t.micro_batch, tl.start[i], tl.end[i]))
    return {r: sorted(v) for r, v in out.items()}


def random_plan(rnd, P, D, M, Z, act, pref):
    """A plan of random costs: every work, state-chain and byte count drawn on its own."""
    def unit():
        return Unit(fwd=(rnd.randint(1, 30), rnd.randint(0, 9)), bwd=(rnd.randint(1, 60), rnd.randint(0, 9)),
                    saved=rnd.randint(0, 100), act_in=rnd.randint(0, 300), param=rnd.randint(0, 200),
                    opt=rnd.randint(0, 400), grad=rnd.randint(0, 400), sync=rnd.randint(0, 40),
                    update=rnd.randint(0, 20), prefetch=rnd.randint(0, 40))
    stages = [[unit() for _ in range(rnd.randint(1, 3))] for _ in range(P)]
    return plan_text(stages, M=M, D=D, Z=Z, act=act, pref=pref, p2p=rnd.randint(0, 20), embedding=unit(),
                     head=unit())


@settings(max_examples=25, deadline=None)
@given(P=st.integers(1, 3), D=st.integers(2, 4), M=st.integers(1, 4), seed=st.integers(0, 10**6),
       act=st.sampled_from(["full", "ckpt", "fsr"]), pref=st.sampled_from(["bulk", "layerwise", "deadline"]),
       Z=st.integers(0, 3))
def test_symmetric_replicas_equal_explicit_replicas(P, D, M, seed, act, pref, Z):
    module = lowered(random_plan(random.Random(seed), P, D, M, Z, act, pref))
    (ts, sym), (te, exp) = (run_module(module, mt3000(), symmetric=s, memory_limit=False) for s in (True, False))
    assert len(te.program.tasks) == D * len(ts.program.tasks)
    assert te.makespan == ts.makespan
    want = _times_by_replica(ts.program, ts)[0]
    for r, got in _times_by_replica(te.program, te).items():
        assert got == want, f"replica {r}"
    assert exp.stage_peak_bytes == sym.stage_peak_bytes


@pytest.mark.parametrize("P,M", [(4, 8), (4, 2), (3, 3), (1, 5)])
def test_full_save_peak_activations_match_narayanan_in_flight_count(P, M):
    # Narayanan et al. 2021 (1F1B): stage p keeps at most min(P - p, M) micro-batches' activations.
    layer = Unit(fwd=(3, 0), bwd=(5, 0), saved=1000, param=7)
    _, res = simulated(plan_text([[layer]] * P, M=M), steps=1)
    assert list(res.stage_peak_bytes) == [7 + 1000 * min(P - p, M) for p in range(P)]


def peaks(act, ckpt, stream=True):
    """Stage peaks of 4 stages x 1 layer, M = 8, saving 1000 bytes and checkpointing `ckpt`."""
    from ratc.lifecycle.compile import default_pipeline

    text = plan_text([[Unit(fwd=(3, 0), bwd=(5, 0), saved=1000, act_in=ckpt)]] * 4, M=8, act=act)
    module = lowered(text, default_pipeline("deadline", budget="none", stream=stream))
    return run_module(module, mt3000(), steps=1, memory_limit=False)[1].stage_peak_bytes


def test_fsr_holds_checkpoints_not_full_activations():
    # With free checkpoints only saved activations count: full-save holds min(P - p, M) of
    # them (Narayanan), a recovering stage one recovery buffer (Eq. 6), which each Recover
    # co-running with a Backward refills as that Backward frees it; without that streaming
    # such a Recover needs a second buffer.
    assert list(peaks("full", 0)) == [1000 * min(4 - p, 8) for p in range(4)]
    assert list(peaks("ckpt", 0)) == list(peaks("fsr", 0)) == [1000] * 4
    assert max(peaks("fsr", 0, stream=False)) == 2000
    # Each stage adds its min(P - p, M) checkpoints (10 bytes), and at most the two boundary
    # buffers in flight at once (the gradient received and the one sent, each 10 bytes).
    for p, (with_ckpt, free) in enumerate(zip(peaks("fsr", 10), peaks("fsr", 0))):
        assert 10 * min(4 - p, 8) <= with_ckpt - free <= 10 * (min(4 - p, 8) + 2), p


@pytest.mark.parametrize("recover,fsr_step", [((0, 10), 110), ((10, 0), 130), ((4, 6), 118)])
def test_fsr_hides_the_recovery_work_its_host_leaves_an_engine_for(recover, fsr_step):
    # One stage, M = 2: the layer's Forward (so its Recover) is `recover` (compute, DDR)
    # cycles, its Backward 20 compute cycles; the head's Forward 5 and Backward 20, compute.
    # Full-save: 2 x (10 + 5 + 20 + 20) = 110. Checkpointing runs each Recover between the
    # head's Backward and the layer's: + 2 x 10. FSR co-runs it with the head's Backward
    # (Eq. 7): the pair needs 20 compute cycles plus the Recover's own, and its DDR part
    # overlaps them: + 0 for a DDR-bound Recover, + 10 for a compute-bound one, + 4 for
    # (4, 6). What a Recover adds is recovery on the critical path.
    layer = Unit(fwd=recover, bwd=(20, 0), saved=100)
    head = Unit(fwd=(5, 0), bwd=(20, 0))
    steps = {}
    for act in ("full", "ckpt", "fsr"):
        _, res = simulated(plan_text([[layer]], M=2, act=act, head=head), steps=1)
        steps[act] = res.step_cycles
        assert res.critical_cycles["recovery"] == res.step_cycles - 110, act
    assert steps == {"full": 110, "ckpt": 130, "fsr": fsr_step}


def test_over_budget_plan_stops_with_out_of_memory_report():
    layer = Unit(fwd=(3, 0), bwd=(5, 0), saved=1000, param=500)
    with pytest.raises(OutOfMemory) as info:
        simulated(plan_text([[layer]] * 2, M=4, budget=2400), memory_limit=True)
    oom = info.value
    # 1F1B: stage 0 holds min(P, M) = 2 micro-batches, 500 + 2 * 1000 > 2400 when layer 1's
    # Forward of micro-batch 1 starts at cycle 3 (the embedding is free); stage 1 never
    # holds more than one (1500).
    assert (oom.stage, oom.replica, oom.time, oom.task) == (0, 0, 3, "0F1@1")
    assert oom.live == [("step0.saved1_0", 1000), ("step0.saved1_1", 1000), ("step0.w1", 500)]
    assert "out of memory on stage 0" in str(oom) and "step0.saved1_1" in str(oom)
    assert oom.as_dict()["budget_bytes"] == 2400


def test_trace_has_one_track_per_resource_and_action_names():
    layer = Unit(fwd=(3, 0), bwd=(5, 0), act_in=8, update=2)
    tl, _ = simulated(plan_text([[layer]] * 2, M=2, p2p=4), steps=1)
    trace = json.loads(json.dumps(chrome_trace(tl)))
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"0F0@1", "0F1@1", "1F0@2", "1B0@2", "0B1@1", "0SEND_F0", "1SEND_B1"} <= names
    threads = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {(p, r) for p in (0, 1) for r in ("compute", "ddr", "tx", "rx")}
    # the DDR track holds the two layers' UpdateShards: 2 cycles each, in microseconds
    ddr = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == 1 and e["dur"] > 0]
    assert sorted(e["name"] for e in ddr) == ["0U@1", "1U@2"]
    assert all(e["dur"] == pytest.approx(2e6 / mt3000().dsp.clock) for e in ddr)


def test_cycle_and_bad_references_are_reported_by_task_name():
    prog = TaskGraph(stages=1, replicas=1)
    a = prog.add("0F0", "forward", 0, ("compute",), 1)
    b = prog.add("0B0", "backward", 0, ("compute",), 1, deps=(a,))
    prog.tasks[a].deps = (b,)
    with pytest.raises(TaskGraphError, match="never ran.*0F0"):
        simulate(prog)
    prog = TaskGraph(stages=1, replicas=1)
    prog.add("0F0", "forward", 0, ("compute",), 1, deps=(7,))
    with pytest.raises(TaskGraphError, match="0F0"):
        simulate(prog)
    for bad in (-1, 1):      # a negative index, and the task itself
        prog = TaskGraph(stages=1, replicas=1)
        prog.add("0F0", "forward", 0, ("compute",), 1)
        prog.add("0B0", "backward", 0, ("compute",), 1, deps=(0, bad))
        with pytest.raises(TaskGraphError, match=rf"0B0 \(#1\): dependency #{bad} does not name another task"):
            simulate(prog)
    with pytest.raises(TaskGraphError, match="unknown kind"):
        TaskGraph(stages=1, replicas=1).add("x", "dance", 0, ("compute",), 1)


@pytest.mark.parametrize("corun", [4, 0])
def test_corun_recover_on_the_critical_path_splits_like_its_host(corun):
    # A co-running Recover holds no engine and lasts its host's 10 cycles, of which `corun`
    # are what it added: on the critical path that part is recovery, the rest main-path work
    # (also when the pair adds nothing), and the trace draws it on its cluster's co-run track.
    prog = TaskGraph(stages=1, replicas=1)
    f = prog.add("0F0", "forward", 0, ("compute",), 10, corun=corun)
    r = prog.add("0R0", "recover", 0, (), 10, corun=corun)
    prog.add("0B0", "backward", 0, ("compute",), 5, deps=(f, r))
    tl = simulate(prog)
    assert prog.tasks[r].alongside and not prog.tasks[f].alongside
    crit = summarize(tl).critical_cycles
    assert (crit["recovery"], crit["main"]) == (corun, 15 - corun)
    events = chrome_trace(tl)["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert [tracks[e["tid"]] for e in events if e["ph"] == "X" and e["name"] == "0R0"] == ["co-run"]


@pytest.mark.parametrize("pref,step", [("bulk", 60), ("layerwise", 60), ("deadline", 50)])
def test_step_end_phase_is_a_barrier_and_deadline_hands_views_over(pref, step):
    # One stage, two layers (F = B = 10 cycles), D = 2, ZeRO-1: each PrefetchW takes 10
    # cycles, everything else of the state chain none. Step 0 ends its backward at 40.
    # Step-end (bulk, layerwise): P1 [40, 50], P2 [50, 60], and the next step starts after
    # both: F1 [60, 70] ... B1 [90, 100], P1, P2 -> 120, a 60-cycle step. Deadline: P2
    # follows B2 [20, 30] at [30, 40], P1 follows B1 [30, 40] at [40, 50], and F1 starts on
    # its own view at 50 (F2's came at 40): B1 [80, 90], P1 [90, 100], 50 cycles.
    layers = [Unit(fwd=(10, 0), bwd=(10, 0), prefetch=10)] * 2
    tl, res = simulated(plan_text([layers], M=1, D=2, Z=1, pref=pref), steps=2)
    assert res.step_cycles == step
    assert tl.makespan == 2 * step


def test_chained_explicit_rings_keep_their_dependencies_short():
    """A collective's results feed the next (sync -> gather, layer after layer): each explicit
    rank's result is two tasks, however long the chain, and the last one ends after D - 1
    steps per ring (D = 4, 10-cycle steps, 30 rings: 30 x 3 x 10 cycles)."""
    prog = TaskGraph(stages=1, replicas=4, symmetric=False)
    deps = [() for _ in range(4)]
    for i in range(30):
        deps = ring(prog, "reduce_scatter", 0, 40, CycleLink(0, 1.0), deps, f"RS{i}")
        assert all(len(d) == 2 for d in deps)
    assert max(len(t.deps) for t in prog.tasks) <= 2
    assert simulate(prog).makespan == 30 * 3 * 10

"""System VM: closed-form 1F1B checks, a hand-timed contended link, symmetry, memory."""

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.vm.system.collectives import ring
from ratc.vm.system.engine import simulate
from ratc.vm.system.memory import OutOfMemory
from ratc.vm.system.onefoneb import StepSpec, UnitSpec, Work, build
from ratc.vm.system.program import Link, Program, ProgramError
from ratc.vm.system.results import critical_path, summarize
from ratc.vm.system.trace import chrome_trace

FREE = Link(0, 1.0)


def uniform(P, M, tf, tb, units=1, D=1, **kw):
    """P identical stages of `units` layers whose per-stage F and B total tf and tb."""
    assert tf % units == 0 and tb % units == 0
    stage = tuple(UnitSpec(f"l{j}", Work(tf // units), Work(tb // units)) for j in range(units))
    kw.setdefault("act", "full")
    kw.setdefault("state", "none")
    return StepSpec(P=P, D=D, M=M, stages=(stage,) * P, boundary_bytes=0, p2p=FREE, ring_link=FREE, **kw)


@settings(max_examples=60, deadline=None)
@given(P=st.integers(1, 6), M=st.integers(1, 10), tf=st.integers(1, 40), tb=st.integers(1, 40),
       units=st.sampled_from([1, 2]), D=st.integers(1, 3), steps=st.integers(1, 3))
def test_uniform_zero_comm_makespan_and_bubble_are_closed_form(P, M, tf, tb, units, D, steps):
    spec = uniform(P, M, tf * units, tb * units, units=units, D=D, steps=steps)
    res = summarize(simulate(build(spec)))
    assert res.step_cycles == (M + P - 1) * (tf + tb) * units
    assert res.bubble_fraction == pytest.approx((P - 1) / (M + P - 1), abs=1e-12)
    assert sum(res.critical_cycles.values()) == res.step_cycles


@pytest.mark.parametrize("P,M", [(4, 6), (4, 2), (3, 3), (1, 5), (6, 13)])
def test_synthetic_programs_issue_the_megatron_order(P, M):
    """Each stage's main tasks, in the order the built program issues them, are Megatron-LM's
    non-interleaved 1F1B (the transcription tests/test_schedule_1f1b.py checks against torch)."""
    from test_schedule_1f1b import megatron_order

    prog = build(uniform(P, M, 3, 5, D=1, steps=1))
    tl = simulate(prog)
    for p in range(P):
        k = len(str(p))
        main = sorted((tl.start[i], t.name) for i, t in enumerate(prog.tasks)
                      if t.stage == p and t.replica == 0 and t.name[k] in "FB")
        assert [(name[k], int(name[k + 1:])) for _, name in main] == megatron_order(P, M, p), p


def contended(symmetric):
    """Stage 0 sends an activation while its all-reduce holds the transmit port.

    Link: 2 cycles latency + 4 B/cycle. The 80-byte all-reduce over D=2 is two ring steps
    of 40 B (12 cycles each); the 40-byte activation send takes 12 cycles.
      ring step 0 [0, 12)   (ready at 0, takes tx)
      F0          [0, 10)   send ready at 10 but tx is busy
      send        [12, 24)  priority over ring step 1, which is also ready at 12
      ring step 1 [24, 36)
      F1          [24, 34)  on stage 1 after the send
    """
    link = Link(2, 4.0)
    prog = Program(stages=2, replicas=2, symmetric=symmetric)
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
    prog = Program(stages=1, replicas=D, symmetric=symmetric)
    done = ring(prog, op, 0, nbytes, link, [() for _ in range(prog.simulated_replicas)], "AR")
    tl = simulate(prog)
    return tl.makespan, [tl.end[d[0]] for d in done]


@given(D=st.integers(2, 6), nbytes=st.integers(1, 10_000), lat=st.integers(0, 50), bw=st.integers(1, 64),
       op=st.sampled_from(["reduce_scatter", "all_gather", "all_reduce"]))
def test_ring_collective_matches_alpha_beta_formula(D, nbytes, lat, bw, op):
    # Ring algorithm (Thakur et al. 2005): (D-1) steps of nbytes/D for RS or AG, twice for AR.
    link = Link(lat, float(bw))
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


@settings(max_examples=25, deadline=None)
@given(P=st.integers(1, 3), D=st.integers(2, 4), M=st.integers(1, 4), seed=st.integers(0, 10**6),
       act=st.sampled_from(["full", "ckpt", "fsr"]), state=st.sampled_from(["bulk", "layerwise", "deadline"]),
       sync=st.sampled_from(["reduce_scatter", "all_reduce"]))
def test_symmetric_replicas_equal_explicit_replicas(P, D, M, seed, act, state, sync):
    import random
    rnd = random.Random(seed)
    stages = []
    for p in range(P):
        stages.append(tuple(
            UnitSpec(f"l{j}", Work(rnd.randint(1, 30), rnd.randint(0, 9)), Work(rnd.randint(1, 60), rnd.randint(0, 9)),
                     rec=Work(rnd.randint(1, 30), rnd.randint(0, 5)) if j else None,
                     grad_bytes=rnd.randint(0, 400), update=rnd.randint(0, 20), param_bytes=rnd.randint(0, 200),
                     saved_bytes=rnd.randint(0, 100), ckpt_bytes=rnd.randint(0, 10))
            for j in range(rnd.randint(1, 3))))
    base = dict(P=P, D=D, M=M, stages=tuple(stages), boundary_bytes=rnd.randint(0, 300),
                p2p=Link(rnd.randint(0, 5), float(rnd.randint(1, 8))),
                ring_link=Link(rnd.randint(0, 5), float(rnd.randint(1, 8))), act=act, state=state, sync=sync)
    sym = build(StepSpec(symmetric=True, **base))
    exp = build(StepSpec(symmetric=False, **base))
    ts, te = simulate(sym), simulate(exp)
    assert len(exp.tasks) == D * len(sym.tasks)
    assert te.makespan == ts.makespan
    want = _times_by_replica(sym, ts)[0]
    for r, got in _times_by_replica(exp, te).items():
        assert got == want, f"replica {r}"
    assert summarize(te).as_dict()["stage_peak_memory_bytes"] == summarize(ts).as_dict()["stage_peak_memory_bytes"]


@pytest.mark.parametrize("P,M", [(4, 8), (4, 2), (3, 3), (1, 5)])
def test_full_save_peak_activations_match_narayanan_in_flight_count(P, M):
    # Narayanan et al. 2021 (1F1B): stage p keeps at most min(P - p, M) micro-batches' activations.
    act = 1000
    stage = (UnitSpec("l0", Work(3), Work(5), saved_bytes=act),)
    spec = StepSpec(P=P, D=1, M=M, stages=(stage,) * P, boundary_bytes=0, p2p=FREE, ring_link=FREE,
                    act="full", state="none", steps=1, static=tuple((("params", 7),) for _ in range(P)))
    res = summarize(simulate(build(spec)))
    assert list(res.stage_peak_bytes) == [7 + act * min(P - p, M) for p in range(P)]


def test_fsr_holds_checkpoints_not_full_activations():
    stage = (UnitSpec("l0", Work(3), Work(5), rec=Work(2), saved_bytes=1000, ckpt_bytes=10),)
    spec = StepSpec(P=4, D=1, M=8, stages=(stage,) * 4, boundary_bytes=0, p2p=FREE, ring_link=FREE,
                    act="fsr", state="none", steps=1)
    peaks = summarize(simulate(build(spec))).stage_peak_bytes
    # Eq. 6: N_act(p) = min(P - p, M) checkpoints plus the recovery buffers: two (one being
    # consumed, the next recovered ahead), but no more than the micro-batches in flight (one
    # on the last stage)
    assert list(peaks) == [10 * min(4 - p, 8) + 1000 * min(2, 4 - p) for p in range(4)]
    full = summarize(simulate(build(dataclasses.replace(spec, act="full")))).stage_peak_bytes
    assert list(full) == [1000 * min(4 - p, 8) for p in range(4)]      # what FSR saves on stages 0-1


def test_over_budget_plan_stops_with_out_of_memory_report():
    stage = (UnitSpec("l0", Work(3), Work(5), saved_bytes=1000),)
    spec = StepSpec(P=2, D=1, M=4, stages=(stage,) * 2, boundary_bytes=0, p2p=FREE, ring_link=FREE,
                    act="full", state="none", static=((("params", 500),), (("params", 500),)),
                    memory_budget=2400)
    with pytest.raises(OutOfMemory) as info:
        simulate(build(spec))
    oom = info.value
    # 1F1B: stage 0 holds min(P, M) = 2 micro-batches, 500 + 2 * 1000 > 2400 when 0F1 starts
    # at cycle 3; stage 1 never holds more than one (1500).
    assert (oom.stage, oom.replica, oom.time, oom.task) == (0, 0, 3, "0F1")
    assert oom.live == [("step0.m0.u0.act", 1000), ("step0.m1.u0.act", 1000), ("params", 500)]
    assert "out of memory on stage 0" in str(oom) and "step0.m1.u0.act" in str(oom)
    assert oom.as_dict()["budget_bytes"] == 2400


def test_trace_has_one_track_per_resource_and_action_names():
    stage = (UnitSpec("l0", Work(3, 2), Work(5)),)
    spec = StepSpec(P=2, D=1, M=2, stages=(stage,) * 2, boundary_bytes=8, p2p=Link(1, 4.0), ring_link=FREE,
                    act="full", state="none", steps=1, clock=1e6)
    tl = simulate(build(spec))
    trace = json.loads(json.dumps(chrome_trace(tl)))
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert {"0F0", "0F1", "1F0", "1B0", "0B1", "0SEND_F0", "1SEND_B1"} <= names
    threads = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {(p, r) for p in (0, 1) for r in ("compute", "ddr", "tx", "rx")}
    ddr = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == 1]
    assert ddr and all(e["dur"] == pytest.approx(2.0) for e in ddr)  # 2 cycles at 1 MHz = 2 us


def test_cycle_and_bad_references_are_reported_by_task_name():
    prog = Program(stages=1, replicas=1)
    a = prog.add("0F0", "forward", 0, ("compute",), 1)
    b = prog.add("0B0", "backward", 0, ("compute",), 1, deps=(a,))
    prog.tasks[a].deps = (b,)
    with pytest.raises(ProgramError, match="never ran.*0F0"):
        simulate(prog)
    prog = Program(stages=1, replicas=1)
    prog.add("0F0", "forward", 0, ("compute",), 1, deps=(7,))
    with pytest.raises(ProgramError, match="0F0"):
        simulate(prog)
    for bad in (-1, 1):      # a negative index, and the task itself
        prog = Program(stages=1, replicas=1)
        prog.add("0F0", "forward", 0, ("compute",), 1)
        prog.add("0B0", "backward", 0, ("compute",), 1, deps=(0, bad))
        with pytest.raises(ProgramError, match=rf"0B0 \(#1\): dependency #{bad} does not name another task"):
            simulate(prog)
    with pytest.raises(ProgramError, match="unknown kind"):
        Program(stages=1, replicas=1).add("x", "dance", 0, ("compute",), 1)


@pytest.mark.parametrize("corun", [4, 0])
def test_corun_recover_on_the_critical_path_splits_like_its_host(corun):
    # A co-running Recover holds no engine and lasts its host's 10 cycles, of which `corun`
    # are what it added: on the critical path that part is recovery, the rest main-path work
    # (also when the pair adds nothing), and the trace draws it on its cluster's co-run track.
    prog = Program(stages=1, replicas=1)
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


@pytest.mark.parametrize("state,step", [("bulk", 60), ("layerwise", 60), ("deadline", 50)])
def test_step_end_phase_is_a_barrier_and_deadline_hands_views_over(state, step):
    # One stage, two layers (F = B = 10 cycles), D = 2: each PrefetchW all-gathers 10 bytes at
    # 1 byte/cycle. Step 0 ends its backward at 40. Step-end (bulk, layerwise): P0 [40, 50],
    # P1 [50, 60], and the next step starts after both: F0 [60, 70] ... B0 [90, 100], P0, P1
    # -> 120, a 60-cycle step. Deadline: P1 follows B1 [30, 40], P0 follows B0 [40, 50], and
    # F0 starts on its own view at 50 (F1's came at 40): B0 [80, 90], P0 [90, 100], 50 cycles.
    units = tuple(UnitSpec(f"l{j}", Work(10), Work(10), param_bytes=20) for j in range(2))
    spec = StepSpec(P=1, D=2, M=1, stages=(units,), boundary_bytes=0, p2p=FREE, ring_link=FREE,
                    act="full", state=state, steps=2)
    tl = simulate(build(spec))
    assert summarize(tl).step_cycles == step
    assert tl.makespan == 2 * step


def test_chained_explicit_rings_keep_their_dependencies_short():
    """A collective's results feed the next (sync -> gather, layer after layer): each explicit
    rank's result is two tasks, however long the chain, and the last one ends after D - 1
    steps per ring (D = 4, 10-cycle steps, 30 rings: 30 x 3 x 10 cycles)."""
    prog = Program(stages=1, replicas=4, symmetric=False)
    deps = [() for _ in range(4)]
    for i in range(30):
        deps = ring(prog, "reduce_scatter", 0, 40, Link(0, 1.0), deps, f"RS{i}")
        assert all(len(d) == 2 for d in deps)
    assert max(len(t.deps) for t in prog.tasks) <= 2
    assert simulate(prog).makespan == 30 * 3 * 10

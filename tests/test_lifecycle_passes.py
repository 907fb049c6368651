"""The lifecycle passes on the tiny model: random plans, placement rules, memory plan."""

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.ir import verify
from ratc.lifecycle.liveness import corun_hosts
from ratc.lifecycle.lowering import find_pipeline, find_plan
from ratc.lifecycle.schedule import main_task
from ratc.passes import PassFailure
from ratc.step.rules import gather_ahead
from tiny_programs import compile_tiny

PLANS = st.fixed_dictionaries({
    "P": st.integers(1, 4), "D": st.integers(1, 3), "T": st.sampled_from([1, 2]), "Z": st.integers(0, 3),
    "b": st.integers(1, 2), "A": st.integers(1, 7), "act": st.sampled_from(["full", "ckpt", "fsr"]),
    "pref": st.sampled_from(["bulk", "layerwise", "deadline"]), "rec_buffers": st.integers(1, 3)})


def _intervals(ops, values) -> list[tuple[int, int]]:
    """[definition, last use] positions of values in one stage's op list; a co-running
    Recover's result is defined where its host starts."""
    pos = {op: i for i, op in enumerate(ops)}
    for g, h in corun_hosts(ops).items():
        pos[ops[g]] = h
    last = {}
    for i, op in enumerate(ops):
        for v in op.operands:
            last[v] = i
    return [(pos[v.owner], last.get(v, pos[v.owner])) for v in values]


def _max_overlap(intervals) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b + 1, -1) for _, b in intervals], key=lambda e: (e[0], e[1]))
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


@settings(max_examples=40, deadline=None)
@given(plan=PLANS)
def test_random_plans_compile_to_verified_programs_obeying_the_placement_rules(plan):
    rec_buffers = plan.pop("rec_buffers")
    module = compile_tiny(rec_buffers=rec_buffers, **plan)
    verify(module)
    pipe = find_pipeline(module)
    P, M = plan["P"], plan["A"]
    for stage in pipe.region.ops:
        ops = stage.region.ops
        p = stage.attributes["stage"]
        units = stage.attributes["units"]
        for op in ops:
            a = op.attributes
            if op.name == "life.recover":
                assert a["placement"] in (("bwd", "corun") if plan["act"] == "fsr" else ("bwd",))
                if a["placement"] == "corun":   # Eq. 7: what co-running exposes, never more than the Recover
                    assert -1e-15 <= a["exposed"] <= a["dur"] * (1 + 1e-9)
                elif plan["act"] == "fsr":
                    assert a["exposed"] == a["dur"] and a["window"] == 0.0
            if op.name in ("life.update", "life.prefetch"):
                assert a["start"] >= a["release"] - 1e-15
            if op.name == "life.update":   # Eq. 4
                assert a["exposed"] == pytest.approx(max(0.0, a["start"] + a["dur"] - a["deadline"]))
        # 1F1B keeps N_act(p) = P - p micro-batches' checkpoints (or saved activations) in flight.
        dec = next((u for u in units if u not in (0, len(find_plan(module).region.ops) - 1)), None)
        if dec is not None:
            if plan["act"] == "full":
                held = [op.results[-1] for op in ops if op.name == "life.fwd" and op.attributes["unit"] == dec]
            else:
                held = [op.operands[0] for op in ops if op.name == "life.fwd" and op.attributes["unit"] == dec]
            assert _max_overlap(_intervals(ops, held)) == min(P - p, M)
        recs = [op.result for op in ops if op.name == "life.recover"]
        if recs:
            assert _max_overlap(_intervals(ops, recs)) <= rec_buffers
            assert len({op.attributes["buf"][0] for op in ops if op.name == "life.recover"}) <= rec_buffers


def _stage(module, p=0):
    return find_pipeline(module).region.ops[p].region.ops


def test_state_pipeline_issues_gradsync_when_accumulation_ends():
    module = compile_tiny(P=2, A=4, Z=1, pipeline="lower-to-life,schedule-1f1b,state-pipeline{mode=layerwise}")
    ops = _stage(module)
    for i, op in enumerate(ops):
        if op.name == "life.grad_sync":
            prev = ops[i - 1]
            assert (prev.name, prev.attributes["unit"], prev.attributes["mb"]) == ("life.bwd", op.attributes["unit"], 3)
    bulk = _stage(compile_tiny(P=2, A=4, Z=1, pipeline="lower-to-life,schedule-1f1b,state-pipeline{mode=bulk}"))
    last_main = max(i for i, op in enumerate(bulk) if main_task(op) is not None)
    assert all(i > last_main for i, op in enumerate(bulk) if op.name == "life.grad_sync")


@pytest.mark.parametrize("Z", [2, 3])
def test_bulk_state_chain_keeps_zero2_reduce_scatters_in_the_backward(Z):
    # ZeRO >= 2 (DeepSpeed): every bucket, the last micro-batch's too, is reduce-scattered as
    # backward produces it; bulk defers only the update and the prefetch to the step end.
    for p in (0, 1):
        ops = _stage(compile_tiny(P=2, A=4, Z=Z, pref="bulk"), p)
        last_bwd = max(i for i, op in enumerate(ops) if op.name == "life.bwd")
        for i, op in enumerate(ops):
            if op.name == "life.grad_sync":
                prev = ops[i - 1]
                assert (prev.name, prev.attributes["unit"], prev.attributes["mb"]) == \
                    ("life.bwd", op.attributes["unit"], 3)
            if op.name in ("life.update", "life.prefetch"):
                assert i > last_bwd


def _edf_ok(ops, name):
    """Non-preemptive EDF: when a task starts, no released, unstarted task has an earlier deadline."""
    tasks = [op.attributes for op in ops if op.name == name]
    for t in tasks:
        for other in tasks:
            if other is t or other["start"] <= t["start"]:
                continue
            if other["release"] <= t["start"] + 1e-15:
                assert other["deadline"] >= t["deadline"] - 1e-15
    return bool(tasks)


@pytest.mark.parametrize("Z", [0, 1, 2, 3])
def test_update_prefetch_deadline_mode_is_earliest_deadline_first(Z):
    module = compile_tiny(P=2, A=4, Z=Z, pref="deadline")
    for p in (0, 1):
        ops = _stage(module, p)
        assert _edf_ok(ops, "life.update")
        if Z in (1, 2):
            assert _edf_ok(ops, "life.prefetch")
        # Each layer's chain comes after its GradSync, and the view feeds the step boundary.
        for op in ops:
            if op.name == "life.update":
                sync = op.operands[0].owner
                assert ops.index(sync) < ops.index(op)
                assert op.attributes["release"] == pytest.approx(op.attributes["start"]) or \
                    op.attributes["start"] > op.attributes["release"]


def test_update_prefetch_modes_differ_in_placement_and_bulk_waits_for_every_sync():
    def chain(pref):
        ops = _stage(compile_tiny(P=2, A=4, Z=2, pref=pref))
        return ops, [(op.name, op.attributes["unit"]) for op in ops if op.name in ("life.update", "life.prefetch")]
    bulk_ops, bulk = chain("bulk")
    last_sync = max(i for i, op in enumerate(bulk_ops) if op.name == "life.grad_sync")
    assert all(i > last_sync for i, op in enumerate(bulk_ops) if op.name in ("life.update", "life.prefetch"))
    releases = {op.attributes["release"] for op in bulk_ops if op.name == "life.update"}
    assert len(releases) == 1
    _, deadline = chain("deadline")
    assert sorted(deadline) == sorted(bulk)


def test_fsr_corun_places_each_recover_after_its_host():
    # Every Recover co-runs with the compute task issued before it: a Backward's first one
    # with the last Forward before that Backward's gradient arrives (the paper's F7+R1) or,
    # in the cool-down, with the previous Backward; the others with the Backward of the
    # layer above, which still reads its own recovery buffer: they stream into what it frees
    # (one buffer, `stream` headroom), or without streaming take a second buffer.
    fsr = _stage(compile_tiny(P=2, A=4, act="fsr"))
    recs = [op for op in fsr if op.name == "life.recover"]
    assert recs and all(op.attributes["placement"] == "corun" for op in recs)
    hosts = corun_hosts(fsr)
    for g, h in hosts.items():
        op, host = fsr[g], fsr[h]
        assert "corun" in host.attributes and host.attributes["corun"] == op.attributes["exposed"]
        m = op.attributes["mb"]
        recv = next(o for o in fsr if o.name == "life.recv" and o.attributes["dir"] == "bwd"
                    and o.attributes["mb"] == m)
        if op.attributes["unit"] == max(o.attributes["unit"] for o in recs):   # the first of its Backward
            assert g < fsr.index(recv)
            assert host.name == "life.fwd" or (host.name, host.attributes["mb"]) == ("life.bwd", m - 1)
        else:
            above = ("life.bwd", op.attributes["unit"] + 1, m)
            assert (host.name, host.attributes["unit"], host.attributes["mb"]) == above
    streams = [op for op in recs if "stream" in op.attributes]
    assert streams and all(any(str(v.type) == "!life.rec" for v in fsr[hosts[fsr.index(op)]].operands)
                           for op in streams)
    assert all("stream" not in op.attributes for op in recs if op not in streams
               and fsr[hosts[fsr.index(op)]].name == "life.fwd")
    assert len({op.attributes["buf"][0] for op in recs}) == 1
    two = [op for op in _stage(compile_tiny(P=2, A=4, act="fsr", stream=False)) if op.name == "life.recover"]
    assert not any("stream" in op.attributes for op in two)
    assert len({op.attributes["buf"][0] for op in two}) == 2
    # one buffer: only Recovers whose host reads no recovery buffer co-run
    one = _stage(compile_tiny(P=2, A=4, act="fsr", rec_buffers=1))
    placed = {(op.attributes["unit"], op.attributes["mb"]): op.attributes["placement"] for op in one
              if op.name == "life.recover"}
    assert set(placed.values()) == {"corun", "bwd"}
    for g, h in corun_hosts(one).items():
        assert not any(str(v.type) == "!life.rec" for v in one[h].operands)
    assert len({op.attributes["buf"][0] for op in one if op.name == "life.recover"}) == 1
    ckpt = _stage(compile_tiny(P=2, A=4, act="ckpt"))
    for op in ckpt:
        if op.name == "life.recover":
            nxt = ckpt[ckpt.index(op) + 1]
            assert (nxt.name, nxt.attributes["unit"], nxt.attributes["mb"]) == ("life.bwd", op.attributes["unit"],
                                                                               op.attributes["mb"])


_KIND = {"life.fwd": "F", "life.bwd": "B", "life.bwd_i": "B", "life.recover": "B", "life.bwd_w": "W"}


@pytest.mark.parametrize("kw", [dict(act="fsr"), dict(act="ckpt"), dict(act="fsr", v=2), dict(act="fsr", v=2, sched="zbv"),
                                dict(act="fsr", v=2, sched="zb1p")], ids=["fsr", "ckpt", "fsr-v2", "fsr-zbv", "fsr-zb1p"])
def test_a_zero3_view_is_gathered_as_many_compute_tasks_ahead_of_its_reader_as_the_rule_says(kw):
    # ratc.step.rules.gather_ahead, which the planner prices ZeRO-3's exposed gathers by: a
    # view is gathered beside the compute task before its reader; a co-running Recover's
    # beside the task before its host, so that it is there when the host (and the Recover
    # with it) starts. Counted in the compiled program's own order; the first unit of a
    # Forward or Backward run gathers right before it (after the run before has ended).
    module = compile_tiny(P=2, A=4, Z=3, **kw)
    chunk = {u.attributes["index"]: u.attributes.get("chunk", 0) for u in find_plan(module).region.ops}
    for p in (0, 1):
        ops = _stage(module, p)
        compute = [i for i, op in enumerate(ops) if op.name in _KIND and op.attributes.get("placement") != "corun"]
        task = lambda i: (_KIND[ops[i].name], ops[i].attributes["mb"], chunk[ops[i].attributes["unit"]])  # noqa: E731
        counted = Counter()
        for r, op in enumerate(ops):
            for view in dict.fromkeys(v.owner for v in op.operands if v.owner.name == "life.gather"):
                if id(view) in counted:
                    continue
                corun = op.attributes.get("placement") == "corun"
                at = ops.index(view)
                between = [i for i in compute if at < i < r]
                earlier = [i for i in compute if i < r]
                opens = not corun and (not earlier or task(earlier[-1]) != task(r))
                assert len(between) == (0 if opens else gather_ahead(corun)), (p, r, op.name)
                assert all(o.name == "life.gather" for o in ops[at:between[0] if between else r])
                counted[id(view)] = corun
        assert (sum(counted.values()) > 0) == (kw["act"] == "fsr")       # (FSR: every micro-batch's Recovers co-run)


def test_memory_plan_tiers_and_peaks():
    module = compile_tiny(P=2, A=4, act="fsr", Z=2)
    pipe = find_pipeline(module)
    for stage in pipe.region.ops:
        tiers = {}
        for op in stage.region.ops:
            for t in op.attributes.get("tier", []):
                tiers.setdefault(op.name, set()).add(t)
        assert tiers["life.param"] == {"long"} and tiers["life.opt"] == {"long"}
        assert tiers["life.recover"] == {"short"}
        # the gradient shard accumulator, and the token freeing the bucket buffer (no memory)
        assert tiers["life.reduce"] == {"medium", "none"}
        assert stage.attributes["peak"].n == pipe.attributes["peak"][stage.attributes["stage"]]
        assert stage.attributes["peak"].n >= sum(v.n for v in stage.attributes["tiers"].values()) - 1


def test_full_save_needs_more_memory_than_fsr():
    full = find_pipeline(compile_tiny(P=2, A=4, act="full")).attributes["peak"]
    fsr = find_pipeline(compile_tiny(P=2, A=4, act="fsr")).attributes["peak"]
    assert all(f > r for f, r in zip(full, fsr))


def test_budget_overflow_names_stage_moment_and_live_values():
    with pytest.raises(PassFailure) as info:
        compile_tiny(P=2, A=4, budget="1MB")
    msg = str(info.value)
    assert "memory-plan" in msg and re.search(r"stage \d needs", msg) and "over the 1.00 MB budget" in msg
    # the op by its task name, and the task running there if the op is none of the listed ones
    assert re.search(r"at op #\d+ \(life\.\w+ \d+[A-Z_]+\d*@\d+(, during \d+[A-Z]+\d*@\d+)?\)", msg)
    assert "live there: %" in msg
    with pytest.raises(PassFailure, match="bad budget 'lots'"):
        compile_tiny(P=2, A=4, budget="lots")
    for bad in ("-1GB", "0B"):
        with pytest.raises(PassFailure, match=f"budget must be positive, got '{bad}'"):
            compile_tiny(P=2, A=4, budget=bad)
    # a later memory-plan without a budget leaves none behind
    module = compile_tiny(P=2, A=4, pipeline="lower-to-life,schedule-1f1b,memory-plan{budget=20GB},"
                                             "memory-plan{budget=none}")
    assert "budget" not in find_pipeline(module).attributes


def test_passes_need_a_lowered_module_and_refuse_to_lower_twice():
    from ratc.ir import Module
    from ratc.passes import PassManager, parse_pipeline
    with pytest.raises(PassFailure, match="run lower-to-life first"):
        PassManager(parse_pipeline("schedule-1f1b")).run(Module("empty"))
    with pytest.raises(PassFailure, match="already lowered"):
        compile_tiny(P=2, A=2, pipeline="lower-to-life,lower-to-life")
    with pytest.raises(PassFailure, match="rec-buffers must be at least 1"):
        compile_tiny(P=2, A=2, pipeline="lower-to-life,fsr{rec-buffers=0}")


@pytest.mark.parametrize("pipeline, refused, ran", [
    # the placement passes' order: each rests on what the earlier ones left
    ("lower-to-life,schedule-1f1b,state-pipeline,update-prefetch,state-pipeline{mode=bulk}",
     "state-pipeline", "update-prefetch"),
    ("lower-to-life,fsr,schedule-1f1b", "schedule-1f1b", "fsr"),
    ("lower-to-life,schedule-1f1b,state-pipeline,update-prefetch,schedule-1f1b", "schedule-1f1b",
     "state-pipeline and update-prefetch"),
    ("lower-to-life,schedule-1f1b,state-pipeline,update-prefetch,fsr,codegen", "codegen", "update-prefetch and fsr"),
    ("lower-to-life,schedule-1f1b,state-pipeline,fsr,update-prefetch", "update-prefetch", "fsr"),
    ("lower-to-life,schedule-1f1b,fsr,state-pipeline", "state-pipeline", "fsr"),
])
def test_a_placement_pass_refuses_to_run_after_the_passes_that_build_on_it(pipeline, refused, ran):
    """Run out of order they produced invalid programs (an UpdateShard before its GradSync, a
    Recover away from its host) or stale numbers (co-run durations codegen overwrote)."""
    with pytest.raises(PassFailure, match=f"{refused} runs before {ran}, and @step has been through"):
        compile_tiny(P=2, A=4, Z=1, act="fsr", pipeline=pipeline)


def test_fsr_runs_once_per_lowering():
    """A second fsr would grow each host's co-run duration again."""
    with pytest.raises(PassFailure, match=r"already co-scheduled \(fsr = true\); fsr runs once"):
        compile_tiny(P=2, A=4, act="fsr", pipeline="lower-to-life,schedule-1f1b,state-pipeline,update-prefetch,fsr,fsr")


PLACED = "lower-to-life,schedule-1f1b,state-pipeline,update-prefetch"


@pytest.mark.parametrize("Z", [0, 2])
@pytest.mark.parametrize("act", ["ckpt", "fsr"])
def test_moving_tasks_after_memory_plan_drops_it_and_a_new_one_matches_a_fresh_compile(act, Z):
    """Oracle: the same program compiled with the bulk state chain from the start. Re-placing
    UpdateShard/PrefetchW after memory-plan leaves no stale buffers, tiers or peaks; memory-plan
    run again gives exactly the fresh compile's (the placement's own time estimates, which read
    the order they start from, aside)."""
    from ratc.ir import print_module

    def strip(text):
        return re.sub(r"(deadline|exposed|release|start) = [0-9.e+-]+, ", "", text)

    fresh = compile_tiny(P=2, A=4, Z=Z, act=act, pipeline="lower-to-life,schedule-1f1b,state-pipeline,"
                                                           "update-prefetch{mode=bulk},fsr,memory-plan")
    moved = compile_tiny(P=2, A=4, Z=Z, act=act, pipeline=f"{PLACED},memory-plan,update-prefetch{{mode=bulk}}")
    text = print_module(moved)
    assert not re.search(r"\b(peak|peak_at|buffers|tiers|buf|frees|tier) = ", text)
    again = compile_tiny(P=2, A=4, Z=Z, act=act, pipeline=f"{PLACED},memory-plan,update-prefetch{{mode=bulk}},"
                                                           "fsr,memory-plan")
    assert strip(print_module(again)) == strip(print_module(fresh))


@pytest.mark.parametrize("pipeline, Z", [
    ("lower-to-life,memory-plan{budget=20GB},schedule-1f1b", 1),
    ("lower-to-life,schedule-1f1b,memory-plan{budget=20GB},state-pipeline{mode=layerwise}", 0),
    (f"{PLACED},memory-plan{{budget=20GB}},fsr", 1),
])
def test_every_pass_that_moves_tasks_drops_the_memory_plan(pipeline, Z):
    from ratc.ir import print_module
    module = compile_tiny(P=2, A=4, Z=Z, act="fsr", pipeline=pipeline)
    assert not re.search(r"\b(peak|peak_at|buffers|tiers|buf|frees|tier) = ", print_module(module))
    assert "budget" not in find_pipeline(module).attributes


def test_a_unit_may_not_skip_a_stage():
    from ratc.ir import verify
    from ratc.ir.verifier import VerifyError
    from tiny_programs import tiny_plan
    module = tiny_plan(P=3, A=3)
    units = module.body.ops[0].region.ops
    k = next(i for i, u in enumerate(units) if u.attributes["stage"] == 1)
    units[k].attributes["stage"] = 2
    with pytest.raises(VerifyError, match=f"life.unit #{k} is on stage 2: .* \\(so here stage 0 or 1\\)"):
        verify(module)


def test_a_pass_that_moves_nothing_keeps_the_memory_plan():
    from ratc.ir import print_module

    placed = "lower-to-life,schedule-1f1b,state-pipeline"
    planned = compile_tiny(P=2, A=4, Z=1, act="fsr", pipeline=f"{placed},memory-plan")
    rerun = compile_tiny(P=2, A=4, Z=1, act="fsr", pipeline=f"{placed},memory-plan,state-pipeline")
    assert print_module(rerun) == print_module(planned)
    assert "peak = " in print_module(rerun)


def test_serve_is_non_preemptive_earliest_deadline_first():
    from ratc.lifecycle.placement import _serve
    tasks = lambda: [{"unit": 0, "release": 0.0, "deadline": 10.0, "dur": 5.0},  # noqa: E731
                     {"unit": 1, "release": 1.0, "deadline": 30.0, "dur": 1.0},
                     {"unit": 2, "release": 2.0, "deadline": 7.0, "dur": 1.0},
                     {"unit": 3, "release": 9.0, "deadline": 9.5, "dur": 1.0}]
    edf, fifo = tasks(), tasks()
    _serve(edf, edf=True)
    _serve(fifo, edf=False)
    assert [t["start"] for t in edf] == [0.0, 6.0, 5.0, 9.0]     # unit 2 overtakes unit 1; idle until 9
    assert [t["start"] for t in fifo] == [0.0, 5.0, 6.0, 9.0]


def _lower_text(text, pipeline="lower-to-life"):
    from ratc.ir import parse_module
    from ratc.passes import PassManager, parse_pipeline
    return PassManager(parse_pipeline(pipeline)).run(parse_module(text, "plan.ir"))


@pytest.mark.parametrize("edit, message", [
    # values lowering would turn into programs the verifier rejects after the fact (or tracebacks)
    (lambda t: re.sub(r"p2p = [0-9.e+-]+", "p2p = nan", t), "p2p must be finite and not negative, got nan"),
    (lambda t: re.sub(r"\bfwd = [0-9.e+-]+", "fwd = inf", t, count=1), "'fwd' must be finite and not negative"),
    (lambda t: re.sub(r"\bsync = [0-9.e+-]+", "sync = nan", t, count=1), "'sync' must be finite and not negative"),
    (lambda t: t.replace("decoder = true", "decoder = false", 1), "decoder must be true (unit 0 is the embedding"),
    (lambda t: t.replace('sync_kind = "reduce-scatter"', 'sync_kind = "all-reduce"', 1),
     "sync_kind must be 'reduce-scatter' under ZeRO-2"),
    (lambda t: t.replace("P = 2,", "P = 1,", 1), "is on stage 1: units go on stages 0..0 in order"),
    (lambda t: t.replace("P = 2,", "P = 3,", 1), "P = 3, but its units are on stages 0..1 only"),
    (lambda t: t.replace("stage = 0", "stage = 1", 1), "life.unit #0 is on stage 1: units go on stages 0..1 in "
                                                          "order, every stage holding at least one (so here stage 0)"),
    (lambda t: t.replace('fwd_kernels = [["gemm", 64, 32, 64, 4]', 'fwd_kernels = [["gemm", 64, 32, 4]', 1),
     "'fwd_kernels': each entry must be [kind, *shape, calls]"),
    (lambda t: t.replace('fwd_kernels = [["gemm", 64, 32, 64, 4]', 'fwd_kernels = [["x", 64, 32, 64, 4]', 1),
     "'fwd_kernels': each entry must be [kind, *shape, calls]"),
    (lambda t: t.replace('bwd_kernels = [["attn_bwd", 4, 64, 64, 2, 1]', 'bwd_kernels = [["attn_bwd", 4]', 1),
     "'bwd_kernels': each entry must be [kind, *shape, calls]"),
    (lambda t: t.replace('fwd_kernels = [["gemm", 64, 32, 64, 4]', 'fwd_kernels = [["gemm", 0, 32, 64, 4]', 1),
     "'fwd_kernels': each entry must be [kind, *shape, calls]"),
    (lambda t: t.replace('fwd_kernels = [["gemm", 64, 32, 64, 4]', 'fwd_kernels = [["gemm", 64.0, 32, 64, 4]', 1),
     "'fwd_kernels': each entry must be [kind, *shape, calls]"),
    (lambda t: re.sub(r"fwd_other = [0-9.e+-]+", "fwd_other = inf", t, count=1), "'fwd_other' must be finite"),
    (lambda t: re.sub(r"fwd_phases = \[[0-9.e+-]+", "fwd_phases = [nan", t, count=1), "'fwd_phases' must list finite"),
])
def test_plans_lowering_cannot_use_are_refused_where_they_are_wrong(edit, message):
    from ratc.ir import print_module
    from ratc.ir.verifier import VerifyError
    from tiny_programs import tiny_plan
    text = print_module(tiny_plan(P=2, A=2, Z=2))
    edited = edit(text)
    assert edited != text
    with pytest.raises(VerifyError, match=re.escape(message)):
        _lower_text(edited)


def test_a_kernel_too_large_to_time_is_refused_up_front():
    """Just over the limit (2**51 MACs), so a missing check would be slow, not run out of memory."""
    from ratc.codegen.attention import generate_attention_backward
    from ratc.codegen.kernel import MAX_KERNEL_MACS
    from ratc.errors import RatcError
    from ratc.ir import print_module
    from tiny_programs import mt3000, tiny_plan
    assert MAX_KERNEL_MACS == 131072 ** 3
    text = print_module(tiny_plan(P=1, A=1)).replace('fwd_kernels = [["gemm", 64, 32, 64, 4]',
                                                     'fwd_kernels = [["gemm", 131072, 131072, 131073, 4]', 1)
    with pytest.raises(PassFailure, match=r"gemm 131072x131072x131073: 2.25e\+15 MACs, more than ratc generates"):
        _lower_text(text, "lower-to-life,codegen")
    # attention backward: 4 * heads * seq^2 * head_dim MACs
    with pytest.raises(RatcError, match=r"attention backward, 1024 heads, sequence 1048576, head dim 1: 4.5e\+15 MACs"):
        generate_attention_backward(mt3000(), 1024, 2 ** 20, 1)


def test_bad_plans_are_clear_errors():
    from ratc.ir import print_module
    from tiny_programs import tiny_plan
    text = print_module(tiny_plan(P=2, A=2))
    _lower_text(text)
    lines = text.splitlines()
    unit1 = next(i for i, line in enumerate(lines) if "index = 1," in line)
    lines[unit1] = lines[unit1].replace("stage = 0", "stage = 1")
    from ratc.ir.verifier import VerifyError
    with pytest.raises(VerifyError, match=r"life.unit #2 is on stage 0: units go on stages 0..1 in order"):
        _lower_text("\n".join(lines))
    with pytest.raises(VerifyError, match="unit #1 has index 7"):
        _lower_text(text.replace("index = 1,", "index = 7,", 1))
    with pytest.raises(VerifyError, match="'fwd' must be finite and not negative"):
        _lower_text(text.replace("fwd = ", "fwd = -", 1))

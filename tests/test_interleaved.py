"""Interleaved 1F1B (v virtual stages per rank) through the plan, lowering, schedule pass,
verifier and system VM: each rank's order collapsed per (stage, kind, micro-batch) is
`interleaved_1f1b`'s (itself torch's ScheduleInterleaved1F1B, tests/test_schedules.py), the
verifier refuses what breaks the virtual-stage rules, and a small case's makespan is the one
worked out by hand below."""

import functools

import pytest

from ratc.errors import RatcError
from ratc.frontend import trace_preset
from ratc.ir.verifier import VerifyError, verify, verify_op
from ratc.lifecycle.compile import CompileOptions, compile_program, default_pipeline
from ratc.lifecycle.lowering import find_pipeline
from ratc.lifecycle.plan_ir import plan_module
from ratc.step.schedules import Action, interleaved_1f1b
from ratc.passes import PassContext, PassManager, parse_pipeline
from ratc.step.config import Candidate, parse_config
from ratc.step.plan import Plan
from ratc.vm.system.driver import run_module
from tiny_programs import mt3000, tiny

MAIN = {"life.fwd": "F", "life.bwd": "B"}


@functools.lru_cache(maxsize=None)
def _profile(preset: str):
    return trace_preset(preset, 64)


def _compile(P=2, v=2, A=4, Z=2, act="ckpt", D=2, pipeline=None, preset="tiny"):
    cand = Candidate(P=P, D=D, T=1, Z=Z, b=1, A=A, act=act, pref="deadline", v=v)
    text = pipeline or default_pipeline(cand.pref, budget="none")
    return compile_program(_profile(preset), cand, mt3000(), CompileOptions(pipeline=text, verify="each"))


def _collapsed(stage, P: int, chunk_of: dict) -> list[Action]:
    """A stage's Forwards and Backwards as (global stage, kind, mb), consecutive repeats merged."""
    out: list[Action] = []
    for op in stage.region.ops:
        if op.name in MAIN:
            a = op.attributes
            act = Action(chunk_of[a["unit"]] * P + stage.attributes["stage"], MAIN[op.name], a["mb"])
            if not out or out[-1] != act:
                out.append(act)
    return out


def _chunks(module) -> dict:
    plan = next(op for op in module.body.ops if op.name == "life.plan")
    return {u.attributes["index"]: u.attributes.get("chunk", 0) for u in plan.region.ops}


@pytest.mark.parametrize("P,v,A,preset", [(2, 2, 4, "tiny"), (2, 2, 6, "tiny-tied"), (2, 2, 2, "tiny"),
                                          (3, 2, 3, "llama2-7b"), (2, 3, 4, "llama2-7b"), (4, 2, 8, "llama2-7b")])
@pytest.mark.parametrize("Z,act", [(0, "full"), (1, "ckpt"), (2, "ckpt"), (3, "full"), (3, "ckpt"), (1, "fsr"),
                                   (3, "fsr")])
def test_each_rank_runs_interleaved_1f1b_order_and_the_vm_finishes(P, v, A, preset, Z, act):
    module = _compile(P=P, v=v, A=A, Z=Z, act=act, preset=preset)
    pipe = find_pipeline(module)
    for stage in pipe.region.ops:
        rank = stage.attributes["stage"]
        assert _collapsed(stage, P, _chunks(module)) == interleaved_1f1b(P, v, A, rank), (rank, Z, act)
    _, res = run_module(module, mt3000(), memory_limit=False)
    assert res.step_seconds > 0


@pytest.mark.parametrize("P,v,A,Z", [(2, 2, 4, 2), (4, 2, 8, 1), (2, 4, 8, 3)])
def test_fsr_co_runs_each_chunk_s_first_recover_with_the_task_its_rank_runs_before_that_backward(P, v, A, Z):
    """Per chunk (virtual stage) as v = 1 per stage: the Recover of a chunk's last layer
    moves ahead of the wait for its gradient, onto the compute task before it (a Forward
    or a Backward of any chunk); every other Recover(l-1) rides on Backward(l)."""
    module = _compile(P=P, v=v, A=A, Z=Z, act="fsr", preset="llama2-7b")
    chunk_of = _chunks(module)
    firsts_moved = 0
    for stage in find_pipeline(module).region.ops:
        ops = [op for op in stage.region.ops if op.name != "life.gather"]
        units = stage.attributes["units"]
        for k, op in enumerate(ops):
            if op.name != "life.recover":
                continue
            i, m = op.attributes["unit"], op.attributes["mb"]
            host = next(x for x in reversed(ops[:k]) if x.name in ("life.fwd", "life.bwd", "life.recv"))
            assert op.attributes["placement"] == "corun" and "corun" in host.attributes
            if i + 1 in units and chunk_of[i + 1] == chunk_of[i]:
                assert (host.name, host.attributes["unit"], host.attributes["mb"]) == ("life.bwd", i + 1, m)
            else:
                # ahead of the receive of its Backward's gradient, hosted by the task before
                wait = next(j for j, x in enumerate(ops) if x.name == "life.recv" and x.attributes["dir"] == "bwd"
                            and (x.attributes["unit"], x.attributes["mb"]) == (i + 1, m))
                assert k < wait and not any(x.name in ("life.fwd", "life.bwd") for x in ops[k:wait])
                assert host.name in ("life.fwd", "life.bwd") and (host.attributes["unit"], host.attributes["mb"]) != (i, m)
                firsts_moved += 1
    assert firsts_moved == sum(1 for p in range(P) for c in range(v) if p + c * P < P * v - 1) * A
    _, res = run_module(module, mt3000(), memory_limit=False)
    assert res.step_seconds > 0


def test_a_v_1_plan_lowers_as_before_with_no_chunk_or_boundary_unit():
    module = _compile(v=1)
    plan = next(op for op in module.body.ops if op.name == "life.plan")
    assert "v" not in plan.attributes and not any("chunk" in u.attributes for u in plan.region.ops)
    comm = [op for s in find_pipeline(module).region.ops for op in s.region.ops
            if op.name in ("life.send", "life.recv")]
    assert comm and not any("unit" in op.attributes for op in comm)


def test_the_plan_text_and_ir_carry_v_only_when_interleaved():
    cand = parse_config("P=2,D=1,Z=1,b=1,A=4,Full,deadline,v=2")
    assert cand.v == 2 and cand.label() == "P=2,D=1,Z=1,b=1,A=4,Full,deadline,v=2"
    assert parse_config("P=2,D=1,Z=1,b=1,A=4,Full,deadline").label() == "P=2,D=1,Z=1,b=1,A=4,Full,deadline"
    plan = plan_module(tiny(), cand, mt3000()).body.ops[0]
    assert plan.attributes["v"] == 2 and Plan.from_ir(plan).config == cand
    # the planner's own partition into P * v virtual stages, chunk c of rank r being c * P + r
    vs = [u.attributes["chunk"] * 2 + u.attributes["stage"] for u in plan.region.ops]
    assert vs == sorted(vs) and set(vs) == {0, 1, 2, 3}


@pytest.mark.parametrize("text,why", [
    ("P=1,D=1,A=4,Full,v=2", "P >= 2"),
    ("P=2,D=1,A=5,Ckpt,v=2", "multiple"),
    ("P=3,D=1,A=3,Ckpt,v=2", "P \\* v = 6 virtual stages need at least as many decoder layers"),
])
def test_shapes_interleaving_cannot_run_are_refused_saying_why(text, why):
    with pytest.raises(RatcError, match=why):
        plan_module(tiny(), parse_config(text), mt3000())


def _edit_and_verify(edit):
    module = _compile(pipeline="lower-to-life,schedule-1f1b")
    edit(find_pipeline(module).region.ops)
    verify(module)


def _first(stages, p, name, d):
    return next(op for op in stages[p].region.ops if op.name == name and op.attributes["dir"] == d)


def test_the_verifier_refuses_a_transfer_to_the_wrong_rank_or_without_its_boundary():
    module = _compile(pipeline="lower-to-life,schedule-1f1b")
    stages = find_pipeline(module).region.ops
    send = _first(stages, 1, "life.send", "fwd")       # vs 1 -> vs 2: rank 1 to rank 0
    send.attributes["peer"] = 1
    with pytest.raises(VerifyError, match="must have peer 0"):
        verify_op(send)
    send.attributes["peer"] = 0
    send.attributes["unit"] += 1
    with pytest.raises(VerifyError, match="is no boundary of the stage's chunks"):
        verify_op(send)
    recv = _first(stages, 0, "life.recv", "bwd")
    del recv.attributes["unit"]
    with pytest.raises(VerifyError, match="names its boundary unit"):
        verify_op(recv)


def test_the_verifier_finds_the_deadlock_of_a_message_awaited_before_the_work_it_needs():
    def early(stages):
        # rank 0's first receive (rank 1's activation into chunk 1) moved before its first
        # Forward, whose activation rank 1 needs to send it: still the first message between
        # them, so only the deadlock check can tell
        ops = stages[0].region.ops
        recv = next(op for op in ops if op.name == "life.recv")
        ops.remove(recv)
        ops.insert(next(k for k, op in enumerate(ops) if op.name == "life.fwd"), recv)
    with pytest.raises(VerifyError, match="deadlock"):
        _edit_and_verify(early)


def test_a_small_interleaved_step_takes_the_makespan_worked_out_by_hand():
    """P=2, v=2, M=2, every virtual stage's Forward 1 ms and Backward 2 ms, nothing else
    costs time. The orders (interleaved_1f1b): rank 0 F0.0 F0.1 F2.0 F2.1 B2.0 B2.1 B0.0
    B0.1, rank 1 F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 B1.0 B1.1 (stage.mb). In ms:
    rank 0: F0.0 0-1, F0.1 1-2, F2.0 2-3 (after F1.0), F2.1 3-4 (after F1.1);
    rank 1: F1.0 1-2, F1.1 2-3, F3.0 3-4, B3.0 4-6, F3.1 6-7, B3.1 7-9;
    rank 0: B2.0 6-8, B2.1 9-11; rank 1: B1.0 9-11 (after B3.1 and B2.0), B1.1 11-13;
    rank 0: B0.0 11-13, B0.1 13-15. The step: 15 ms."""
    cand = Candidate(P=2, D=1, T=1, Z=1, b=1, A=2, act="full", pref="bulk", v=2)
    module = plan_module(tiny(), cand, mt3000())
    plan = module.body.ops[0]
    plan.attributes["p2p"] = 0.0
    seen: set = set()
    for u in plan.region.ops:
        a = u.attributes
        vs = a["chunk"] * 2 + a["stage"]
        first = vs not in seen          # one unit of each virtual stage carries its work
        seen.add(vs)
        for k in ("fwd", "bwd", "sync", "reduce", "update", "prefetch", "gather", "tie"):
            if k in a:
                a[k] = (1e-3 if k == "fwd" else 2e-3) if first and k in ("fwd", "bwd") else 0.0
    text = "lower-to-life{act-policy=full-save},schedule-1f1b,state-pipeline{mode=bulk},memory-plan{budget=none}"
    PassManager(parse_pipeline(text), verify="each", ctx=PassContext(platform=mt3000())).run(module)
    _, res = run_module(module, mt3000(), steps=1, memory_limit=False)
    assert res.step_seconds == pytest.approx(15e-3, rel=1e-6)


def test_ratc_diagram_draws_an_interleaved_step():
    from ratc.planner.search import Planner
    from ratc.report.build import policy_diagram

    data, res = policy_diagram(Planner(tiny(), mt3000()), 2, 4, "standard", v=2)
    assert "interleaved 1F1B (v=2)" in data.title and res.step_seconds > 0
    data, res = policy_diagram(Planner(tiny(), mt3000()), 2, 4, "fsr", v=2)
    assert "fsr interleaved 1F1B (v=2)" in data.title and res.step_seconds > 0


def test_ratc_compile_writes_the_interleaved_order_to_schedule_txt_and_ratc_run_predicts_it(tmp_path, capsys):
    from ratc.cli.main import main
    from ratc.lifecycle.actions import parse
    from tiny_programs import compile_tiny_dir

    text = "P=2,D=1,Z=1,b=1,A=4,Full,deadline,v=2"
    out = compile_tiny_dir(tmp_path / "prog", text)
    chunk_of = _chunks(plan_module(tiny(), parse_config(text), mt3000()))
    lines = [ln for ln in (out / "schedule.txt").read_text().splitlines() if ln.startswith("stage ")]
    for rank, line in enumerate(lines):
        order: list[Action] = []
        for a in map(parse, line.split(": ", 1)[1].split()):
            act = Action(chunk_of[a.unit] * 2 + rank, a.kind, a.mb) if a.kind in ("F", "B") else None
            if act is not None and (not order or order[-1] != act):
                order.append(act)
        assert order == interleaved_1f1b(2, 2, 4, rank)
    capsys.readouterr()
    assert main(["run", str(out)]) == 0
    report = capsys.readouterr().out
    assert "planner (Eq. 12) predicted" in report and "against the VM" in report
    assert "step time" in report


def test_an_interleaved_transfer_s_name_carries_its_boundary_unit_and_reads_back():
    from ratc.lifecycle.actions import describe, parse, token

    module = _compile(pipeline="lower-to-life")
    send = _first(find_pipeline(module).region.ops, 1, "life.send", "fwd")
    name = token(send, 1)
    assert name == f"1SEND_F0@{send.attributes['unit']}" and str(parse(name)) == name
    assert "to the next virtual stage (the boundary before layer 3)" in describe(parse(name), 6)


def test_the_plan_verifier_holds_units_to_virtual_stages_in_order():
    plan = plan_module(tiny(), parse_config("P=2,D=1,A=4,Ckpt,v=2"), mt3000()).body.ops[0]
    verify_op(plan)
    units = plan.region.ops
    last = units[-1].attributes
    last["chunk"], last["stage"] = 0, 1          # the head back on virtual stage 1, after stage 2
    with pytest.raises(VerifyError, match=r"units go on virtual stages 0..3 in order"):
        verify_op(plan)
    last["chunk"], last["stage"] = 1, 1
    del units[0].attributes["chunk"]
    with pytest.raises(VerifyError, match="every unit names its chunk"):
        verify_op(plan)


@pytest.mark.parametrize("v,sched,name", [(1, "1f1b", "1f1b"), (2, "1f1b", "interleaved-1f1b"), (2, "zb1p", "zb1p"),
                                          (2, "zbv", "zbv")])
def test_the_scheduled_pipeline_names_the_order_its_stages_run_in(v, sched, name):
    cand = Candidate(P=2, D=1, T=1, Z=1, b=1, A=4, act="ckpt", pref="deadline", v=v, sched=sched)
    module = compile_program(tiny(), cand, mt3000(), CompileOptions(memory_limit=False))
    assert find_pipeline(module).attributes["schedule"] == name

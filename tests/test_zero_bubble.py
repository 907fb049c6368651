"""Zero-bubble schedules (sched=zb1p, zbv) through the plan, lowering, schedule pass,
verifier and system VM: the order the VM runs, per rank with per-layer tasks collapsed per
(stage, kind, micro-batch), is torch's ScheduleInterleavedZeroBubble / ScheduleZBVZeroBubble
`pipeline_order` (stand-in stages of tests/test_schedules.py); each Backward is an I then
a W, priced from the unit's own dW GEMMs; the verifier holds W to what it reads."""

import dataclasses
import functools
from collections import Counter

import pytest
from torch.distributed.pipelining.schedules import ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble

from ratc.errors import RatcError
from ratc.frontend import trace_preset
from ratc.ir.verifier import VerifyError, verify, verify_op
from ratc.lifecycle.actions import describe, format_pipeline, parse
from ratc.lifecycle.compile import CompileOptions, compile_program, default_pipeline
from ratc.lifecycle.lowering import find_pipeline, find_plan
from ratc.lifecycle.plan_ir import plan_module
from ratc.step.config import Candidate, parse_config
from ratc.step.plan import Plan
from ratc.step.rules import backward_parts
from ratc.step.schedules import virtual_stage
from ratc.vm.system.driver import run_module
from test_schedules import torch_orders
from tiny_programs import mt3000, tiny

MAIN = {"life.fwd": "F", "life.bwd_i": "I", "life.bwd_w": "W"}


@functools.lru_cache(maxsize=None)
def _deep_tiny(layers: int = 12):
    """The tiny preset with `layers` decoder layers (P * v virtual stages need as many)."""
    t = tiny()
    (layer,) = t.layers
    return dataclasses.replace(t, layers=(dataclasses.replace(layer, repeat=layers),))


def _compile(P=2, v=2, A=4, Z=1, act="full", D=1, pipeline=None, profile=None, sched="zb1p"):
    cand = Candidate(P=P, D=D, T=1, Z=Z, b=1, A=A, act=act, pref="deadline", v=v, sched=sched)
    text = pipeline or default_pipeline(cand.pref, budget="none")
    return compile_program(profile or tiny(), cand, mt3000(), CompileOptions(pipeline=text, verify="each"))


def _fixed_order(module) -> None:
    """torch's assumptions: every F, I and W of a virtual stage takes the same time (its units
    share it), transfers and state work none."""
    plan = find_plan(module)
    per_vs: Counter = Counter((u.attributes["chunk"], u.attributes["stage"]) for u in plan.region.ops)
    share = {u.attributes["index"]: 1e-3 / per_vs[u.attributes["chunk"], u.attributes["stage"]]
             for u in plan.region.ops}
    for stage in find_pipeline(module).region.ops:
        for op in stage.region.ops:
            if "dur" in op.attributes:
                op.attributes["dur"] = share[op.attributes["unit"]] if op.name in MAIN else 0.0


def _collapse(tasks, P: int, rank: int, chunk_of: dict, sched: str) -> list[str]:
    """(kind, mb, unit) tasks as torch's actions '<virtual stage><kind><mb>', repeats merged."""
    out: list[str] = []
    for kind, mb, unit in tasks:
        name = f"{virtual_stage(chunk_of[unit], rank, P, sched)}{kind}{mb}"
        if not out or out[-1] != name:
            out.append(name)
    return out


def _vm_orders(module, P: int, sched: str) -> list[list[str]]:
    """Per rank, the Forwards, Is and Ws the system VM ran (replica 0), in start order."""
    chunk_of = {u.attributes["index"]: u.attributes["chunk"] for u in find_plan(module).region.ops}
    tl, _ = run_module(module, mt3000(), steps=1, memory_limit=False)
    ran = [[] for _ in range(P)]
    for k, t in enumerate(tl.program.tasks):
        a = parse(t.name) if t.kind in ("forward", "backward", "weight_grad") and t.replica == 0 else None
        if a is not None:
            ran[t.stage].append((tl.start[k], k, (a.kind, a.mb, a.unit)))
    return [_collapse([x for _, _, x in sorted(r)], P, p, chunk_of, sched) for p, r in enumerate(ran)]


@pytest.mark.parametrize("sched,P,v,M", [
    ("zb1p", 2, 2, 2), ("zb1p", 2, 2, 4), ("zb1p", 2, 3, 6), ("zb1p", 3, 2, 3), ("zb1p", 3, 2, 6),
    ("zb1p", 4, 2, 4), ("zb1p", 4, 2, 8), ("zb1p", 4, 3, 4), ("zb1p", 3, 4, 6),
    ("zbv", 2, 2, 1), ("zbv", 2, 2, 4), ("zbv", 3, 2, 2), ("zbv", 3, 2, 7), ("zbv", 4, 2, 5), ("zbv", 4, 2, 8),
    ("zbv", 6, 2, 12)])
def test_the_order_the_vm_runs_is_torch_s_zero_bubble_pipeline_order(sched, P, v, M):
    module = _compile(P=P, v=v, A=M, profile=_deep_tiny(), sched=sched)
    _fixed_order(module)
    ran = _vm_orders(module, P, sched)
    torch_schedule = ScheduleZBVZeroBubble if sched == "zbv" else ScheduleInterleavedZeroBubble
    assert ran == torch_orders(torch_schedule, P, v, M)
    # ... which is the program's issue order (what schedule.txt lists)
    chunk_of = {u.attributes["index"]: u.attributes["chunk"] for u in find_plan(module).region.ops}
    for rank, line in enumerate(format_pipeline(find_pipeline(module)).splitlines()[-P:]):
        listed = [parse(t) for t in line.split(": ", 1)[1].split()]
        tasks = [(a.kind, a.mb, u) for a in listed if a.kind in MAIN.values()
                 for u in range(a.unit, a.last + (1 if a.last >= a.unit else -1), 1 if a.last >= a.unit else -1)]
        assert _collapse(tasks, P, rank, chunk_of, sched) == ran[rank]


@pytest.mark.parametrize("sched,preset", [("zb1p", "tiny"), ("zb1p", "tiny-tied"), ("zbv", "tiny"),
                                          ("zbv", "tiny-tied")])
@pytest.mark.parametrize("Z,act,D", [(0, "full", 2), (1, "ckpt", 2), (2, "ckpt", 2), (3, "full", 2),
                                     (3, "ckpt", 2)])
def test_zero_bubble_programs_verify_and_run_under_every_zero_stage(Z, act, D, sched, preset):
    module = _compile(Z=Z, act=act, D=D, A=4, profile=trace_preset(preset, 64), sched=sched)
    _, res = run_module(module, mt3000(), memory_limit=False)
    assert res.step_seconds > 0
    for stage in find_pipeline(module).region.ops:
        ops = stage.region.ops
        pos = {(op.name, op.attributes.get("unit"), op.attributes.get("mb")): k for k, op in enumerate(ops)}
        for (name, unit, mb), k in pos.items():
            if name == "life.bwd_w":
                assert pos["life.bwd_i", unit, mb] < k       # W after its I
            if name == "life.grad_sync":                     # GradSync after the layer's last W
                assert k > pos["life.bwd_w", unit, 3]
        assert "life.bwd" not in {op.name for op in ops}


def test_i_and_w_split_the_backward_by_the_unit_s_dw_gemms():
    plan = plan_module(tiny(), parse_config("P=2,D=1,A=4,Full,v=2,sched=zb1p"), mt3000()).body.ops[0]
    for u in plan.region.ops:
        a = u.attributes
        (i_dur, i_c, i_d), (w_dur, w_c, w_d) = backward_parts(a)["I"], backward_parts(a)["W"]
        assert i_dur + w_dur == pytest.approx(a["bwd"]) and i_c + w_c == pytest.approx(a["bwd_compute"])
        assert i_d + w_d == pytest.approx(a["bwd_ddr"])
        # the embedding's gradient is a scatter, no GEMM: all I; elsewhere W is the dW GEMMs,
        # no larger than the dX ones, which I runs beside the attention core and the norms
        assert (w_dur == 0.0) if a["index"] == 0 else (0 < w_dur < 0.5 * a["bwd"])
    # what I keeps for W: its weighted GEMMs' output gradients, fp16 -- per decoder layer of the
    # tiny preset (seq 64, hidden 128, 2 KV heads of 32, FFN 344) q, o, down of the hidden size,
    # k and v of the KV size, gate and up of the FFN's; the head's the vocabulary's (512)
    w_grads = [int(u.attributes["w_grads"]) for u in plan.region.ops]
    assert w_grads == [0] + [64 * (3 * 128 + 2 * 64 + 2 * 344) * 2] * 4 + [64 * 512 * 2]
    # ... and their saved inputs X (dW = X^T dY): per decoder layer the normed input q, k and
    # v share, the attention output o reads, the normed input gate and up share, and
    # silu(gate) * up, which down reads; the head's final norm output; the embedding has no GEMM
    w_inputs = [int(u.attributes["w_inputs"]) for u in plan.region.ops]
    assert w_inputs == [0] + [64 * (3 * 128 + 344) * 2] * 4 + [64 * 128 * 2]


def test_a_projection_s_w_share_is_its_weight_gradient_flops_as_torch_counts_them():
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from ratc.step.rules import weight_gradient_share

    op = next(op for op in tiny().layers[0].ops if op.gemm is not None and op.bwd_weight_flops)
    m, n, k = op.gemm
    lin = torch.nn.Linear(k, n, bias=False)

    def backward_flops(x):
        y = lin(x)
        with FlopCounterMode(display=False) as count:
            y.backward(torch.ones_like(y))
        return count.get_total_flops()

    both = backward_flops(torch.randn(m, k, requires_grad=True))
    weights_only = backward_flops(torch.randn(m, k))
    assert op.bwd_input_flops + op.bwd_weight_flops == both
    assert weight_gradient_share(True, op.bwd_input_flops, op.bwd_weight_flops) == weights_only / both
    assert weight_gradient_share(False, op.bwd_input_flops, op.bwd_weight_flops) == 0.0


def test_a_w_reads_only_what_its_i_kept_so_saved_activations_die_with_the_i():
    module = _compile(pipeline="lower-to-life,schedule-1f1b")
    ops = find_pipeline(module).region.ops[0].region.ops
    w = next(op for op in ops if op.name == "life.bwd_w" and op.attributes["unit"] == 1)
    (kept,) = w.operands
    i_op = kept.owner
    assert i_op.name == "life.bwd_i" and (i_op.attributes["unit"], i_op.attributes["mb"]) == (1, w.attributes["mb"])
    a = find_plan(module).region.ops[1].attributes
    assert i_op.attributes["sizes"][-1] == int(a["w_grads"]) + int(a["w_inputs"])
    # the Forward's saved activations and the output gradient: their last reader is the I
    readers = {o: [op for op in ops if o in op.operands] for o in i_op.operands if o.owner.name in ("life.fwd", "life.recv")}
    assert {o.owner.name for o in readers} == {"life.fwd", "life.recv"}
    assert all(rs == [i_op] for o, rs in readers.items() if str(o.type) == "!life.saved")
    w.operands = [o for o in i_op.operands if o.owner.name == "life.fwd"]
    with pytest.raises(VerifyError, match="missing dependency life.bwd_i"):
        verify_op(w)


def test_the_verifier_refuses_a_w_issued_before_its_i():
    module = _compile(pipeline="lower-to-life,schedule-1f1b")
    ops = find_pipeline(module).region.ops[1].region.ops
    w = next(op for op in ops if op.name == "life.bwd_w")
    ops.remove(w)
    ops.insert(next(k for k, op in enumerate(ops) if op.name == "life.bwd_i"), w)
    with pytest.raises(VerifyError):
        verify(module)


def test_the_plan_text_and_ir_carry_the_schedule_only_when_not_1f1b():
    cand = parse_config("P=2,D=1,Z=1,b=1,A=4,Full,deadline,v=2,sched=zb1p")
    assert cand.sched == "zb1p" and cand.label() == "P=2,D=1,Z=1,b=1,A=4,Full,deadline,v=2,sched=zb1p"
    plan = plan_module(tiny(), cand, mt3000()).body.ops[0]
    assert plan.attributes["sched"] == "zb1p" and Plan.from_ir(plan).config == cand
    plain = plan_module(tiny(), parse_config("P=2,D=1,A=4,Full,v=2"), mt3000()).body.ops[0]
    assert "sched" not in plain.attributes and not any("bwd_w" in u.attributes for u in plain.region.ops)


@pytest.mark.parametrize("text,why", [
    ("P=2,D=1,A=4,Full,sched=zb1p", "v >= 2"),
    ("P=2,D=1,A=4,Full,v=2,sched=zbx", "sched must be one of 1f1b, zb1p, zbv"),
    ("P=2,D=1,A=8,Full,v=4,sched=zbv", "sched=zbv lays v = 2 chunks per rank out in a V"),
    ("P=2,D=1,A=4,Ckpt,v=2,sched=zb1p,corun=w", "corun=w places FSR's Recovers under a zero-bubble schedule"),
    ("P=2,D=1,A=4,FSR,v=2,corun=w", "needs FSR and sched=zb1p or zbv"),
    ("P=2,D=1,A=4,FSR,v=2,sched=zb1p,corun=f", "corun must be one of prev, w"),
])
def test_plans_zero_bubble_cannot_run_are_refused_saying_why(text, why):
    with pytest.raises(RatcError, match=why):
        parse_config(text)


def test_zero_bubble_plans_run_fsr_and_selective_layers():
    for text in ("P=2,D=1,Z=2,b=1,A=4,FSR,deadline,v=2,sched=zb1p",
                 "P=2,D=1,Z=2,b=1,A=4,Ckpt,deadline,keep=2s2l,v=2,sched=zbv",
                 "P=2,D=1,Z=2,b=1,A=4,FSR,deadline,keep=1s1l1f1s,v=2,sched=zb1p",
                 "P=2,D=1,Z=2,b=1,A=4,FSR,deadline,v=2,sched=zbv,corun=w"):
        cand = parse_config(text)
        assert cand.label() == text
        module = compile_program(tiny(), cand, mt3000(), CompileOptions(verify="each"))
        assert Plan.from_ir(find_plan(module)).config == cand


def test_i_and_w_task_names_read_back_and_describe_themselves():
    assert str(parse("0I3@12")) == "0I3@12" and parse("1W0@5-4").last == 4
    assert describe(parse("0W3@12"), 34) == "Backward to the weights (weight gradient) of micro-batch 3 " \
                                            "through layer 12 on stage 0"


def test_ratc_diagram_draws_the_i_and_w_of_a_zb1p_step():
    from ratc.planner.search import Planner
    from ratc.report.build import policy_diagram

    for sched in ("zb1p", "zbv"):
        data, res = policy_diagram(Planner(tiny(), mt3000()), 2, 4, "standard", v=2, sched=sched)
        assert sched.upper() in data.title and res.step_seconds > 0
        kinds = {(iv.kind, iv.label[0]) for iv in data.intervals if iv.lane == "F/B"}
        assert kinds == {("forward", "F"), ("backward", "I"), ("weight_grad", "W")}
    with pytest.raises(RatcError, match="interleaves v >= 2 virtual stages"):
        policy_diagram(Planner(tiny(), mt3000()), 2, 4, "standard", sched="zb1p")


def test_codegen_charges_w_its_dw_gemms_and_i_the_rest_of_the_backward():
    def cycles(sched, names):
        cand = Candidate(P=2, D=1, T=1, Z=1, b=1, A=2, act="full", pref="deadline", v=2, sched=sched)
        text = "lower-to-life,schedule-1f1b,codegen,memory-plan{budget=none}"
        module = compile_program(tiny(), cand, mt3000(), CompileOptions(pipeline=text, verify="each"))
        out: dict = {}
        for stage in find_pipeline(module).region.ops:
            for op in stage.region.ops:
                if op.name in names and op.attributes["mb"] == 0:
                    out[op.name, op.attributes["unit"]] = op.attributes
        return out

    whole = cycles("1f1b", ("life.bwd",))
    split = cycles("zb1p", ("life.bwd_i", "life.bwd_w"))
    for (_, unit), b in whole.items():
        i, w = split["life.bwd_i", unit], split["life.bwd_w", unit]
        assert i["cycles"] + w["cycles"] == b["cycles"]
        calls = lambda *ts: sum((Counter({r.name: n}) for t in ts for r, n in zip(t["kernels"], t["calls"])),  # noqa: E731
                                Counter())
        assert calls(i, w) == calls(b)
        # W runs the GEMMs whose shape is (k, n, m) of a forward (m, n, k): dW = x^T dy
        assert all(r.name.startswith("gemm_") for r in w["kernels"])

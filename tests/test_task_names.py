"""Task names (ratc.lifecycle.actions): every op's token parses back to its fields, listings
collapse consecutive layers losslessly, and schedule.txt carries its legend and a layer on
every per-layer token. Oracles: the ops' own attributes, and torch's `_Action` for the part
before the layer."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from torch.distributed.pipelining.schedules import _Action

from ratc.cli.main import main
from ratc.errors import RatcError
from ratc.ir import parse_module
from ratc.ir.core import Operation
from ratc.lifecycle.actions import LEGEND, Action, describe, parse, token, tokens
from ratc.lifecycle.lowering import find_pipeline
from ratc.program import load_program

# op name -> (kind letter, has a micro-batch, has a unit), written out here, not read from the module
OPS = {"life.fwd": ("F", True, True), "life.recover": ("R", True, True), "life.bwd": ("B", True, True),
       "life.grad_sync": ("G", False, True), "life.update": ("U", False, True), "life.prefetch": ("P", False, True),
       "life.reduce": ("RS", True, True), "life.gather": ("AG", True, True), "life.tie_sum": ("T", False, True),
       "life.param": ("PARAM", False, True), "life.opt": ("OPT", False, True),
       "life.step_end": ("STEP_END", False, False), "life.send": (None, True, False),
       "life.recv": (None, True, False)}
PHASES = {"fwd": "F", "rec": "R", "bwd": "B"}


@st.composite
def ops(draw):
    """(stage, op, the fields its name must give back)."""
    name = draw(st.sampled_from(sorted(OPS)))
    kind, has_mb, has_unit = OPS[name]
    p = draw(st.integers(0, 999))
    attrs, mb, unit, phase = {}, None, None, None
    if has_mb:
        attrs["mb"] = mb = draw(st.integers(0, 10_000))
    if has_unit:
        attrs["unit"] = unit = draw(st.integers(0, 999))
    if name == "life.gather":
        attrs["phase"] = draw(st.sampled_from(sorted(PHASES)))
        phase = PHASES[attrs["phase"]]
    if name in ("life.send", "life.recv"):
        attrs["dir"] = draw(st.sampled_from(["fwd", "bwd"]))
        kind = f"{name[5:].upper()}_{'F' if attrs['dir'] == 'fwd' else 'B'}"
    return p, Operation(name, attributes=attrs), (p, kind, mb, unit, unit, phase, None)


@given(ops(), st.none() | st.integers(0, 63))
def test_a_token_parses_back_to_its_ops_fields(case, ring):
    p, op, fields = case
    name = token(op, p)
    assert tuple(parse(name)) == fields
    assert re.fullmatch(r"\d+[A-Z_]+\d*(@\d+)?", name)
    # micro-batch before '@', unit after; torch's part is torch's own notation
    assert ("@" in name) == (fields[3] is not None)
    if fields[1] in ("F", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B"):
        assert str(_Action.from_str(name.split("@")[0])) == name.split("@")[0]
    if ring is not None:        # a ring collective's step on the VM
        assert parse(f"{name}#{ring}") == parse(name)._replace(ring=ring)


@given(st.integers(0, 99), st.sampled_from(["F", "R", "B", "G", "U", "P", "RS"]), st.integers(0, 99),
       st.integers(0, 99), st.integers(0, 99))
def test_a_range_token_round_trips(stage, kind, mb, first, last):
    a = Action(stage, kind, mb if kind in ("F", "R", "B", "RS") else None, first, last)
    assert parse(str(a)) == a
    assert str(a).endswith(f"@{first}" if first == last else f"@{first}-{last}")


@pytest.mark.parametrize("name,why", [
    ("0F3", "a F task names a micro-batch and a unit"), ("0G3@1", "a G task names a unit"),
    ("0SEND_F3@2-4", "a SEND_F task names a micro-batch"), ("0STEP_END@1", "neither"),
    ("F3@1", "not in action notation"), ("0X1@2", "not in action notation"), ("0F3@", "not in action notation"),
    ("0AG3@1", "not in action notation"), ("0F3@1-", "not in action notation"), ("wait 0G@1", "not in action"),
])
def test_a_name_outside_the_notation_is_refused_saying_why(name, why):
    with pytest.raises(RatcError, match=re.escape(why)):
        parse(name)


def _op(name, **attrs):
    return Operation(f"life.{name}", attributes=attrs)


def test_consecutive_layers_of_one_task_collapse_in_issue_order():
    listed = [_op("fwd", mb=0, unit=u) for u in (0, 1, 2)] + [_op("send", mb=0, dir="fwd")] + \
             [_op("bwd", mb=0, unit=u) for u in (2, 1)] + [_op("reduce", mb=0, unit=1)] + \
             [_op("bwd", mb=0, unit=0), _op("bwd", mb=1, unit=3), _op("bwd", mb=1, unit=5)] + \
             [_op("grad_sync", unit=u) for u in (5, 4, 3)] + [_op("update", unit=4)]
    # without comms a hidden reduce does not split a run; a gap in the layers or another
    # micro-batch does
    assert tokens(listed, 2) == ["2F0@0-2", "2B0@2-0", "2B1@3", "2B1@5", "2G@5-3", "2U@4"]
    assert tokens(listed, 2, comms=True) == ["2F0@0-2", "2SEND_F0", "2B0@2-1", "2RS0@1", "2B0@0", "2B1@3",
                                             "2B1@5", "2G@5-3", "2U@4"]
    # a run keeps its direction: 1, 2, 1 is two tokens
    assert tokens([_op("fwd", mb=4, unit=u) for u in (1, 2, 1)], 0) == ["0F4@1-2", "0F4@1"]


def test_the_long_form_names_the_embedding_the_layers_and_the_head():
    units = 6           # embedding, 4 decoder layers, head
    assert describe(parse("0F3@0"), units) == "Forward of micro-batch 3 through the embedding on stage 0"
    assert describe(parse("1B2@5"), units) == "Backward of micro-batch 2 through the head on stage 1"
    assert describe(parse("0R1@2"), units) == "Recover (recomputation) of micro-batch 1 through layer 2 on stage 0"
    assert describe(parse("1U@4"), units) == "UpdateShard of layer 4 on stage 1"
    assert describe(parse("0AG_B3@1#2"), units) == \
        "All-gather of layer 1's parameters for the backward of micro-batch 3 on stage 0 (ring step 2)"
    assert describe(parse("1RECV_F3"), units) == "Receive of micro-batch 3's activation from stage 0 on stage 1"
    assert describe(parse("0B3@4-1"), units) == "Backward of micro-batch 3 through layers 4 to 1 on stage 0"
    assert describe(parse("0F3@12")) == "Forward of micro-batch 3 through unit 12 on stage 0"


def _expanded(tok: str) -> list:
    """A listing's token as one (stage, kind, mb, unit) per op."""
    a = parse(tok)
    if a.unit is None:
        return [(a.stage, a.kind, a.mb, None)]
    step = 1 if a.last >= a.unit else -1
    return [(a.stage, a.kind, a.mb, u) for u in range(a.unit, a.last + step, step)]


def test_schedule_txt_has_the_legend_and_a_layer_on_every_per_layer_token(tmp_path):
    """A compiled P = 2 program's schedule.txt: the legend as '#' lines, then one line per
    stage whose tokens, ranges expanded, are the stage's F/R/B/G/U/P ops in program order."""
    out = tmp_path / "prog"
    assert main(["compile", "--preset", "tiny", "--plan", "P=2,D=2,Z=2,b=1,A=4,Ckpt,deadline", "--no-run",
                 "-o", str(out)]) == 0
    prog = load_program(out)
    text = prog.text("schedule.txt")
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert text.startswith(LEGEND) and header == LEGEND.splitlines()
    assert all(w in LEGEND for w in ("F Forward", "R Recover", "B Backward", "G GradSync", "U UpdateShard",
                                     "P PrefetchW", "'@'", "0 the embedding", "L+1 the head", "collapse"))
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    stages = find_pipeline(parse_module(prog.text("program.ir"), "program.ir")).region.ops
    assert [line.split(":")[0] for line in lines] == [f"stage {p}" for p in range(len(stages))] == ["stage 0", "stage 1"]
    letters = {"life.fwd": "F", "life.recover": "R", "life.bwd": "B", "life.grad_sync": "G", "life.update": "U",
               "life.prefetch": "P"}
    for p, (line, stage) in enumerate(zip(lines, stages)):
        toks = line.split(": ")[1].split()
        assert all("@" in t for t in toks) and {parse(t).kind for t in toks} == set(letters.values())
        want = [(p, letters[op.name], op.attributes.get("mb"), op.attributes["unit"])
                for op in stage.region.ops if op.name in letters]
        assert [x for t in toks for x in _expanded(t)] == want
        assert len(toks) < len(want)            # something collapsed

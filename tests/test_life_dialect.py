"""The life dialect: text round trip and the scheduled-program verifier rules."""

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.ir import parse_module, print_module, verify
from ratc.ir.attributes import ByteSize
from ratc.ir.verifier import VerifyError
from ratc.lifecycle.lowering import find_pipeline
from tiny_programs import compile_tiny

CONFIGS = [dict(Z=z, act=a, P=p, A=m, pref=pref) for z in (0, 1, 2, 3) for a in ("full", "ckpt", "fsr")
           for p, m, pref in ((2, 4, "deadline"), (3, 2, "bulk"))]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_print_parse_print_round_trip(cfg):
    module = compile_tiny(budget="plan", **cfg)
    text = print_module(module)
    again = parse_module(text, "roundtrip.ir")
    verify(again)
    assert print_module(again) == text


def _ops(module):
    return [op for stage in find_pipeline(module).region.ops for op in stage.region.ops]


@functools.lru_cache(maxsize=None)
def _programs():
    """Texts of a few scheduled programs (each test re-parses, so mutation is private)."""
    return {z: print_module(compile_tiny(Z=z, P=2, A=3, act="fsr" if z != 1 else "full")) for z in (0, 1, 2, 3)}


@pytest.fixture
def programs():
    return _programs()


@pytest.mark.parametrize("cfg", [dict(Z=0, act="ckpt"), dict(Z=1, act="full"), dict(Z=2, act="fsr"),
                                 dict(Z=3, act="fsr")], ids=lambda c: f"Z{c['Z']}-{c['act']}")
def test_removing_any_dependency_edge_is_caught(cfg):
    module = compile_tiny(P=2, A=2, **cfg)
    edges = 0
    for op in _ops(module):
        for i in range(len(op.operands)):
            v = op.operands.pop(i)
            with pytest.raises(VerifyError):
                verify(module)
            op.operands.insert(i, v)
            edges += 1
    verify(module)
    assert edges > 100


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_redirecting_a_dependency_to_another_value_of_the_same_type_is_caught(data):
    module = parse_module(_programs()[2])
    ops = _ops(module)
    op, i = data.draw(st.sampled_from([(op, i) for op in ops for i in range(len(op.operands))]))
    old = op.operands[i]
    stage_ops = op.block.ops
    earlier = [r for o in stage_ops[:stage_ops.index(op)] for r in o.results if r.type == old.type and r is not old]
    if not earlier:
        return
    op.operands[i] = data.draw(st.sampled_from(earlier))
    with pytest.raises(VerifyError):
        verify(module)


def test_every_rule_names_what_is_wrong(programs):
    def mutated(fn, z=2):
        module = parse_module(programs[z])
        fn(module)
        with pytest.raises(VerifyError) as info:
            verify(module)
        return str(info.value)

    def drop_saved(m):
        bwd = next(op for op in _ops(m) if op.name == "life.bwd" and op.attributes["unit"] == 2)
        bwd.operands.remove(next(v for v in bwd.operands if str(v.type) == "!life.rec"))
    assert "missing dependency life.recover(unit 2, mb 0)" in mutated(drop_saved)

    def drop_task(m):
        stage = find_pipeline(m).region.ops[1]
        sync = next(op for op in stage.region.ops if op.name == "life.grad_sync")
        stage.region.ops.remove(sync)
        for op in stage.region.ops:
            for r in sync.results:    # ZeRO >= 2: also the token freeing the last bucket's buffer
                if r in op.operands:
                    op.operands.remove(r)
    assert "missing" in mutated(drop_task)

    def recv_before_send(m):
        # Stage 0 waits for micro-batch 0's gradient before sending micro-batch 0 forward.
        s0 = find_pipeline(m).region.ops[0].region.ops
        recv = next(op for op in s0 if op.name == "life.recv" and op.attributes["mb"] == 0)
        s0.remove(recv)
        s0.insert(s0.index(next(op for op in s0 if op.name == "life.fwd")), recv)
    assert "the stages deadlock: stage 0 at recv bwd mb 0" in mutated(recv_before_send)

    def sends_swapped(m):
        # Stage 0 sends micro-batch 1's activation before micro-batch 0's, which stage 1
        # receives first: buffered, no deadlock, but NCCL would pair them the wrong way round.
        s0 = find_pipeline(m).region.ops[0].region.ops
        first, second = (next(op for op in s0 if op.name == "life.send" and op.attributes["mb"] == mb
                              and op.attributes["dir"] == "fwd") for mb in (0, 1))
        s0.remove(first)
        s0.insert(s0.index(second) + 1, first)
    assert ("stage 1 receives fwd mb 0 as message #0 from stage 0, which sends fwd mb 1 as its #0: messages "
            "between two stages must arrive in the order they are sent") in mutated(sends_swapped)

    def duplicate(m):
        s0 = find_pipeline(m).region.ops[0].region.ops
        s0.insert(len(s0) - 1, s0[-2])
    assert "appears twice" in mutated(duplicate)


def test_inplace_write_before_last_read_is_caught(programs):
    """The stage rule itself, on the stage alone: in a program whose every task has its role's
    operands, an in-place write is its buffer's only reader, so this mutation (which gives the
    overwritten buffer a second reader) also breaks the reader's role, and verify() may report
    either."""
    from ratc.lifecycle.checks import check_stage

    module = parse_module(programs[0])
    stage = find_pipeline(module).region.ops[0]
    s0 = stage.region.ops
    # ZeRO-0 GradSync all-reduces the accumulated gradient in place; give it a later reader.
    sync = next(op for op in s0 if op.name == "life.grad_sync")
    upd = next(op for op in s0 if op.name == "life.update" and op.attributes["unit"] == sync.attributes["unit"])
    s0.remove(sync)
    s0.insert(s0.index(sync.operands[0].owner) + 1, sync)
    check_stage(stage)                     # the order alone is fine
    upd.operands[0] = sync.operands[0]     # reads the buffer GradSync overwrote
    unit = sync.attributes["unit"]
    with pytest.raises(VerifyError, match=rf"stage 0: 'life.grad_sync' \(unit {unit}\) overwrites a buffer that "
                                          rf"'life.update' \(unit {unit}\) still reads later"):
        check_stage(stage)
    with pytest.raises(VerifyError):
        verify(module)


def test_wrong_peer_and_micro_batch_range(programs):
    module = parse_module(programs[2])
    send = next(op for op in _ops(module) if op.name == "life.send")
    send.attributes["peer"] = 5
    with pytest.raises(VerifyError, match="no matching recv on stage 5"):
        verify(module)
    module = parse_module(programs[2])
    fwd = next(op for op in _ops(module) if op.name == "life.fwd")
    fwd.attributes["mb"] = 9
    with pytest.raises(VerifyError, match=r"missing task life.fwd \(unit 0, mb 0\)"):
        verify(module)


@pytest.mark.parametrize("op_name, attr, message", [
    ("life.param", "unit", "'life.param': attribute 'unit' must be an integer"),
    ("life.send", "peer", "'life.send': attribute 'peer' must be an integer"),
    ("life.stage", "stage", "'life.stage': attribute 'stage' must be an integer"),
])
def test_a_malformed_attribute_is_named_before_the_stage_rules_it_breaks(programs, op_name, attr, message):
    """A wrong-typed identity attribute used to surface as a stage-level consequence
    ('missing task', 'no matching recv', 'stage #0 is numbered 0')."""
    module = parse_module(programs[2])
    ops = find_pipeline(module).region.ops if op_name == "life.stage" else _ops(module)
    op = next(o for o in ops if o.name == op_name)
    op.attributes[attr] = str(op.attributes[attr])
    with pytest.raises(VerifyError, match=message) as info:
        verify(module)
    assert info.value.op is op


def test_parse_error_points_at_the_bad_op(programs):
    text = programs[2].replace('true, kind = "reduce-scatter"', 'true, kind = "all-reduce"', 1)
    with pytest.raises(VerifyError, match="kind must match ZeRO-2") as info:
        verify(parse_module(text, "bad.ir"))
    line = next(n for n, t in enumerate(text.splitlines(), 1) if 'kind = "all-reduce"' in t and "life.grad_sync" in t)
    assert f"bad.ir:{line}:" in str(info.value)


def test_corun_recover_must_follow_its_host(programs):
    def mutated(fn):
        module = parse_module(programs[2])
        fn(find_pipeline(module).region.ops[0].region.ops)
        with pytest.raises(VerifyError) as info:
            verify(module)
        return str(info.value)

    def guest(ops):
        return next(i for i, op in enumerate(ops) if op.attributes.get("placement") == "corun")

    def drop_host_mark(ops):
        g = guest(ops)
        host = next(op for op in reversed(ops[:g]) if op.name in ("life.fwd", "life.bwd"))
        del host.attributes["corun"]
    assert "must follow its host" in mutated(drop_host_mark)

    def behind_a_receive(ops):
        g = guest(ops)
        op = ops.pop(g)
        recv = next(i for i in range(g, len(ops)) if ops[i].name == "life.recv")
        ops.insert(recv + 1, op)
    assert "carries 'corun' but no Recover co-runs with it" in mutated(behind_a_receive)

    def host_alone(ops):
        ops[guest(ops)].attributes["placement"] = "bwd"
    assert "carries 'corun' but no Recover co-runs with it" in mutated(host_alone)

    def stream_beside_a_forward(ops):
        g = next(i for i, op in enumerate(ops) if op.attributes.get("placement") == "corun"
                 and ops[i - 1].name == "life.fwd")
        ops[g].attributes["stream"] = ByteSize(1)
    assert "carries 'stream' but does not co-run with a Backward" in mutated(stream_beside_a_forward)

    def stream_backward_time(ops):
        ops[guest(ops)].attributes.update(placement="bwd", stream=ByteSize(1))
    assert "carries 'stream'" in mutated(stream_backward_time)


def test_a_plan_with_a_huge_stage_count_is_an_error_not_an_allocation():
    # P lives in the plan only (the pipeline repeats it nowhere): a huge P is refused by
    # comparing counts, before anything is sized by it
    from ratc.ir import parse_module, print_module
    from tiny_programs import tiny_plan

    text = print_module(tiny_plan(P=1, A=1)).replace("P = 1,", "P = 1000000000000000,", 1)
    with pytest.raises(VerifyError, match=r"P = 1000000000000000, but its units are on stages 0..0 only"):
        verify(parse_module(text))
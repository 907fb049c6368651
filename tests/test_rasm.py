"""Assembler/disassembler round trips and located errors for malformed .rasm."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.codegen.assembler import assemble, disassemble
from ratc.codegen.isa import Flags, Label, Mem, Reg
from ratc.codegen.program import Buffer, Instr, KernelProgram, Loop, assign_slots
from ratc.errors import LocatedError
from ratc.platform import load_platform

P = load_platform("mt3000")
BUFFERS = (Buffer("A", "ddr", "f16", (64, 64)), Buffer("G", "gsm", "f32", (4096,)),
           Buffer("S", "sm", "f16", (1024,)), Buffer("M", "am", "f32", (2048,)))

reg = st.integers(0, 31).map(lambda i: Reg("r", i))
quad = st.integers(0, 15).map(lambda i: Reg("q", i))
vec = st.integers(0, 63).map(lambda i: Reg("v", i))
acc = st.integers(0, 60).map(lambda i: Reg("v", i))
imm = st.integers(-5000, 5000)
mem1 = st.builds(Mem, st.sampled_from(["G", "S", "M"]), st.one_of(st.none(), reg), imm)
sm = st.builds(Mem, st.just("S"), st.one_of(st.none(), reg), imm)
am = st.builds(Mem, st.just("M"), st.one_of(st.none(), reg), imm)
mem2 = st.builds(lambda r, o, c, co: Mem("A", r, o, c, co), st.one_of(st.none(), reg), imm,
                 st.one_of(st.none(), reg), imm)

INSTRS = {
    "vmac": st.tuples(acc, quad, vec), "vmacz": st.tuples(acc, quad, vec), "vsub": st.tuples(vec, vec, vec),
    "li": st.tuples(reg, imm), "addi": st.tuples(reg, reg, imm), "add": st.tuples(reg, reg, reg),
    "remi": st.tuples(reg, reg, st.integers(1, 99)), "sldq": st.tuples(quad, sm), "vld": st.tuples(vec, am),
    "vst": st.tuples(vec, am), "wait": st.tuples(st.integers(0, 7)),
    "dma": st.tuples(st.integers(0, 7), mem1, mem2, st.integers(1, 64), st.just(64), st.integers(64, 99),
                     st.just(64), st.sampled_from([Flags(("clip",)), Flags(("t", "clip")), Flags(("add", "clip"))])),
}
instr = st.sampled_from(sorted(INSTRS)).flatmap(lambda op: INSTRS[op].map(lambda ops: Instr(op, ops)))


def _bundle(instrs):
    """A legal bundle from a candidate list: drop what does not fit a slot or writes a register twice."""
    kept, written = [], set()
    for ins in instrs:
        w = set(ins.regs_written(P.vliw.vmac_rows))
        if w & written:
            continue
        try:
            assign_slots(kept + [ins])
        except LocatedError:
            continue
        kept.append(ins)
        written |= w
    return assign_slots(kept)


bundles = st.lists(instr, max_size=6).map(_bundle)


@st.composite
def bodies(draw, depth=0):
    items = []
    for _ in range(draw(st.integers(1, 4))):
        if depth < 2 and draw(st.booleans()):
            label = f"L{depth}_{len(items)}"
            inner = draw(bodies(depth + 1))
            last = inner[-1] if not isinstance(inner[-1], Loop) else assign_slots([])
            inner = [x for x in inner[:-1]] if not isinstance(inner[-1], Loop) else list(inner)
            inner.append(assign_slots(list(last.instrs) + [Instr("sbr", (Label(label),))]))
            items.append(Loop(label, draw(st.integers(1, 9)), tuple(inner)))
        else:
            items.append(draw(bundles))
    return items


@settings(max_examples=60, deadline=None)
@given(bodies())
def test_disassemble_assemble_round_trip(body):
    program = KernelProgram("k", 4, BUFFERS, tuple(body))
    text = disassemble(program)
    again = assemble(text, P, "rt.rasm")
    assert again == program
    assert disassemble(again) == text


GOOD = """.kernel k
.dsps 1
.buffer ddr A f16 [4, 64]
.buffer am B f16 [256]
{ li r1, 0 }
lp: loop 3 {
    { vld v0, B[r1] | addi r1, r1, 64 }
    { vmacz v4, q0, v0 | sbr lp }
}
"""


def _error(text: str) -> str:
    with pytest.raises(LocatedError) as exc:
        assemble(text, P, "bad.rasm")
    return str(exc.value)


@pytest.mark.parametrize("old, new, where, words", [
    ("vld v0, B[r1]", "vld q0, B[r1]", "bad.rasm:7:7:", "expected a v register"),
    ("{ li r1, 0 }", "{ li r1, 0 ", "bad.rasm:6:1:", "unexpected"),
    ("sbr lp", "sbr lq", "bad.rasm:8:26:", "back-branch"),
    ("[256]", "[2560000]", "bad.rasm:4:1:", "overflows AM"),
    ("addi r1, r1, 64", "vld v1, B[r2] | vld v2, B[r3]", "bad.rasm:7:39:", "no free slot"),
    ("vmacz v4", "vmacz v62", "bad.rasm:8:7:", "out of range"),
    ("vld v0, B[r1]", "vld v0, X[r1]", "bad.rasm:7:7:", "unknown buffer 'X'"),
    ("{ li r1, 0 }", "{ frob r1 }", "bad.rasm:5:3:", "unknown instruction 'frob'"),
    ("loop 3", "loop 0", "bad.rasm:6:1:", "at least 1"),
    ("{ li r1, 0 }", "{ li r1, 0 | li r1, 2 }", "bad.rasm:5:14:", "written twice"),
    ("{ li r1, 0 }", "{ li r1, 0 } @", "bad.rasm:5:14:", "unexpected character '@'"),
    ("vld v0, B[r1]", "vld v0, A[r1]", "bad.rasm:7:7:", "'vld' accesses AM only; A is in DDR"),
    (".dsps 1", ".dsps 0", "bad.rasm:2:1:", ".dsps 0: the cluster has 24 DSPs"),
    (".dsps 1", ".dsps 1\n.dsps 2", "bad.rasm:3:1:", "a second '.dsps' directive"),
    ("{ li r1, 0 }", "{ divi r1, r0, 0 }", "bad.rasm:5:3:", "division by zero"),
])
def test_malformed_rasm_is_located_with_a_caret(old, new, where, words):
    message = _error(GOOD.replace(old, new))
    head, src, caret = message.splitlines()
    assert head.startswith(where) and words in head, message
    col = int(where.split(":")[2])
    assert caret == " " * (col - 1) + "^"


def test_good_program_assembles_and_round_trips():
    program = assemble(GOOD, P, "good.rasm")
    assert disassemble(assemble(disassemble(program), P)) == disassemble(program)


def test_loops_nested_too_deep_are_an_error_not_a_recursion():
    for depth, where in ((100, "bad.rasm:67:1:"), (3000, "bad.rasm:")):
        body = "".join(f"l{i}: loop 1 {{\n" for i in range(depth)) + "{ li r1, 0 }\n" + "}\n" * depth
        message = _error(".kernel k\n.dsps 1\n" + body)
        assert message.startswith(where) and "nested" in message, message[:200]

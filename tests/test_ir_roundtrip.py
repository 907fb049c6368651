"""Property tests: random modules built from the op registry survive print -> parse -> print."""

import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ratc.ir import (REGISTRY, ByteSize, Module, OpaqueType, Operation, SymbolRef, TensorType,
                     VerifyError, load_dialects, parse_module, print_module, verify)
from ratc.ir.core import Block
from ratc.ir.types import DTYPE_BYTES

load_dialects()

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
FLOATS = st.floats(allow_nan=False, width=64) | st.sampled_from([math.inf, -math.inf, 0.0, -0.0, 1e300])
TENSORS = st.builds(TensorType, st.lists(st.integers(1, 4096), max_size=3), st.sampled_from(sorted(DTYPE_BYTES)))


def attr_value(draw, kind, choices, symbols, depth=0):
    """A random attribute value of the given registry kind."""
    if choices:
        return draw(st.sampled_from(choices))
    if kind == "any":
        kinds = ["int", "float", "str", "bool", "bytes", "list", "dict"] + (["symref"] if symbols else [])
        kind = draw(st.sampled_from(kinds if depth < 2 else kinds[:5]))
    if kind == "int":
        return draw(st.integers(-2**63, 2**63))
    if kind == "float":
        return draw(FLOATS)
    if kind == "str":
        return draw(TEXT)
    if kind == "bool":
        return draw(st.booleans())
    if kind == "bytes":
        return ByteSize(draw(st.integers(0, 2**50)))
    if kind == "symref":
        return SymbolRef(draw(st.sampled_from(symbols)))
    if kind.startswith("list<"):
        inner = kind[5:-1]
        return [attr_value(draw, inner, (), symbols, depth + 1) for _ in range(draw(st.integers(0, 3)))]
    if kind == "list":
        return [attr_value(draw, "any", (), symbols, depth + 1) for _ in range(draw(st.integers(0, 3)))]
    if kind == "dict":
        keys = draw(st.lists(NAMES, max_size=3, unique=True))
        return {k: attr_value(draw, "any", (), symbols, depth + 1) for k in keys}
    raise AssertionError(kind)


def result_type(draw, spec):
    if spec.constraint == "tensor":
        return draw(TENSORS)
    if spec.constraint.startswith("!"):
        return OpaqueType.parse(spec.constraint)
    return draw(TENSORS | st.builds(OpaqueType, NAMES, NAMES))


def make_op(draw, opdef, pool, symbols, depth):
    """A structurally valid op of this definition, or None if the pool cannot feed it."""
    operands = []
    for i, spec in enumerate(opdef.operands):
        fits = [v for v in pool if spec.accepts(v.type)]
        count = draw(st.integers(0, 2)) if spec.variadic else 1
        if count and not fits:
            return None
        operands += [draw(st.sampled_from(fits)) for _ in range(count)]
    types = []
    for spec in opdef.results:
        count = draw(st.integers(0, 2)) if spec.variadic else 1
        types += [result_type(draw, spec) for _ in range(count)]
    attrs = {}
    for name, spec in opdef.attrs.items():
        if spec.kind in ("symref", "list<symref>") and not symbols:
            if spec.required:
                return None
            continue
        if spec.required or draw(st.booleans()):
            attrs[name] = attr_value(draw, spec.kind, spec.choices, symbols)
    sym = None
    if opdef.symbol:
        sym = f"s{len(symbols)}"
        symbols.append(sym)
    region = None
    if opdef.region:
        region = Block()
        if depth < 2:
            fill_block(draw, region, list(pool), symbols, depth + 1, max_ops=3)
    names = [draw(st.none() | NAMES) for _ in types]
    return Operation(opdef.name, operands, types, attrs, sym_name=sym, region=region, result_names=names)


def fill_block(draw, block, pool, symbols, depth, max_ops):
    ops = sorted(REGISTRY.values(), key=lambda d: d.name)
    for _ in range(draw(st.integers(0, max_ops))):
        op = make_op(draw, draw(st.sampled_from(ops)), pool, symbols, depth)
        if op is not None:
            block.append(op)
            pool.extend(op.results)


@st.composite
def modules(draw):
    m = Module(draw(st.none() | NAMES), {k: attr_value(draw, "any", (), []) for k in
                                          draw(st.lists(NAMES, max_size=2, unique=True))})
    fill_block(draw, m.body, [], [], 0, max_ops=12)
    return m


def outcome(module):
    try:
        verify(module)
        return None
    except VerifyError as exc:
        return exc.message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_print_parse_print_is_identical(module):
    text = print_module(module)
    again = parse_module(text, "<roundtrip>")
    assert print_module(again) == text
    # Same verdict: structurally valid modules stay valid, op-specific failures stay identical.
    assert outcome(again) == outcome(module)


def test_every_registered_op_round_trips():
    for name, opdef in sorted(REGISTRY.items()):
        # Feed every operand slot with a fresh value of an acceptable type.
        m = Module("every")
        m.body.append(Operation("test.func", sym_name="target", region=Block()))
        operands = []
        for spec in opdef.operands:
            ty = (TensorType([2], "f32") if spec.constraint in ("any", "tensor")
                  else OpaqueType.parse(spec.constraint))
            producer = Operation("test.const", (), [ty], {"value": 0.0})
            m.body.append(producer)
            operands.append(producer.result)
        types = [TensorType([3], "f16") if s.constraint in ("any", "tensor") else OpaqueType.parse(s.constraint)
                 for s in opdef.results]
        attrs = {}
        for key, spec in opdef.attrs.items():
            if spec.choices:
                attrs[key] = spec.choices[0]
            else:
                attrs[key] = {"int": 1, "float": 0.5, "str": "x", "bool": True, "bytes": ByteSize(1024),
                              "symref": SymbolRef("target"), "list": [1], "dict": {"k": 1}, "any": 1,
                              "list<int>": [1], "list<str>": ["a"], "list<float>": [1.0],
                              "list<symref>": [SymbolRef("target")]}[spec.kind]
        m.body.append(Operation(name, operands, types, attrs,
                                sym_name="sym" if opdef.symbol else None,
                                region=Block() if opdef.region else None))
        text = print_module(m)
        again = parse_module(text)
        assert print_module(again) == text, name
        assert outcome(again) == outcome(m), name


@given(st.lists(st.integers(1, 10**6), max_size=4), st.sampled_from(sorted(DTYPE_BYTES)))
def test_tensor_type_text_round_trips(shape, dtype):
    t = TensorType(shape, dtype)
    assert TensorType.parse(str(t)) == t
    assert t.nbytes == math.prod(shape) * DTYPE_BYTES[dtype]


@settings(max_examples=500, deadline=None)
@given(st.text(), st.lists(st.integers(), max_size=6))
def test_strings_and_int_lists_print_as_json_does(text, ints):
    """The printer's fast paths (plain strings, lists of ints) agree with json.dumps, its oracle."""
    import json

    from ratc.ir.attributes import format_attr

    assert format_attr(text) == json.dumps(text, ensure_ascii=False)
    assert format_attr(ints) == json.dumps(ints)
    assert format_attr(["x", True, 1, 2.5]) == '["x", true, 1, 2.5]'


# Values that compare (and hash) equal but print apart: the printer's per-run memo of
# attribute texts must keep each pair apart.
_LOOKALIKES = [0.0, -0.0, 1, True, 0, False, 1.0, [1], [True], [1.0], [1, True], [1, 1], [], ["1"], "1",
               ByteSize(1), [SymbolRef("a")], [SymbolRef("a"), "a"], math.nan, [0.0], [-0.0]]


@settings(max_examples=200, deadline=None)
@example([0.0, -0.0, 0, False, 1, True, 1.0, [1], 1, [1, 1], [1, True], [1.0], [], "1", ["1"], ByteSize(1)])
@given(st.lists(st.sampled_from(_LOOKALIKES) | st.lists(st.sampled_from(_LOOKALIKES[:12]), max_size=3),
                min_size=1, max_size=12))
def test_repeated_attribute_values_print_as_each_alone(values):
    """Each op of a module prints as it does alone (the memo holds nothing for it), and
    every value as json.dumps does (floats as repr)."""
    import json

    from ratc.ir.printer import print_op

    ops = [Operation("test.attrs", attributes={"a": v}) for v in values]
    m = Module(None, {})
    for op in ops:
        m.body.append(op)
    lines = print_module(m).splitlines()[1:-1]
    assert lines == ["  " + print_op(op) for op in ops]
    for v, line in zip(values, lines):
        if isinstance(v, list) and all(type(x) in (int, bool, str) for x in v):
            assert line == f"  test.attrs {{a = {json.dumps(v)}}}"
    assert print_module(Module(None, {"x": 0.0, "y": -0.0})).startswith("module {x = 0.0, y = -0.0}")

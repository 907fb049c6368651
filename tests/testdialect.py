"""A small dialect used only by the foundation tests: it exercises every registry feature."""

from ratc.ir.registry import Dialect
from ratc.ir.verifier import VerifyError


def _same_types(op):
    a, b = op.operands
    if a.type != b.type or op.result.type != a.type:
        raise VerifyError(f"'{op.name}' needs operands and result of one type, got {a.type}, {b.type} -> "
                          f"{op.result.type}", op)


TEST = Dialect("test", "ops for testing the IR machinery")
TEST.op("const", "a constant tensor", results=["out:tensor"], attrs={"value": "float"}, pure=True)
TEST.op("add", "elementwise sum", operands=["a:tensor", "b:tensor"], results=["out:tensor"],
        pure=True, verify=_same_types)
TEST.op("print", "a side effect", operands=["x"])
TEST.op("func", "a symbol with a body", symbol=True, region=True, attrs={"repeat": "int?"})
TEST.op("call", "refers to a symbol", operands=["args*"], results=["outs*"], attrs={"callee": "symref"})
TEST.op("split", "two results", operands=["x:tensor"], results=["lo:tensor", "hi:tensor"], pure=True)
TEST.op("token", "an opaque value", results=["t:!test.tok"], pure=True)
TEST.op("wait", "consumes tokens", operands=["ts:!test.tok*"])
TEST.op("attrs", "every attribute kind", attrs={
    "i": "int?", "f": "float?", "s": "str?", "b": "bool?", "n": "bytes?", "r": "symref?",
    "l": "list?", "d": "dict?", "li": "list<int>?", "ls": "list<str>?", "e": "fast|slow?",
    "a": "any?"})

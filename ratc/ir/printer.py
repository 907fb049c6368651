"""The deterministic MLIR-like text printer, driven only by the ops' data."""

from __future__ import annotations

from ratc.ir.attributes import ByteSize, SymbolRef, format_attr
from ratc.ir.core import Module, Operation, Value


class _Namer:
    """Assigns each value a module-unique printed name, keeping unique name hints."""

    def __init__(self):
        self.names: dict[Value, str] = {}
        self.taken: set[str] = set()
        self.counter = 0
        # The next suffix to try per repeated hint: the smallest free `hint_i` only grows
        # (names are never released), so each search resumes where the last one ended and
        # a hint repeated n times costs O(n) in all, not O(n^2).
        self.suffix: dict[str, int] = {}

    def name(self, v: Value) -> str:
        got = self.names.get(v)
        if got is not None:
            return got
        hint = v.name
        if hint is None:
            while str(self.counter) in self.taken:
                self.counter += 1
            hint = str(self.counter)
            self.counter += 1
        elif hint in self.taken:
            i = self.suffix.get(hint, 1)
            while f"{hint}_{i}" in self.taken:
                i += 1
            self.suffix[hint] = i + 1
            hint = f"{hint}_{i}"
        self.taken.add(hint)
        self.names[v] = hint
        return hint

    def use(self, v: Value) -> str:
        # An operand defined nowhere in the printed text (a malformed module) still prints.
        return self.names.get(v) or self.name(v)


# Attribute values whose text the printer keeps for its run (keyed by kind and value): a
# program's tasks repeat a few sizes, durations, kernel lists and tiers tens of thousands of times.
_MEMO_SCALARS = frozenset({int, str, bool, ByteSize})


def _memo_key(k: str, v):
    """A key under which `k = v` prints the same text for every equal key, or None."""
    t = type(v)
    if t is float:
        return (k, v) if v else None        # (0.0 and -0.0 are equal keys but print apart)
    if t in _MEMO_SCALARS:
        return (k, t, v)
    if t is not list:
        return None
    types = set(map(type, v))
    if len(types) != 1:
        return (k, list) if not v else None
    e = types.pop()
    if e is int or e is str:
        return (k, list, e, *v)
    if e is SymbolRef:
        return (k, list, e, *[r.name for r in v])
    return None


def _attr_dict(attrs: dict, memo: dict) -> str:
    parts = []
    for k in sorted(attrs):
        v = attrs[k]
        key = _memo_key(k, v)
        if key is None:
            parts.append(f"{k} = {format_attr(v)}")
            continue
        text = memo.get(key)
        if text is None:
            text = memo[key] = f"{k} = {format_attr(v)}"
        parts.append(text)
    return "{" + ", ".join(parts) + "}"


def _print_ops(ops, namer: _Namer, indent: str, out: list[str], memo: dict) -> None:
    for op in ops:
        parts = [indent]
        if op.results:
            parts.append(", ".join("%" + namer.name(r) for r in op.results))
            parts.append(" = ")
        parts.append(op.name)
        if op.sym_name is not None:
            parts.append(" @" + op.sym_name)
        if op.operands:
            parts.append("(" + ", ".join("%" + namer.use(v) for v in op.operands) + ")")
        if op.attributes:
            parts.append(" " + _attr_dict(op.attributes, memo))
        if op.results:
            if len(op.results) == 1:
                parts.append(f" : {op.results[0].type}")
            else:
                parts.append(" : (" + ", ".join(str(r.type) for r in op.results) + ")")
        if op.region is not None:
            parts.append(" {")
            out.append("".join(parts))
            _print_ops(op.region.ops, namer, indent + "  ", out, memo)
            out.append(indent + "}")
        else:
            out.append("".join(parts))


def print_module(module: Module) -> str:
    """The module's complete text form, ending in a newline."""
    head = "module"
    if module.name is not None:
        head += " @" + module.name
    memo: dict = {}
    if module.attributes:
        head += " " + _attr_dict(module.attributes, memo)
    out = [head + " {"]
    _print_ops(module.body.ops, _Namer(), "  ", out, memo)
    out.append("}")
    return "\n".join(out) + "\n"


def print_op(op: Operation) -> str:
    """One op (and its region) in text form, for messages and debugging."""
    out: list[str] = []
    _print_ops([op], _Namer(), "", out, {})
    return "\n".join(out)

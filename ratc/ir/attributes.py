"""Attribute values: Python ints, floats, strings, bools, lists and dicts, plus symbol refs and byte sizes."""

from __future__ import annotations

import json


class SymbolRef:
    """A reference to a symbol (an op with a sym_name), printed as @name."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        return f"@{self.name}"

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return isinstance(other, SymbolRef) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("@", self.name))


class ByteSize:
    """A byte count, printed in the largest unit that divides it exactly (e.g. 20GB, 64KiB, 7B)."""

    __slots__ = ("n",)
    UNITS = (("TiB", 2**40), ("TB", 10**12), ("GiB", 2**30), ("GB", 10**9),
             ("MiB", 2**20), ("MB", 10**6), ("KiB", 2**10), ("KB", 10**3))

    def __init__(self, n: int):
        self.n = int(n)

    def __str__(self) -> str:
        for unit, scale in self.UNITS:
            if self.n and self.n % scale == 0:
                return f"{self.n // scale}{unit}"
        return f"{self.n}B"

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return isinstance(other, ByteSize) and other.n == self.n

    def __hash__(self) -> int:
        return hash(("B", self.n))

    def __int__(self) -> int:
        return self.n


def _format_str(value: str) -> str:
    # json.dumps escapes only quotes, backslashes and control characters
    if value.isprintable() and '"' not in value and "\\" not in value:
        return '"' + value + '"'
    return json.dumps(value, ensure_ascii=False)


def _format_list(value) -> str:
    if set(map(type, value)) <= _PLAIN:     # (sizes, buffers, calls, kernels: on every task)
        return "[" + ", ".join(map(str, value)) + "]"
    return "[" + ", ".join(map(format_attr, value)) + "]"


def _format_dict(value: dict) -> str:
    return "{" + ", ".join([f"{k} = {format_attr(value[k])}" for k in sorted(value)]) + "}"


# The printer formats every attribute of every op, so it dispatches on the exact type
# (a subclass is no attribute value). A float's repr is its IR text, nan and +-inf included.
_FORMATS = {bool: lambda v: "true" if v else "false", int: str, float: repr, str: _format_str,
            list: _format_list, tuple: _format_list, dict: _format_dict, SymbolRef: str, ByteSize: str}
_PLAIN = frozenset({int, SymbolRef, ByteSize})     # element types whose str() is their IR text


def format_attr(value) -> str:
    """Print an attribute value in the IR's text form."""
    fmt = _FORMATS.get(type(value))
    if fmt is None:
        raise TypeError(f"unsupported attribute value {value!r} of type {type(value).__name__}")
    return fmt(value)


def attr_kind(value) -> str:
    """The kind name of an attribute value, as used in op definitions."""
    if isinstance(value, bool):
        return "bool"
    return {int: "int", float: "float", str: "str", list: "list", tuple: "list", dict: "dict",
            SymbolRef: "symref", ByteSize: "bytes"}.get(type(value), type(value).__name__)


def freeze(value):
    """A hashable form of an attribute value (for CSE keys)."""
    if isinstance(value, (list, tuple)):
        return ("[", tuple(freeze(v) for v in value))
    if isinstance(value, dict):
        return ("{", tuple((k, freeze(value[k])) for k in sorted(value)))
    if isinstance(value, float):
        return ("f", repr(value))
    return (type(value).__name__, value)

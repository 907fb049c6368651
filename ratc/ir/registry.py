"""The op registry: each dialect declares its ops once; printer, parser and verifier read it.

An op definition is compact text, e.g.

    GRAPH.op("matmul", "a GEMM", operands=["a:tensor", "b:tensor"], results=["out:tensor"],
             attrs={"flops": "int", "name": "str?"}, pure=True)

Operand/result specs are ``name[:constraint][*]`` where the constraint is ``any`` (default),
``tensor`` or an opaque type such as ``!life.grad`` and ``*`` marks a variadic tail. Attribute
specs are a kind (``int float str bool bytes symref list dict any``, ``list<int>``,
``list<str>``, ``list<float>``, ``list<symref>``, or an enum ``a|b|c``) with a trailing ``?`` when optional.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ratc.ir.attributes import ByteSize, SymbolRef
from ratc.ir.types import OpaqueType, TensorType, Type

ATTR_KINDS = ("int", "float", "str", "bool", "bytes", "symref", "list", "dict", "any",
              "list<int>", "list<str>", "list<float>", "list<symref>")


@dataclass(frozen=True)
class ArgSpec:
    """One operand or result slot of an op."""

    name: str
    constraint: str = "any"
    variadic: bool = False

    @classmethod
    def parse(cls, text: str) -> "ArgSpec":
        variadic = text.endswith("*")
        name, _, constraint = text.rstrip("*").partition(":")
        return cls(name, constraint or "any", variadic)

    def accepts(self, ty: Type) -> bool:
        if self.constraint == "any":
            return True
        if self.constraint == "tensor":
            return isinstance(ty, TensorType)
        return isinstance(ty, OpaqueType) and str(ty) == self.constraint


@dataclass(frozen=True)
class AttrSpec:
    """One attribute of an op: its kind, whether it is required, and enum choices."""

    name: str
    kind: str
    required: bool = True
    choices: tuple[str, ...] = ()

    @classmethod
    def parse(cls, name: str, text: str) -> "AttrSpec":
        required = not text.endswith("?")
        kind = text.rstrip("?")
        if "|" in kind:
            return cls(name, "str", required, tuple(kind.split("|")))
        if kind not in ATTR_KINDS:
            raise ValueError(f"attribute {name!r}: unknown kind {kind!r}")
        return cls(name, kind, required)

    def check(self, value) -> str | None:
        """None if the value fits this spec, else what is wrong with it."""
        kind = self.kind
        ok = ATTR_CHECKERS[kind](value)
        if not ok:
            return f"attribute '{self.name}' must be {_KIND_NAMES.get(kind, kind)}"
        if self.choices and value not in self.choices:
            return f"attribute '{self.name}' must be one of {', '.join(map(repr, self.choices))}"
        return None


# Attribute kinds that a value's exact Python type decides (the verifier tests these inline).
EXACT_KINDS = {"int": int, "float": float, "str": str, "bool": bool, "bytes": ByteSize, "symref": SymbolRef,
               "list": list, "dict": dict}
# One checker per attribute kind (the verifier calls these for every attribute of every op).
ATTR_CHECKERS = {
    **{kind: (lambda v, t=t: type(v) is t) for kind, t in EXACT_KINDS.items()},
    "any": lambda v: True,
    # set(map(type, v)) runs in C: these lists (sizes, buffers, kernels) are on every task
    "list<int>": lambda v: type(v) is list and set(map(type, v)) <= {int},
    "list<str>": lambda v: type(v) is list and set(map(type, v)) <= {str},
    "list<float>": lambda v: type(v) is list and set(map(type, v)) <= {float},
    "list<symref>": lambda v: type(v) is list and set(map(type, v)) <= {SymbolRef},
}
_KIND_NAMES = {"int": "an integer", "float": "a float", "str": "a string", "bool": "a bool",
               "bytes": "a byte size (e.g. 4KiB)", "symref": "a symbol reference (@name)",
               "list": "a list", "dict": "a dictionary", "list<int>": "a list of integers",
               "list<str>": "a list of strings", "list<float>": "a list of floats",
               "list<symref>": "a list of symbol references"}


@dataclass(frozen=True)
class OpDef:
    """Everything the printer, parser and verifier need to know about one op."""

    name: str
    summary: str
    operands: tuple[ArgSpec, ...] = ()
    results: tuple[ArgSpec, ...] = ()
    attrs: dict = field(default_factory=dict)   # name -> AttrSpec
    symbol: bool = False                         # carries a required @sym_name
    region: bool = False                         # carries a required region
    pure: bool = False                           # no side effects: removable when unused
    verify: Callable | None = None               # op-specific check: raises VerifyError

    @property
    def dialect(self) -> str:
        return self.name.partition(".")[0]


class Dialect:
    """A named group of ops registered in the global registry."""

    def __init__(self, name: str, summary: str):
        self.name = name
        self.summary = summary
        self.ops: dict[str, OpDef] = {}
        DIALECTS[name] = self

    def op(self, name: str, summary: str, *, operands=(), results=(), attrs=None,
           symbol=False, region=False, pure=False, verify=None) -> OpDef:
        """Declare an op of this dialect."""
        full = f"{self.name}.{name}"
        if full in REGISTRY:
            raise ValueError(f"op {full} registered twice")
        opdef = OpDef(
            name=full, summary=summary,
            operands=tuple(ArgSpec.parse(s) for s in operands),
            results=tuple(ArgSpec.parse(s) for s in results),
            attrs={k: AttrSpec.parse(k, v) for k, v in (attrs or {}).items()},
            symbol=symbol, region=region, pure=pure, verify=verify)
        for specs in (opdef.operands, opdef.results):
            if any(s.variadic for s in specs[:-1]):
                raise ValueError(f"op {full}: only the last operand/result may be variadic")
        self.ops[full] = opdef
        REGISTRY[full] = opdef
        return opdef


DIALECTS: dict[str, Dialect] = {}
REGISTRY: dict[str, OpDef] = {}


def load_dialects() -> dict[str, OpDef]:
    """Import every dialect shipped with ratc so the registry is complete; return it."""
    import ratc.ir.dialects  # noqa: F401  (registers on import)
    return REGISTRY


def lookup(name: str) -> OpDef | None:
    """The definition of a registered op, or None."""
    opdef = REGISTRY.get(name)
    if opdef is None:
        load_dialects()
        opdef = REGISTRY.get(name)
    return opdef

"""The IR's objects: SSA values, operations with optional regions, blocks and modules."""

from __future__ import annotations

from typing import Iterator

from ratc.errors import SourceLocation
from ratc.ir.types import Type


class Value:
    """An SSA value: the index-th result of its defining operation."""

    __slots__ = ("type", "name", "owner", "index")

    def __init__(self, type: Type, name: str | None, owner: "Operation", index: int):
        self.type = type
        self.name = name          # a name hint; the printer keeps it when it is unique
        self.owner = owner
        self.index = index

    def __repr__(self) -> str:
        return f"<Value %{self.name or '?'}: {self.type}>"


class Block:
    """An ordered list of operations: the body of a region or of the module."""

    __slots__ = ("ops", "parent")

    def __init__(self, ops: list["Operation"] | None = None, parent: "Operation | None" = None):
        self.ops: list[Operation] = []
        self.parent = parent
        for op in ops or ():
            self.append(op)

    def append(self, op: "Operation") -> "Operation":
        op.block = self
        self.ops.append(op)
        return op

    def __iter__(self) -> Iterator["Operation"]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)


class Operation:
    """An operation: name, operands, results, attributes, optional symbol and region."""

    __slots__ = ("name", "operands", "results", "attributes", "sym_name", "region", "loc", "block")

    def __init__(self, name: str, operands=(), result_types=(), attributes=None, *,
                 sym_name: str | None = None, region: Block | None = None,
                 result_names=None, loc: SourceLocation | None = None):
        self.name = name
        self.operands: list[Value] = list(operands)
        if result_names is None:
            result_names = (None,) * len(result_types)
        self.results = [Value(t, n, self, i) for i, (t, n) in enumerate(zip(result_types, result_names))]
        self.attributes: dict = dict(attributes or {})
        self.sym_name = sym_name
        self.region = region
        if region is not None:
            region.parent = self
        self.loc = loc
        self.block: Block | None = None

    @property
    def result(self) -> Value:
        """The single result of a one-result op."""
        if len(self.results) != 1:
            raise ValueError(f"{self.name} has {len(self.results)} results, not one")
        return self.results[0]

    @property
    def dialect(self) -> str:
        return self.name.partition(".")[0]

    def walk(self) -> Iterator["Operation"]:
        """This op and every op nested in its region, in pre-order."""
        yield self
        if self.region is not None:
            for op in self.region.ops:
                yield from op.walk()

    def __repr__(self) -> str:
        from ratc.ir.printer import print_op
        return print_op(self).strip()


class Module:
    """The top-level container: a named block of operations with module attributes."""

    __slots__ = ("name", "attributes", "body")

    def __init__(self, name: str | None = None, attributes: dict | None = None, ops=()):
        self.name = name
        self.attributes: dict = dict(attributes or {})
        self.body = Block(list(ops))

    def walk(self) -> Iterator[Operation]:
        """Every op of the module in pre-order."""
        for op in self.body.ops:
            yield from op.walk()

    def symbols(self) -> dict[str, Operation]:
        """Every symbol-defining op of the module by name (first definition wins)."""
        table: dict[str, Operation] = {}
        for op in self.walk():
            if op.sym_name is not None:
                table.setdefault(op.sym_name, op)
        return table

    def __str__(self) -> str:
        from ratc.ir.printer import print_module
        return print_module(self)


def uses(module: Module) -> dict[Value, int]:
    """How many times each value is used as an operand anywhere in the module."""
    counts: dict[Value, int] = {}
    for op in module.walk():
        for v in op.operands:
            counts[v] = counts.get(v, 0) + 1
    return counts

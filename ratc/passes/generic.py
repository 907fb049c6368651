"""Dialect-independent passes: dead-op elimination, common-subexpression elimination, verify."""

from __future__ import annotations

from ratc.ir.attributes import freeze
from ratc.ir.core import Block, Module, Value
from ratc.ir.registry import lookup
from ratc.ir.verifier import verify
from ratc.passes.base import Pass, PassContext, option, register_pass


def module_blocks(module: Module):
    """Every block of the module: the body and each region, outermost first."""
    yield module.body
    for op in module.walk():
        if op.region is not None:
            yield op.region


@register_pass
class DeadOpElimination(Pass):
    """Remove side-effect-free ops whose results are never used."""

    name = "dce"

    def run(self, module: Module, ctx: PassContext) -> None:
        counts: dict[Value, int] = {}
        for op in module.walk():
            for v in op.operands:
                counts[v] = counts.get(v, 0) + 1
        # Inner blocks first and each block backwards, so a whole dead chain goes in one run.
        for block in reversed(list(module_blocks(module))):
            kept = []
            for op in reversed(block.ops):
                opdef = lookup(op.name)
                dead = (opdef is not None and opdef.pure and op.region is None
                        and not any(counts.get(r, 0) for r in op.results))
                if dead:
                    for v in op.operands:
                        counts[v] -= 1
                else:
                    kept.append(op)
            kept.reverse()
            block.ops[:] = kept


@register_pass
class CommonSubexpressionElimination(Pass):
    """Merge identical side-effect-free ops (same name, operands, attributes and types)."""

    name = "cse"

    def run(self, module: Module, ctx: PassContext) -> None:
        replace: dict[Value, Value] = {}
        self._block(module.body, replace, {})

    def _block(self, block: Block, replace: dict, outer: dict) -> None:
        # Ops of an enclosing block dominate the region, so inner blocks see outer entries.
        seen = dict(outer)
        kept = []
        for op in block.ops:
            if replace:
                op.operands = [replace.get(v, v) for v in op.operands]
            if op.region is not None:
                self._block(op.region, replace, seen)
                kept.append(op)
                continue
            opdef = lookup(op.name)
            if opdef is None or not opdef.pure:
                kept.append(op)
                continue
            key = (op.name, op.sym_name, tuple(id(v) for v in op.operands),
                   freeze(op.attributes), tuple(str(r.type) for r in op.results))
            twin = seen.get(key)
            if twin is None:
                seen[key] = op
                kept.append(op)
            else:
                replace.update(zip(op.results, twin.results))
        block.ops[:] = kept


@register_pass
class Verify(Pass):
    """Run the verifier (useful with --no-verify, or to check a hand-written file)."""

    name = "verify"
    symbols: bool = option(True, "also check that every @symbol reference resolves")

    def run(self, module: Module, ctx: PassContext) -> None:
        verify(module, check_symbols=self.symbols)

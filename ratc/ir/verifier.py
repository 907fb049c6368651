"""The verifier: structural checks driven by the op registry, then each op's own check."""

from __future__ import annotations

import itertools

from ratc.errors import LocatedError
from ratc.ir.attributes import SymbolRef
from ratc.ir.core import Module, Operation
from ratc.ir.registry import ATTR_CHECKERS, EXACT_KINDS, OpDef, lookup
from ratc.ir.types import DTYPE_BYTES, TensorType


class VerifyError(LocatedError):
    """An IR that violates a structural rule or an op's own invariant."""

    def __init__(self, message: str, op: Operation | None = None):
        super().__init__(message, op.loc if op is not None else None)
        self.op = op


def _arity(specs, n: int, what: str, opdef: OpDef, op: Operation) -> None:
    fixed = len(specs) - (1 if specs and specs[-1].variadic else 0)
    if (n != fixed) if not (specs and specs[-1].variadic) else (n < fixed):
        want = f"{fixed}" if len(specs) == fixed else f"at least {fixed}"
        raise VerifyError(f"'{op.name}' expects {want} {what}(s), got {n}", op)


def _check_types(specs, values, what: str, op: Operation) -> None:
    for i, v in enumerate(values):
        spec = specs[min(i, len(specs) - 1)]
        if not spec.accepts(v.type):
            raise VerifyError(f"'{op.name}' {what} #{i} ('{spec.name}') must be {spec.constraint}, "
                              f"got {v.type}", op)


_ATTR_TABLES: dict[str, tuple] = {}


def _op_table(opdef: OpDef) -> tuple:
    """What verify_op checks of an op kind, built once: ({attribute: (exact type or None,
    checker, choices, spec)}, required attribute names, whether every operand / every result
    may have any type, and the operand / result arity as (fixed count, variadic tail))."""
    table = _ATTR_TABLES.get(opdef.name)
    if table is None:
        checks = {k: (EXACT_KINDS.get(spec.kind), ATTR_CHECKERS[spec.kind], spec.choices, spec)
                  for k, spec in opdef.attrs.items()}
        table = _ATTR_TABLES[opdef.name] = (
            opdef, checks, frozenset(k for k, spec in opdef.attrs.items() if spec.required),
            all(s.constraint == "any" for s in opdef.operands), all(s.constraint == "any" for s in opdef.results),
            _shape(opdef.operands), _shape(opdef.results))
    return table


def _shape(specs) -> tuple:
    variadic = bool(specs) and specs[-1].variadic
    return len(specs) - variadic, variadic


def _check_attributes(op: Operation, checks: dict, required: frozenset) -> None:
    attrs = op.attributes
    for key, value in attrs.items():
        check = checks.get(key)
        if check is None:
            raise VerifyError(f"'{op.name}' has unknown attribute '{key}' "
                              f"(known: {', '.join(sorted(checks)) or 'none'})", op)
        exact, checker, choices, spec = check
        if (type(value) is not exact and (exact is not None or not checker(value))) or (
                choices and value not in choices):
            raise VerifyError(f"'{op.name}': {spec.check(value)}", op)
    if not attrs.keys() >= required:
        key = next(k for k, spec in lookup(op.name).attrs.items() if spec.required and k not in attrs)
        raise VerifyError(f"'{op.name}' requires attribute '{key}'", op)


def verify_op(op: Operation) -> None:
    """Check one op against its registered definition (not its region's ops)."""
    table = _ATTR_TABLES.get(op.name)
    if table is None:
        opdef = lookup(op.name)
        if opdef is None:
            raise VerifyError(f"unknown op '{op.name}'", op)
        table = _op_table(opdef)
    opdef, checks, required, any_operands, any_results, (n_in, var_in), (n_out, var_out) = table
    n = len(op.operands)
    if (n < n_in) if var_in else (n != n_in):
        _arity(opdef.operands, n, "operand", opdef, op)
    n = len(op.results)
    if (n < n_out) if var_out else (n != n_out):
        _arity(opdef.results, n, "result", opdef, op)
    if not any_operands:
        _check_types(opdef.operands, op.operands, "operand", op)
    if not any_results:
        _check_types(opdef.results, op.results, "result", op)
    for v in op.results:
        if isinstance(v.type, TensorType) and v.type.dtype not in DTYPE_BYTES:
            raise VerifyError(f"'{op.name}' result has unknown element type '{v.type.dtype}'", op)
    _check_attributes(op, checks, required)
    if opdef.symbol and op.sym_name is None:
        raise VerifyError(f"'{op.name}' requires a symbol name (@name)", op)
    if not opdef.symbol and op.sym_name is not None:
        raise VerifyError(f"'{op.name}' does not take a symbol name", op)
    if opdef.region and op.region is None:
        raise VerifyError(f"'{op.name}' requires a region", op)
    if not opdef.region and op.region is not None:
        raise VerifyError(f"'{op.name}' does not take a region", op)
    if opdef.verify is not None:
        opdef.verify(op)


def prefer_local(ops, exc: VerifyError) -> None:
    """Raise the first malformed attribute among `ops` (a wrong type, an unknown choice),
    else `exc`: a region holder's cross-op rule (a missing task, an unmatched send) may
    fail only because an op's attribute is malformed, and then that attribute is what to
    fix. Checked once the rule has failed, so valid IR pays nothing."""
    for op in ops:
        opdef = lookup(op.name)
        if opdef is not None:
            _, checks, required, *_ = _op_table(opdef)
            _check_attributes(op, checks, required)
    raise exc


_WALKS = itertools.count(1)
_walk = 0


def walk_number() -> int:
    """The number of the verify() walk in progress, 0 outside one. Nothing changes the IR
    during a walk, so an op hook may keep what it derives from a region holder for its walk."""
    return _walk


def verify(module: Module, check_symbols: bool = True, each_op: bool = True) -> None:
    """Raise VerifyError at the first violation: dominance, symbols, then per-op rules.

    each_op = False checks the structure alone: dominance, symbols and the rules of the ops
    that hold regions (a stage's order, a pipeline's messages), not each op's own attributes
    and role -- what a pass that moves or annotates ops can break in the large, at a
    fraction of the cost (the pass manager's lean mode)."""
    global _walk
    _walk = next(_WALKS)
    try:
        # (the symbol scan reads attributes as their kinds say: it needs them checked)
        _verify(module, check_symbols and each_op, each_op)
    finally:
        _walk = 0


def _verify(module: Module, check_symbols: bool, each_op: bool = True) -> None:
    defined: set = set()
    symbols: dict[str, Operation] = {}
    referenced: set = set()     # every symbol name an attribute refers to

    def walk(ops, scope_values: list) -> None:
        sym_here: set[str] = set()
        for op in ops:
            if not defined.issuperset(op.operands):
                i = next(i for i, v in enumerate(op.operands) if v not in defined)
                raise VerifyError(f"'{op.name}' operand #{i} is used before its definition "
                                  f"or outside its region", op)
            if op.sym_name is not None:
                if op.sym_name in sym_here:
                    raise VerifyError(f"redefinition of symbol '@{op.sym_name}'", op)
                sym_here.add(op.sym_name)
                symbols.setdefault(op.sym_name, op)
            if each_op or op.region is not None:
                verify_op(op)
            elif op.name not in _ATTR_TABLES and lookup(op.name) is None:
                raise VerifyError(f"unknown op '{op.name}'", op)
            if check_symbols:
                scan = _SYMBOL_ATTRS.get(op.name)
                if scan is None:
                    scan = _symbol_attrs(lookup(op.name))
                if scan:
                    _collect_refs(op.attributes, scan, referenced)
            if op.region is not None:
                inner: list = []
                walk(op.region.ops, inner)
                defined.difference_update(inner)
            results = op.results
            if not defined.isdisjoint(results) or (len(results) > 1 and len(set(results)) != len(results)):
                raise VerifyError(f"'{op.name}' redefines a value", op)
            defined.update(results)
            scope_values += results

    walk(module.body.ops, [])
    if check_symbols and not referenced <= symbols.keys():
        _report_undefined_symbol(module, symbols, referenced - symbols.keys())


def _collect_refs(attrs: dict, scan: tuple, into: set) -> None:
    """Add the names of every symbol the (verified) attributes refer to."""
    for key, kind in scan:
        value = attrs.get(key, _MISSING)
        if value is _MISSING:
            continue
        if kind == "list<symref>":
            into.update([ref.name for ref in value])
        elif kind == "symref":
            into.add(value.name)
        else:
            into.update([ref.name for ref in _symbol_refs(value)])


def _report_undefined_symbol(module: Module, symbols: dict, missing: set) -> None:
    """Raise for the first op, in walk order, whose attribute names an undefined symbol."""
    for op in module.walk():
        scan = dict(_symbol_attrs(lookup(op.name)))
        for key, value in op.attributes.items():
            if key not in scan:
                continue
            for ref in _symbol_refs(value):
                if ref.name not in symbols:
                    raise VerifyError(f"'{op.name}' attribute '{key}' refers to undefined symbol "
                                      f"'@{ref.name}'", op)
    raise VerifyError(f"undefined symbol '@{min(missing)}'")   # (the scan above finds its op)


_MISSING = object()
# Attribute kinds that cannot hold a symbol reference: the symbol check skips them.
_NO_SYMBOLS = frozenset({"int", "float", "str", "bool", "bytes", "list<int>", "list<str>", "list<float>"})
_SYMBOL_ATTRS: dict[str, tuple] = {}


def _symbol_attrs(opdef: OpDef) -> tuple:
    """The op's attributes whose kind may hold symbol references, as (name, kind) pairs."""
    names = _SYMBOL_ATTRS.get(opdef.name)
    if names is None:
        names = _SYMBOL_ATTRS[opdef.name] = tuple((k, spec.kind) for k, spec in opdef.attrs.items()
                                                  if spec.kind not in _NO_SYMBOLS)
    return names


def _symbol_refs(value):
    """Every SymbolRef inside a (nested) list or dict attribute, in order."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, SymbolRef):
            yield v
        elif isinstance(v, list):
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))

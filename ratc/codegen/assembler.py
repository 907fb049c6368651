"""Assembler (.rasm text -> KernelProgram) and disassembler (KernelProgram -> canonical .rasm text)."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ratc.codegen.isa import Flags, Label, Mem, Reg
from ratc.codegen.program import Buffer, Bundle, Instr, KernelProgram, Loop, assign_slots, validate
from ratc.errors import LocatedError, SourceLocation

GRAMMAR = Path(__file__).with_name("rasm.lark")


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(GRAMMAR.read_text(), parser="lalr", propagate_positions=True, maybe_placeholders=False)


# The VMs and the checks walk loops recursively; real kernels nest a handful deep.
MAX_LOOP_DEPTH = 64


def assemble(text: str, platform, filename: str = "<rasm>") -> KernelProgram:
    """Parse and validate .rasm text; errors are LocatedError with file:line:col and a caret."""
    try:
        tree = _parser().parse(text)
    except RecursionError:
        raise LocatedError(f"loops nested too deeply to assemble (at most {MAX_LOOP_DEPTH} levels)",
                           SourceLocation(filename, 1, 1, text)) from None
    except UnexpectedInput as exc:
        line, col = exc.line, exc.column
        if isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
            lines = text.rstrip("\n").split("\n")
            line, col = len(lines), len(lines[-1]) + 1  # just past the last character
        raise LocatedError(_syntax_message(exc), SourceLocation(filename, line, col, text)) from None
    builder = _Builder(filename, text)
    program = builder.program(tree)
    validate(program, platform)
    return program


def _syntax_message(exc: UnexpectedInput) -> str:
    if isinstance(exc, UnexpectedCharacters):
        return f"unexpected character {exc.char!r}"
    if isinstance(exc, UnexpectedEOF):
        return "unexpected end of input (unclosed '{'?)"
    if isinstance(exc, UnexpectedToken):
        if exc.token.type == "$END":
            return "unexpected end of input (unclosed '{'?)"
        expected = ", ".join(sorted(exc.expected))[:120]
        return f"unexpected {exc.token!s:.40} (expected {expected})"
    return str(exc)


class _Builder:
    def __init__(self, filename: str, text: str):
        self.filename, self.text = filename, text

    def loc(self, node) -> SourceLocation | None:
        meta = node if isinstance(node, Token) else getattr(node, "meta", None)
        line = getattr(meta, "line", None)
        if line is None:
            return None
        return SourceLocation(self.filename, line, meta.column, self.text)

    def program(self, tree: Tree) -> KernelProgram:
        name, dsps, dsps_loc, buffers, body = None, None, None, [], []
        for child in tree.children:
            if child.data in ("kernel", "dsps") and (name if child.data == "kernel" else dsps) is not None:
                raise LocatedError(f"a second '.{child.data}' directive", self.loc(child))
            if child.data == "kernel":
                name = str(child.children[0])
            elif child.data == "dsps":
                dsps, dsps_loc = int(child.children[0]), self.loc(child)
            elif child.data == "buffer":
                space, bname, dtype, *dims = child.children
                buffers.append(Buffer(str(bname), str(space), str(dtype), tuple(int(d) for d in dims),
                                      self.loc(child)))
            else:
                body.append(self.item(child))
        if name is None:
            raise LocatedError("missing '.kernel NAME' directive", SourceLocation(self.filename, 1, 1, self.text))
        if dsps is None:
            raise LocatedError("missing '.dsps N' directive", SourceLocation(self.filename, 1, 1, self.text))
        return KernelProgram(name, dsps, tuple(buffers), tuple(body), dsps_loc)

    def item(self, node: Tree, depth: int = 1):
        if node.data == "loop":
            if depth > MAX_LOOP_DEPTH:
                raise LocatedError(f"loops nested more than {MAX_LOOP_DEPTH} deep", self.loc(node))
            label, count, *items = node.children
            return Loop(str(label), int(count), tuple(self.item(i, depth + 1) for i in items), self.loc(node))
        instrs = [self.instr(i) for i in node.children if i is not None]
        return assign_slots(instrs, self.loc(node))

    def instr(self, node: Tree) -> Instr:
        op, *operands = node.children
        return Instr(str(op), tuple(self.operand(o) for o in operands if o is not None), self.loc(node))

    def operand(self, node: Tree):
        kind = node.data
        kids = node.children
        if kind == "reg":
            return _reg(kids[0])
        if kind == "imm":
            return int(kids[0])
        if kind == "mem":
            row = self.address(kids[1])
            col = self.address(kids[2]) if len(kids) > 2 and kids[2] is not None else (None, None)
            return Mem(str(kids[0]), row[0], row[1], col[0], col[1])
        names = [str(k) for k in kids]
        return Label(names[0]) if len(names) == 1 and names[0] not in ("t", "clip", "add") else Flags(tuple(names))


    @staticmethod
    def address(node: Tree) -> tuple:
        kids = node.children
        if node.data == "addr_reg":
            return _reg(kids[0]), 0
        if node.data == "addr_reg_off":
            return _reg(kids[0]), int(kids[2]) if kids[1] == "+" else -int(kids[2])
        return None, int(kids[0])


def _reg(tok: Token) -> Reg:
    return Reg(tok[0], int(tok[1:]))


_OPERAND = re.compile(r"\s*([A-Za-z_][\w.]*\[[^\]]*\]|[^,]+)\s*(?:,|$)")
_ADDRESS = re.compile(r"^\s*(?:([rqv]\d+)\s*(?:([+-])\s*(\d+))?|([+-]?\d+))\s*$")


@lru_cache(maxsize=8192)
def parse_instruction(text: str) -> Instr:
    """One instruction from trusted generator text (no location); equal to what assemble() builds."""
    op, _, rest = text.strip().partition(" ")
    operands = []
    for tok in _OPERAND.findall(rest.strip()) if rest.strip() else []:
        tok = tok.strip()
        if re.fullmatch(r"[rqv]\d+", tok):
            operands.append(_reg(tok))
        elif re.fullmatch(r"[+-]?\d+", tok):
            operands.append(int(tok))
        elif "[" in tok:
            name, _, inner = tok[:-1].partition("[")
            parts = [_address_text(a) for a in inner.split(",")]
            row, col = parts[0], parts[1] if len(parts) > 1 else (None, None)
            operands.append(Mem(name, row[0], row[1], col[0], col[1]))
        else:
            names = tok.split()
            operands.append(Label(names[0]) if len(names) == 1 and names[0] not in ("t", "clip", "add")
                            else Flags(tuple(names)))
    return Instr(op, tuple(operands))


def _address_text(text: str) -> tuple:
    m = _ADDRESS.match(text)
    if m is None:
        raise ValueError(f"bad address {text!r}")
    if m.group(4) is not None:
        return None, int(m.group(4))
    off = int(m.group(3)) if m.group(3) else 0
    return _reg(m.group(1)), -off if m.group(2) == "-" else off


def disassemble(program: KernelProgram) -> str:
    """Canonical .rasm text: directives, then bundles in slot order, loops indented."""
    lines = [f".kernel {program.name}", f".dsps {program.dsps}"]
    for b in program.buffers:
        lines.append(f".buffer {b.space} {b.name} {b.dtype} [{', '.join(str(d) for d in b.shape)}]")
    lines.append("")
    _emit(program.body, lines, 0)
    return "\n".join(lines) + "\n"


def _emit(body, lines: list[str], depth: int) -> None:
    pad = "    " * depth
    for item in body:
        if isinstance(item, Loop):
            lines.append(f"{pad}{item.label}: loop {item.count} {{")
            _emit(item.body, lines, depth + 1)
            lines.append(f"{pad}}}")
        else:
            lines.append(pad + format_bundle(item))


def format_bundle(bundle: Bundle) -> str:
    """One bundle as '{ a | b | ... }' in slot order."""
    return "{ " + " | ".join(str(i) for i in bundle.instrs) + " }" if bundle.instrs else "{ }"

"""Parse the IR text format with the Lark LALR grammar in ir.lark.

Speed: Lark's pure-Python LALR parser handles ~100k tokens/s, about 5k ops/s, far below
what 100k-op programs need. Printed IR is line-structured, and most lines differ only in
their literals (value names, numbers, strings), so the parser memoizes: each line's
literals are cut out with one regex, the remaining *template* is parsed by Lark once, and
the resulting recipe is filled with the literals of every line sharing that template.
Whenever a line is not a complete op (hand-written layouts, comments after code, syntax
errors) the whole text goes through Lark directly, which also produces the located error.
Both paths build ops from the same recipes, so they cannot disagree.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import VisitError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ratc.errors import LocatedError, SourceLocation
from ratc.gcpause import gc_paused
from ratc.ir.attributes import ByteSize, SymbolRef
from ratc.ir.core import Block, Module, Operation
from ratc.ir.types import parse_type
from ratc.units import UnitError, parse_bytes

_LITERALS = ("VALUE", "SYMBOL", "STRING", "INT", "FLOAT", "BYTES")
def _string(s: str) -> str:
    if "\\" not in s:
        return s[1:-1]
    value = json.loads(s)
    value.encode("utf-8")       # a lone surrogate escape (\ud800) is not text that can be written
    return value


def _bytes(s: str) -> ByteSize:
    if s[0] in "+-":
        raise ValueError("a byte size has no sign")
    return ByteSize(parse_bytes(s))


_CONVERT = {
    "INT": int,
    "FLOAT": float,
    "STRING": _string,
    "BYTES": _bytes,
    "SYMBOL": lambda s: SymbolRef(s[1:]),
}
# Literals in the order ir.lark's lexer tries them; identifiers, types and comments are
# left in the template. The look-behind keeps digits inside names and types in place.
_LITERAL_RE = re.compile(
    r'(?=["%@\d+\-]|inf|nan)'  # a cheap first-character filter; makes the scan 2.5x faster
    r'(?:("(?:[^"\\\n]|\\.)*")'
    r"|(%[A-Za-z0-9_.$-]+)"
    r"|(@[A-Za-z0-9_.$-]+)"
    r"|(?<![\w<.!+-])(\d+(?:B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)(?![A-Za-z0-9_]))"
    r"|(?<![\w<.!+-])([-+]?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|inf(?!\w)|nan(?!\w)))"
    r"|(?<![\w<.!+-])([-+]?\d+))")
_PLACEHOLDER = {1: '""', 2: "%_", 3: "@_", 4: "0B", 5: "0.0", 6: "0"}

_TERMINAL_NAMES = {
    "VALUE": "a value (%name)", "SYMBOL": "a symbol (@name)", "OPNAME": "an op name (dialect.op)",
    "KEY": "an attribute name", "INT": "an integer", "FLOAT": "a float", "STRING": "a string",
    "BYTES": "a byte size", "TENSOR": "a tensor type", "OPAQUE": "a type (!dialect.name)",
    "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'", "LSQB": "'['", "RSQB": "']'",
    "COMMA": "','", "EQUAL": "'='", "COLON": "':'", "MODULE": "'module'", "TRUE": "'true'",
    "FALSE": "'false'", "$END": "end of input",
}


class _RecipeError(Exception):
    """A static error found while building a recipe (e.g. duplicate attribute key)."""

    def __init__(self, message: str, line: int, col: int):
        super().__init__(message)
        self.message, self.line, self.col = message, line, col


class _Recipes(Transformer):
    """Turns parse trees into position-free recipes whose literals are hole indices."""

    def lit(self, children):
        tok = children[0]
        return ("h", int(tok), tok.type)

    def true(self, _):
        return ("c", True)

    def false(self, _):
        return ("c", False)

    def list_(self, children):
        return ("l", [c for c in children if c is not None])

    def dict_(self, children):
        return ("d", self._entries(children))


    def entry(self, children):
        key, value = children
        return (str(key), value, key.line, key.column)

    def attr_dict(self, children):
        return ("attrs", _compile_entries(self._entries(children)))

    @staticmethod
    def _entries(children):
        seen = set()
        out = []
        for entry in children:
            if entry is None:
                continue
            key, value, line, col = entry
            if key in seen:
                raise _RecipeError(f"duplicate attribute '{key}'", line, col)
            seen.add(key)
            out.append((key, value))
        return out

    def type_list(self, children):
        return ("types", [_type(str(t), t.line, t.column) for t in children])

    def results(self, children):
        return ("results", [int(t) for t in children])

    def operands(self, children):
        return ("operands", [int(t) for t in children if t is not None])

    def region(self, children):
        return ("region", list(children))

    def op(self, children):
        results, operands, attrs, types, region, sym = [], [], None, [], None, None
        name = None
        for c in children:
            if isinstance(c, Token):
                if c.type == "OPNAME":
                    name = str(c)
                else:
                    sym = int(c)
            elif c[0] == "results":
                results = c[1]
            elif c[0] == "operands":
                operands = c[1]
            elif c[0] == "attrs":
                attrs = c[1]
            elif c[0] == "types":
                types = c[1]
            else:
                region = c[1]
        if len(types) != len(results):
            from ratc.ir.registry import lookup

            tok = next(c for c in children if isinstance(c, Token) and c.type == "OPNAME")
            # an op no dialect defines is the error to report (its types cannot be right either)
            why = (f"unknown op '{name}'" if lookup(name) is None else
                   f"'{name}' defines {len(results)} result(s) but lists {len(types)} type(s)")
            raise _RecipeError(why, tok.line, tok.column)
        return (tuple(results), name, sym, tuple(operands), attrs, tuple(types), region)

    def module(self, children):
        sym, attrs, body = None, None, []
        for c in children:
            if isinstance(c, Token):
                sym = int(c)
            elif c[0] == "attrs":
                attrs = c[1]
            else:
                body = c[1]
        return (sym, attrs, body)


@lru_cache(maxsize=None)
def _type_cached(text: str):
    return parse_type(text)


def _type(text: str, line: int, col: int):
    try:
        return _type_cached(text)
    except ValueError as exc:
        raise _RecipeError(str(exc), line, col) from None


class _Literals:
    """Lexer hook: replaces each literal token by its index and remembers text and place."""

    def __init__(self):
        self.texts: list[str] = []
        self.places: list[tuple[int, int]] = []
        self.op_places: list[tuple[int, int]] = []

    def literal(self, tok: Token) -> Token:
        self.texts.append(str(tok))
        self.places.append((tok.line, tok.column))
        return tok.update(value=str(len(self.texts) - 1))

    def opname(self, tok: Token) -> Token:
        self.op_places.append((tok.line, tok.column))
        return tok


class _Grammar:
    """The Lark parser, built once, with a swappable literal recorder."""

    def __init__(self):
        self.recorder = _Literals()
        callbacks = {name: self._literal for name in _LITERALS}
        callbacks["OPNAME"] = self._opname
        self.lark = Lark((Path(__file__).parent / "ir.lark").read_text(), parser="lalr",
                         start=["module", "op"], lexer="contextual", maybe_placeholders=True,
                         lexer_callbacks=callbacks)
        self.recipes = _Recipes()

    def _literal(self, tok):
        return self.recorder.literal(tok)

    def _opname(self, tok):
        return self.recorder.opname(tok)

    def parse(self, text: str, start: str):
        """(recipe, recorder) for text; raises lark's UnexpectedInput or _RecipeError."""
        self.recorder = _Literals()
        tree = self.lark.parse(text, start=start)
        try:
            return self.recipes.transform(tree), self.recorder
        except VisitError as exc:
            raise exc.orig_exc from None


_GRAMMAR: _Grammar | None = None


def _grammar() -> _Grammar:
    global _GRAMMAR
    if _GRAMMAR is None:
        _GRAMMAR = _Grammar()
    return _GRAMMAR


class _NotLineStructured(Exception):
    """The text needs the general parser (a line is not one complete op)."""


_KIND_NAMES = {"INT": "integer", "FLOAT": "float", "STRING": "string", "BYTES": "byte size", "SYMBOL": "symbol"}


class _BadLiteral(Exception):
    """A literal the lexer accepted but that does not convert (h: its index in the line's texts)."""

    def __init__(self, hole: int, message: str):
        self.hole, self.message = hole, message


# The verifier, the printer and the passes walk regions recursively; ratc's own IR nests a
# handful deep (module, pipeline, stage, task).
MAX_REGION_DEPTH = 100


class _Builder:
    """Builds ops from recipes, resolving value names through nested scopes."""

    def __init__(self, filename: str, text: str):
        self.filename, self.text = filename, text
        self.scope: dict = {}
        self.defined: list[list[str]] = [[]]
        # Where literals are, for error columns: a list for a whole text, else the current line.
        self.places: list[tuple[int, int]] | None = None
        self.lineno, self.line_raw, self.line_texts = 0, "", []

    def loc(self, line: int, col: int) -> SourceLocation:
        return SourceLocation(self.filename, line, col, self.text)

    def error(self, message: str, line: int, col: int) -> LocatedError:
        return LocatedError(message, self.loc(line, col))

    def open_region(self, line: int, col: int) -> None:
        if len(self.defined) > MAX_REGION_DEPTH:
            raise self.error(f"regions nested too deeply (at most {MAX_REGION_DEPTH} levels)", line, col)
        self.defined.append([])

    def close_region(self) -> None:
        for name in self.defined.pop():
            del self.scope[name]

    def place(self, h: int) -> tuple[int, int]:
        """(line, column) of the h-th literal of the current line or text (errors only)."""
        if self.places is not None:
            return self.places[h]
        at = -1
        for t in self.line_texts[:h + 1]:
            at = self.line_raw.find(t, at + 1)
        return self.lineno, at + 1

    def build(self, recipe, texts, op_loc, define: bool = True) -> Operation:
        """One op (and its nested region) from a recipe and the literal texts it refers to.

        `op_loc` is the op's (line, col), or an iterator of them in op order for a whole
        text. Results become visible after the op's region, as in MLIR; `define=False`
        leaves that to the caller, which still has the region's lines to read.
        """
        result_holes, name, sym, operand_holes, attrs, types, region = recipe
        scope = self.scope
        operands = []
        for h in operand_holes:
            v = scope.get(texts[h][1:])
            if v is None:
                raise self.error(f"use of undefined value '{texts[h]}'", *self.place(h))
            operands.append(v)
        line, col = op_loc if type(op_loc) is tuple else next(op_loc)
        op = Operation(name, operands, types, self.attributes(attrs, texts),
                       sym_name=texts[sym][1:] if sym is not None else None,
                       result_names=[texts[h][1:] for h in result_holes],
                       loc=SourceLocation(self.filename, line, col, self.text))
        if region is not None:
            op.region = Block(parent=op)
            self.open_region(line, col)
            for sub in region:
                op.region.append(self.build(sub, texts, op_loc))
            self.close_region()
        if define:
            self.define(op, result_holes, texts)
        return op

    def attributes(self, attrs, texts) -> dict | None:
        """The attribute dictionary of compiled entries; a literal that does not convert is an
        error at its place."""
        try:
            return {k: f(texts) for k, f in attrs} if attrs else None
        except _BadLiteral as exc:
            raise self.error(exc.message, *self.place(exc.hole)) from None

    def define(self, op: Operation, result_holes, texts) -> None:
        scope = self.scope
        for v, h in zip(op.results, result_holes):
            if v.name in scope:
                raise self.error(f"redefinition of value '%{v.name}'", *self.place(h))
            scope[v.name] = v
            self.defined[-1].append(v.name)


def _compile_attr(recipe):
    """A function from a line's literal texts to the attribute value the recipe describes."""
    tag = recipe[0]
    if tag == "h":
        convert, i = _CONVERT[recipe[2]], recipe[1]

        def literal(texts):
            try:
                return convert(texts[i])
            except (ValueError, UnitError) as exc:      # json's, the units' and encoding errors
                raise _BadLiteral(i, f"bad {_KIND_NAMES[recipe[2]]} {texts[i]}: {exc}") from None
        return literal
    if tag == "c":
        value = recipe[1]
        return lambda texts: value
    if tag == "l":
        items = [_compile_attr(x) for x in recipe[1]]
        return lambda texts: [f(texts) for f in items]
    entries = _compile_entries(recipe[1])
    return lambda texts: {k: f(texts) for k, f in entries}


def _compile_entries(entries):
    return tuple((k, _compile_attr(v)) for k, v in entries)


def _template(line: str) -> tuple[str, list[str]]:
    texts: list[str] = []
    keep = texts.append

    def cut(m: re.Match) -> str:
        keep(m[0])
        return _PLACEHOLDER[m.lastindex]

    return _LITERAL_RE.sub(cut, line), texts


@lru_cache(maxsize=4096)
def _line_recipe(template: str, start: str):
    try:
        recipe, _ = _grammar().parse(template, start)
    except (UnexpectedInput, _RecipeError):
        return None
    return recipe


def _parse_lines(text: str, filename: str) -> Module:
    """The memoized path: every line is a complete op, an op opening a region, or '}'."""
    b = _Builder(filename, text)
    module: Module | None = None
    stack: list[Block] = []
    pending = []    # (op, result holes, texts, place) of open regions, defined at their '}'
    for lineno, raw in enumerate(text.split("\n"), 1):     # ("\n" only: lark's line count)
        s = raw.strip()
        if not s or s.startswith("//"):
            continue
        if s == "}":
            if not stack:
                raise _NotLineStructured
            stack.pop()
            if stack:
                b.close_region()
                op, holes, texts, (b.lineno, b.line_raw) = pending.pop()
                b.line_texts = texts
                b.define(op, holes, texts)
            continue
        if module is not None and not stack:
            raise _NotLineStructured   # text after the module's closing brace
        template, texts = _template(s)
        if "//" in template:
            raise _NotLineStructured   # a trailing comment would hide literals from Lark
        opens = template.endswith("{")
        start = "module" if module is None else "op"
        recipe = _line_recipe(template + " }" if opens else template, start)
        if recipe is None:
            raise _NotLineStructured
        b.lineno, b.line_raw, b.line_texts = lineno, raw, texts

        if module is None:
            sym, attrs, body = recipe
            if not opens or body:
                raise _NotLineStructured
            module = Module(texts[sym][1:] if sym is not None else None, b.attributes(attrs, texts))
            stack.append(module.body)
            continue
        if opens and recipe[6]:
            raise _NotLineStructured
        op = b.build(recipe, texts, (lineno, len(raw) - len(raw.lstrip()) + 1), define=not opens)
        stack[-1].append(op)
        if opens:
            stack.append(op.region)
            b.open_region(lineno, len(raw) - len(raw.lstrip()) + 1)
            pending.append((op, recipe[0], texts, (lineno, raw)))
    if module is None or stack:
        raise _NotLineStructured
    return module


def _parse_general(text: str, filename: str) -> Module:
    """The general path: the whole text through Lark, with located syntax errors."""
    b = _Builder(filename, text)
    try:
        (sym, attrs, body), rec = _grammar().parse(text, "module")
    except UnexpectedInput as exc:
        raise _syntax_error(exc, b) from None
    except _RecipeError as exc:
        raise b.error(exc.message, exc.line, exc.col) from None
    order = iter(rec.op_places)
    b.places = rec.places
    module = Module(rec.texts[sym][1:] if sym is not None else None, b.attributes(attrs, rec.texts))
    for recipe in body:
        module.body.append(b.build(recipe, rec.texts, order))
    return module


def _syntax_error(exc: UnexpectedInput, b: _Builder) -> LocatedError:
    line, col = getattr(exc, "line", 1), getattr(exc, "column", 1)
    if isinstance(exc, UnexpectedCharacters):
        char = b.text[exc.pos_in_stream] if exc.pos_in_stream < len(b.text) else ""
        msg = f"unexpected character {char!r}"
    elif isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
        lines = b.text.rstrip("\n").split("\n")
        line, col = len(lines), len(lines[-1]) + 1
        if all(not s.strip() or s.strip().startswith("//") for s in lines):
            what = ("" if not b.text else " (only comments)" if any(s.strip() for s in lines)
                    else " (only whitespace)")
            return b.error(f"empty input{what}: expected a module ('module {{ ... }}')", line, col)
        msg = "unexpected end of input (missing '}'?)"
    else:
        tok = exc.token
        shown = _TERMINAL_NAMES.get(tok.type, tok.type) if tok.type in _LITERALS else repr(str(tok))
        msg = f"unexpected {shown}"
    expected = sorted({_TERMINAL_NAMES.get(t, t) for t in getattr(exc, "expected", ()) or ()
                       if not t.startswith("__")})
    if expected and len(expected) <= 6:
        msg += f", expected {' or '.join(expected)}"
    if line < 1:
        line, col = 1, 1
    return b.error(msg, line, col)


def parse_module(text: str, filename: str = "<input>") -> Module:
    """Parse IR text into a Module; syntax and name errors raise LocatedError."""
    # nothing parsed is garbage until we return (the GC pass was a quarter of the parse)
    with gc_paused():
        try:
            try:
                return _parse_lines(text, filename)
            except _NotLineStructured:
                return _parse_general(text, filename)
        except RecursionError:
            raise LocatedError("lists or dictionaries nested too deeply to parse",
                               SourceLocation(filename, 1, 1, text)) from None


def parse_file(path: str | Path) -> Module:
    """Parse an IR file."""
    return parse_module(Path(path).read_text(), str(path))

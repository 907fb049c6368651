"""Textual pass pipelines: 'pass-a{k=v,k2="quoted, any text"},pass-b' with located errors."""

from __future__ import annotations

import re

from ratc.errors import LocatedError, SourceLocation
from ratc.passes.base import Pass, load_passes, parse_option

_NAME = re.compile(r"[a-z][a-z0-9-]*")
_KEY = re.compile(r"[a-z][a-z0-9_-]*")
_VALUE = re.compile(r"[^,{}=\s\"]+")
_QUOTED = re.compile(r'"([^"]*)"')  # any text but a quote, e.g. "a:b=1,c=2;d:e=3"


class PipelineError(LocatedError):
    """A pipeline string that names an unknown pass or a bad option."""


def parse_pipeline(text: str, source: str = "<pipeline>") -> list[Pass]:
    """Parse a pipeline string into configured pass instances."""
    passes = load_passes()
    pos = 0
    out: list[Pass] = []

    def fail(msg: str, at: int):
        line = text.count("\n", 0, at) + 1       # (a pipeline may be written over several lines)
        col = at - (text.rfind("\n", 0, at) + 1) + 1
        raise PipelineError(msg, SourceLocation(source, line, col, text))

    def skip_ws(i: int) -> int:
        while i < len(text) and text[i].isspace():
            i += 1
        return i

    pos = skip_ws(pos)
    if pos == len(text):
        fail("empty pipeline", pos)
    while True:
        m = _NAME.match(text, pos)
        if not m:
            fail("expected a pass name", pos)
        name, name_at = m.group(0), pos
        cls = passes.get(name)
        if cls is None:
            known = ", ".join(sorted(passes))
            fail(f"unknown pass '{name}' (passes: {known})", name_at)
        pos = skip_ws(m.end())
        kwargs = {}
        if pos < len(text) and text[pos] == "{":
            pos = skip_ws(pos + 1)
            while pos < len(text) and text[pos] != "}":
                km = _KEY.match(text, pos)
                if not km:
                    fail("expected an option name", pos)
                key_at = pos
                pos = skip_ws(km.end())
                if pos >= len(text) or text[pos] != "=":
                    fail(f"expected '=' after option '{km.group(0)}'", pos)
                pos = skip_ws(pos + 1)
                vm = _QUOTED.match(text, pos) if text.startswith('"', pos) else _VALUE.match(text, pos)
                if not vm:
                    if text.startswith('"', pos):
                        fail(f"unterminated quoted value for option '{km.group(0)}'", pos)
                    fail(f"expected a value for option '{km.group(0)}'", pos)
                try:
                    field = km.group(0).replace("-", "_")
                    if field in kwargs:
                        fail(f"option '{km.group(0)}' given twice", key_at)
                    kwargs[field] = parse_option(cls, km.group(0), vm.group(vm.lastindex or 0))
                except KeyError as exc:
                    fail(exc.args[0], key_at)
                except ValueError as exc:
                    fail(str(exc), vm.start())
                pos = skip_ws(vm.end())
                if pos < len(text) and text[pos] == ",":
                    pos = skip_ws(pos + 1)
                elif pos < len(text) and text[pos] != "}":
                    fail("expected ',' or '}'", pos)
            if pos >= len(text):
                fail("missing '}' to close the options", pos)
            pos = skip_ws(pos + 1)
        out.append(cls(**kwargs))
        if pos == len(text):
            return out
        if text[pos] != ",":
            fail("expected ',' between passes", pos)
        pos = skip_ws(pos + 1)

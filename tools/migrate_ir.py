"""Rewrite life IR printed by an earlier ratc into today's form (issue 27's rename map).

    python tools/migrate_ir.py FILE...        # rewrites each file in place
    python tools/migrate_ir.py --check FILE   # exit 1 if a file would change

Each step of the map is a plain text rewrite of printed IR, listed in order; applied to the
goldens of the issue's starting commit they give today's goldens byte for byte.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

# 1. `life.pipeline` no longer repeats the plan's memory budget (it was written, never read).
_PIPELINE_BUDGET = re.compile(r"^(\s*life\.pipeline @\S+ \{.*?)budget = [^,}]+, ", re.M)

# 2. Attributes named for what they hold (life.unit's costs, every task's engine seconds).
RENAMED = {"fph": "fwd_phases", "bph": "bwd_phases", "kfwd": "fwd_kernels", "kbwd": "bwd_kernels",
           "fwd_c": "fwd_compute", "fwd_d": "fwd_ddr", "bwd_c": "bwd_compute", "bwd_d": "bwd_ddr",
           "ws": "workspace", "in_bytes": "input_bytes", "dc": "compute", "dd": "ddr"}


def _split_top(text: str) -> list[str]:
    """`a = 1, b = [2, 3], c = "x, y"` split at its top-level commas."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == "\\":
                i += 1
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
        elif ch in "[{(<":
            depth += 1
        elif ch in "]})>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _rename_attrs(line: str, renamed: dict = RENAMED, dropped: frozenset = frozenset()) -> str:
    """The line with its op's attribute dictionary's keys renamed (or dropped) and sorted
    again, as the printer sorts them."""
    start = line.find("{")
    if start < 0 or line.rstrip().endswith("{") and line.rstrip().rfind("{") == start:
        return line
    depth, quoted, end = 0, False, None
    for i in range(start, len(line)):
        ch = line[i]
        if quoted:
            quoted = ch != '"' or line[i - 1] == "\\"
        elif ch == '"':
            quoted = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                end = i
                break
    if end is None:
        return line
    entries, changed = [], False
    for entry in _split_top(line[start + 1:end]):
        key, sep, value = entry.partition(" = ")
        changed |= key in renamed or key in dropped
        if key not in dropped:
            entries.append((renamed.get(key, key), value) if sep else (entry, None))
    if not changed:
        return line
    body = ", ".join(f"{k} = {v}" if v is not None else k for k, v in sorted(entries))
    return line[:start + 1] + body + line[end:]


# 3. `life.pipeline` no longer repeats its plan: the configuration (P, M, Z), the unit count
# and what the plan's units say (the verifier, the passes and the executors read the plan).
PIPELINE_COPIES = frozenset({"P", "M", "Z", "units", "no_recover", "frozen", "ties"})


def _drop_pipeline_copies(text: str) -> str:
    return "".join(_rename_attrs(line, {}, PIPELINE_COPIES) if "life.pipeline @" in line else line
                   for line in text.splitlines(keepends=True))


# 4. `life.plan` names its micro-batches per replica and step A, as the Candidate and the
# configuration label do (it was M).
def _plan_names_a(text: str) -> str:
    return "".join(_rename_attrs(line, {"M": "A"}) if "life.plan @" in line else line
                   for line in text.splitlines(keepends=True))


MAP = [
    ("life.pipeline drops `budget` (the plan holds it)", lambda text: _PIPELINE_BUDGET.sub(r"\1", text)),
    ("attributes renamed (" + ", ".join(f"{a} -> {b}" for a, b in RENAMED.items()) + ")",
     lambda text: "".join(_rename_attrs(line) for line in text.splitlines(keepends=True))),
    ("life.pipeline drops its copies of the plan (P, M, Z, units, no_recover, frozen, ties)", _drop_pipeline_copies),
    ("life.plan's M is named A", _plan_names_a),
]


def migrate(text: str) -> str:
    """The text with every step of the map applied."""
    for _, step in MAP:
        text = step(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--check", action="store_true", help="only report the files that would change")
    args = ap.parse_args(argv)
    changed = []
    for path in args.files:
        old = path.read_text()
        new = migrate(old)
        if new != old:
            changed.append(path)
            if not args.check:
                path.write_text(new)
    for path in changed:
        print(f"{'would rewrite' if args.check else 'rewrote'} {path}", file=sys.stderr)
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())

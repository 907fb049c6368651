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

MAP = [
    ("life.pipeline drops `budget` (the plan holds it)", lambda text: _PIPELINE_BUDGET.sub(r"\1", text)),
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

"""Shared entry points of the experiment scripts: rows as a Markdown table or --json, and the
--platform / --models arguments of the per-model ones."""

from __future__ import annotations

import argparse
import json
import sys


def main(doc: str, run, columns: list[str], cells, add_args=None) -> None:
    """Parse --json (and what add_args(parser) adds, passed to run by name), call run() for
    the rows, print them as JSON or as a table of cells(row)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    if add_args is not None:
        add_args(ap)
    args = vars(ap.parse_args())
    as_json = args.pop("json")
    rows = run(**args)
    if as_json:
        print(json.dumps(rows, indent=2, sort_keys=True))
        return
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(cells(r)) + " |")


def platform_and_models(doc: str, models: tuple, argv=None) -> tuple:
    """(the --platform profile, the --models names) of a per-model script."""
    from ratc.platform import load_platform

    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--platform", default="mt3000")
    ap.add_argument("--models", default=",".join(models))
    args = ap.parse_args(argv)
    return load_platform(args.platform), args.models.split(",")


def progress(items, desc: str, unit: str):
    """items with a progress bar and time estimate on a terminal's stderr (nothing elsewhere);
    a row printed meanwhile goes through `.write(text)` so the bar stays below it."""
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit=unit, disable=None, file=sys.stderr, leave=False)

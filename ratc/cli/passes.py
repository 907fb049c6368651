"""`ratc passes`: list every registered pass with its summary and options."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("passes", help="list the available passes and their options")
    p.add_argument("--json", action="store_true", help="print JSON (stable keys): name -> summary and options")
    p.set_defaults(func=run)


def _passes() -> dict:
    """Every pass by name: its summary and, per option, its type, default (pipeline syntax) and help."""
    from ratc.passes.base import format_option, load_passes, type_name

    return {name: {"summary": cls.summary(),
                   "options": {f.name.replace("_", "-"): {
                       "type": type_name(cls, f),
                       "default": format_option(f.default) if f.default is not f.default_factory else "...",
                       "help": f.metadata.get("help", "")} for f in cls.option_fields()}}
            for name, cls in sorted(load_passes().items())}


def run(args: argparse.Namespace) -> int:
    passes = _passes()
    if args.json:
        import json
        print(json.dumps(passes, indent=2, sort_keys=True))
        return 0
    for name, info in passes.items():
        print(f"{name}  -  {info['summary']}")
        for option, o in info["options"].items():
            print(f"    {option}={o['type']} (default {o['default']})  {o['help']}")
    return 0

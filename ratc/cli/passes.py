"""`ratc passes`: list every registered pass with its summary and options."""

from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("passes", help="list the available passes and their options")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ratc.passes.base import format_option, load_passes, type_name

    for name, cls in sorted(load_passes().items()):
        print(f"{name}  -  {cls.summary()}")
        for f in cls.option_fields():
            default = format_option(f.default) if f.default is not f.default_factory else "..."
            print(f"    {f.name.replace('_', '-')}={type_name(cls, f)} (default {default})  "
                  f"{f.metadata.get('help', '')}")
    return 0

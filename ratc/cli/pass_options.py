"""Command-line options shared by every command that runs a pass pipeline."""

from __future__ import annotations

import argparse
from pathlib import Path

from ratc.passes.manager import Instrumentation


def _names(text: str) -> set[str]:
    """--print-ir-before/after: pass names, each one that exists (argparse reports the rest)."""
    from ratc.passes.base import load_passes

    names = {n.strip() for n in text.split(",") if n.strip()}
    passes = load_passes()
    unknown = sorted(names - set(passes))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown pass '{unknown[0]}' (passes: {', '.join(sorted(passes))})")
    return names


def add_pass_options(parser: argparse.ArgumentParser) -> None:
    """Add --verify-each, --no-verify, the --print-ir-* family, --dump-dir and --time-passes."""
    g = parser.add_argument_group("pass instrumentation")
    checks = g.add_mutually_exclusive_group()
    checks.add_argument("--verify-each", action="store_true",
                        help="verify every op after every pass (default: every op of the input and the result, "
                             "and the structure after each pass)")
    checks.add_argument("--no-verify", action="store_true", help="do not run the verifier")
    g.add_argument("--print-ir-before", metavar="PASS[,PASS]", type=_names, default=set(),
                   help="print the IR before the named passes (to stderr)")
    g.add_argument("--print-ir-after", metavar="PASS[,PASS]", type=_names, default=set(),
                   help="print the IR after the named passes")
    g.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass")
    g.add_argument("--print-ir-after-change", action="store_true",
                   help="print the IR after a pass only if the pass changed it")
    g.add_argument("--print-ir-after-failure", action="store_true",
                   help="print the IR as the failing pass left it")
    g.add_argument("--dump-dir", metavar="DIR", type=Path,
                   help="write the IR after each pass to DIR/NN_after_<pass>.ir")
    g.add_argument("--time-passes", action="store_true", help="print the wall time of each pass")


def verify_mode(args: argparse.Namespace) -> str:
    """The pass manager's verification mode (ratc.passes.manager.VERIFY_MODES) the options ask for."""
    return "each" if args.verify_each else "none" if args.no_verify else "structure"


def instrumentation(args: argparse.Namespace, input_name: str | None = None) -> Instrumentation:
    """The Instrumentation the parsed options ask for; `input_name` is the IR file the passes
    read (None when they start from a module built in memory, e.g. by `ratc compile`)."""
    return Instrumentation(
        print_before=args.print_ir_before, print_after=args.print_ir_after,
        print_after_all=args.print_ir_after_all, print_after_change=args.print_ir_after_change,
        print_after_failure=args.print_ir_after_failure, dump_dir=args.dump_dir,
        time_passes=args.time_passes, input_name=input_name)

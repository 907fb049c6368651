"""Entry point of the `ratc` command: dispatches to one module per subcommand."""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import sys

from ratc import __version__
from ratc.errors import LocatedError, RatcError
from ratc.gcpause import LAZY_THRESHOLDS

# Listed in workflow order, as `ratc --help` shows them. Each module defines
# `register(subparsers)`, which adds its parser and sets `func`.
# Heavy imports (torch, numpy) stay inside the handlers so `ratc --help` is instant.
COMMAND_MODULES = [
    "ratc.cli.compile",
    "ratc.cli.plan",
    "ratc.cli.run",
    "ratc.cli.report",
    "ratc.cli.diagram",
    "ratc.cli.train",
    "ratc.cli.opt",
    "ratc.cli.passes",
    "ratc.cli.kernel",
    "ratc.cli.asm",
]


class _Parser(argparse.ArgumentParser):
    """argparse with ratc's exit status for bad input: usage errors exit 1, as every other
    user error does (argparse's own convention is 2). Subcommand parsers inherit it."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every subcommand."""
    parser = _Parser(
        prog="ratc",
        description="Compile, plan, schedule and simulate LLM training for bandwidth-constrained accelerators.")
    parser.add_argument("--version", action="version", version=f"ratc {__version__}")
    parser.add_argument("--traceback", action="store_true",
                        help="show the Python traceback on errors (for debugging ratc)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """parse_args, but an unknown argument after the command is reported by that command's
    parser, with its usage (argparse's parse_args reports every one with the top-level usage)."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        chosen = parser
        if args.command is not None:
            # top-level options take no values: the command is the first word that is not an option
            before = argv[:argv.index(args.command)]
            if not any(word in extras for word in before):
                chosen = _commands(parser)[args.command]
        chosen.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser, by name."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


# Arguments naming where a command writes. `ratc run --trace FILE` is one too; the other
# commands' --trace picks a tracer. `ratc report -o` is relative to its OUTDIR by design.
OUTPUT_DESTS = ("output", "outdir", "trace_out", "dump_dir", "csv", "plot", "emit_program")


def absolute_paths(args: argparse.Namespace) -> None:
    """Make the output paths and the cache directory absolute, before any model file runs:
    code of a model file may change the working directory (it is left again afterwards,
    ratc.frontend.user_code, but a path taken in the meantime would name another place)."""
    from ratc.cache import cache_root

    cwd = os.getcwd()
    dests = OUTPUT_DESTS + (("trace",) if args.command == "run" else ())
    for dest in dests:
        if dest == "output" and args.command == "report":
            continue
        value = getattr(args, dest, None)
        # joined, not normalized: "link/.." must keep meaning what the kernel makes of it
        if isinstance(value, str) and value not in ("", "-") and not os.path.isabs(value):
            setattr(args, dest, os.path.join(cwd, value))
        elif isinstance(value, os.PathLike) and not os.path.isabs(value):
            setattr(args, dest, type(value)(os.path.join(cwd, value)))
    root = cache_root()         # (from $RATC_CACHE_DIR, $XDG_CACHE_HOME or $HOME)
    if root is not None and not root.is_absolute():
        os.environ["RATC_CACHE_DIR"] = os.path.join(cwd, root)


def main(argv: list[str] | None = None) -> int:
    """Run ratc; user errors print one message and exit 1 without a traceback."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = _parse(parser, argv)
    args.argv = list(argv)          # as typed, for outputs that record how they were made
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        absolute_paths(args)
        return int(args.func(args) or 0)
    except RatcError as exc:
        if args.traceback:
            raise
        # Located errors already read 'file:line:col: error: ...'; others get a prefix.
        text = str(exc)
        print(text if isinstance(exc, LocatedError) else f"ratc: error: {text}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ratc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def run() -> None:
    """The `ratc` command: main() with a lazier cyclic GC, then a fast exit.

    A compile makes millions of long-lived objects (IR, VM tasks, torch's modules) and
    little cyclic garbage. CPython's default thresholds had the collector re-scan them some
    180 times (14 % of a compile); collecting the young generation every 200,000
    allocations instead of 700, as mypy does, leaves about 1 s of that at the same peak
    memory. Freeing those objects one by one at shutdown took another 2 s and served
    nothing, since every output is written and closed by then: after the exit handlers
    (which close what libraries registered) and a flush of stdout / stderr, the process
    ends at once.
    """
    gc.set_threshold(*LAZY_THRESHOLDS)
    code = main()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):   # reader gone, or the stream was closed
            pass
    os._exit(code)


if __name__ == "__main__":
    run()

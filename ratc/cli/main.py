"""Entry point of the `ratc` command: dispatches to one module per subcommand."""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import signal
import sys
import threading

from ratc import __version__
from ratc.errors import LocatedError, RatcError, Terminated
from ratc.gcpause import LAZY_THRESHOLDS, freeze_after_pauses

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
    "ratc.cli.launch",
    "ratc.cli.calibrate",
    "ratc.cli.opt",
    "ratc.cli.passes",
    "ratc.cli.kernel",
    "ratc.cli.asm",
    "ratc.cli.completion",
]

EPILOG = ("Every term the output uses (E_comm, bubble, FSR, ZeRO stages, GradSync, P/D/Z/b/A, ...) is "
          "defined in docs/glossary.md. `ratc COMMAND --help` for a command's options; "
          "`ratc completion bash|zsh` for shell completion.")


class _Version(argparse.Action):
    """--version: ratc's version and torch's, read from the installed package metadata (no import)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib import metadata

        try:
            torch = metadata.version("torch")
        except metadata.PackageNotFoundError:
            torch = "not installed"
        print(f"ratc {__version__} (torch {torch}, Python {sys.version.split()[0]})")     # (data: stdout)
        parser.exit(0)


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
        description="Compile, plan, schedule and simulate LLM training for bandwidth-constrained accelerators.",
        epilog=EPILOG)
    parser.add_argument("--version", action=_Version, help="print ratc's, torch's and Python's versions and exit")
    parser.add_argument("--traceback", action="store_true",
                        help="show the Python traceback on errors (for debugging ratc)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """parse_args, but an unknown argument after the command is reported by that command's
    parser, with its usage (argparse's parse_args reports every one with the top-level usage)."""
    args, extras = parser.parse_known_args(_attach_dash_values(parser, argv))
    if extras:
        chosen = parser
        if args.command is not None:
            # top-level options take no values: the command is the first word that is not an option
            before = argv[:argv.index(args.command)]
            if not any(word in extras for word in before):
                chosen = _commands(parser)[args.command]
        chosen.error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def _attach_dash_values(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """argv with each value that starts with '-' joined to its option ('--memory-budget -5GB'
    becomes '--memory-budget=-5GB'): argparse would take '-5GB' for an unknown option and say
    the value is missing, where the user gave one that is out of range (which the option's
    type or handler then says)."""
    takes_value, known = set(), set()
    for p in (parser, *_commands(parser).values()):
        for action in p._actions:
            known.update(action.option_strings)
            if action.nargs is None:
                takes_value.update(action.option_strings)
    out, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            out.extend(argv[i:])
            break
        value = argv[i + 1] if i + 1 < len(argv) else None
        if (word in takes_value and value is not None and value.startswith("-") and value != "-"
                and value.split("=", 1)[0] not in known):
            out.append(f"{word}={value}" if word.startswith("--") else word + value)
            i += 2
            continue
        out.append(word)
        i += 1
    return out


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser, by name."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def main(argv: list[str] | None = None) -> int:
    """Run ratc; user errors print one message and exit 1 without a traceback."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = _parse(parser, argv)
    args.argv = list(argv)          # as typed, for outputs that record how they were made
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    from ratc.io import note_inputs

    interrupts = _Interrupts()
    try:
        note_inputs(args)
        with interrupts:
            return int(args.func(args) or 0)
    except RatcError as exc:
        if args.traceback:
            raise
        # Located errors already read 'file:line:col: error: ...'; others get a prefix.
        text = str(exc)
        print(text if isinstance(exc, LocatedError) else f"ratc: error: {text}", file=sys.stderr)
        return 1
    except (RecursionError, UnicodeError) as exc:
        # Raised from inside whatever read an input (a JSON nested thousands deep, a model
        # built from thousands of nested modules, a file name that is not UTF-8 under an
        # ASCII locale): the user's input, not a bug, so it is reported as one.
        if args.traceback:
            raise
        print(f"ratc: error: {_input_problem(exc, argv, args.command)}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        # pathlib's resolve() (Python < 3.13) reports a symlink loop this way, wherever a
        # command resolves an input or output path
        loop = _symlink_loop(exc)
        if loop is None or args.traceback:
            raise
        print(f"ratc: error: {_shown(loop)}: a symbolic link loop", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        if not interrupts.received:
            # raised by code (a model file), not by Ctrl-C: an error in that code
            if args.traceback:
                raise
            print(f"ratc: error: {_raiser(exc)} raised KeyboardInterrupt (no interrupt was received)",
                  file=sys.stderr)
            return 1
        # 128 + the signal's number, as a shell reports a process the signal ended
        terminated = isinstance(exc, Terminated)
        print(f"ratc: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return 128 + (signal.SIGTERM if terminated else signal.SIGINT)
    except BrokenPipeError:
        return 0


class _Interrupts:
    """Inside: SIGINT raises KeyboardInterrupt as Python's own handler does, and SIGTERM
    raises Terminated (one), so that cleanup runs as on Ctrl-C (SIGTERM's default ends the
    process on the spot); both are recorded, so that a KeyboardInterrupt some code raised
    itself can be told from a real one."""

    def __init__(self):
        self.received = False
        self.previous: dict = {}

    def _handle(self, signum, frame):
        self.received = True
        raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            self.received = True        # cannot tell: treat every KeyboardInterrupt as real
            return self
        # SIGINT only where Python's default is in force (not under another handler)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self.previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._handle)
        else:
            self.received = True
        self.previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        return False


def _raiser(exc: BaseException) -> str:
    """'FILE:LINE' of the innermost frame outside ratc and the Python installation."""
    import sysconfig
    import traceback

    own = (os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
           *{sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not any(os.path.abspath(f.filename).startswith(p + os.sep) for p in own)]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "ratc"


def _input_problem(exc: BaseException, argv: list[str], command: str) -> str:
    """What went wrong with which input, for an error that names no file of its own."""
    named = [a for a in argv if not a.startswith("-") and a != command and os.path.lexists(a)]
    where = ", ".join(_shown(a) for a in named) if named else "the input"
    if isinstance(exc, RecursionError):
        return f"{where}: nested too deeply to process (deeper than Python's recursion limit)"
    if isinstance(exc, UnicodeEncodeError):
        return (f"{where}: cannot encode {_shown(exc.object[exc.start:exc.end])!r} as {exc.encoding} "
                "(a file name or text this locale cannot write; use a UTF-8 locale, or -o FILE for output)")
    if isinstance(exc, UnicodeDecodeError):
        return f"{where}: not {exc.encoding} text (byte {exc.start})"
    return f"{where}: {exc}"


def _symlink_loop(exc: RuntimeError) -> str | None:
    """The path of pathlib's 'Symlink loop from PATH' error, else None."""
    text = str(exc)
    prefix = "Symlink loop from "
    if not text.startswith(prefix):
        return None
    quoted = text[len(prefix):]
    return quoted[1:-1] if len(quoted) >= 2 and quoted[0] == quoted[-1] and quoted[0] in "'\"" else quoted


def _shown(text: str) -> str:
    """A name as its bytes read in UTF-8 (Python keeps undecodable ones as lone surrogates)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


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
    freeze_after_pauses()
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

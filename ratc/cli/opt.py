"""`ratc opt`: parse an IR file, run a pass pipeline on it, print the result (or what changed)."""

from __future__ import annotations

import argparse
import sys

from ratc.io import read_input, report_written, to_file, write_output
from ratc.cli.pass_options import add_pass_options, instrumentation, verify_mode
from ratc.errors import RatcError

TERMINAL_IR_LIMIT = 1_000_000     # bytes of IR printed to a terminal without an explicit -o -


def register(sub) -> None:
    p = sub.add_parser("opt", help="run a pass pipeline on an IR file",
                       description="Parse IR, verify it, run a pass pipeline and print the result, or with "
                                   "--stats a summary of what the pipeline changed. IR over 1 MB is not "
                                   "printed to a terminal unless asked with -o -.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n"
                              "  ratc opt prog.ir -p 'cse,dce' --stats\n"
                              "  ratc opt prog.ir -p 'cse,dce' --print-ir-after-change -o out.ir")
    p.add_argument("file", help="IR file to read ('-' for stdin)")
    p.add_argument("-p", "--pipeline", default="", help="pass pipeline, e.g. 'cse,dce' (see `ratc passes`)")
    p.add_argument("-o", "--output", help="write the result here instead of stdout ('-': stdout, at any size)")
    p.add_argument("--stats", action="store_true",
                   help="print the op count per name before and after, and how many ops the pipeline added, "
                        "removed, moved and re-attributed, instead of the IR (which -o still writes)")
    p.add_argument("--json", action="store_true", help="with --stats: the summary as JSON (stable keys)")
    add_pass_options(p)
    p.set_defaults(func=run)


def refuse_terminal_flood(path: str | None, text: str, what: str, summary_flag: str | None = None) -> None:
    """Refuse to print more than TERMINAL_IR_LIMIT of `what` to a terminal when no -o was given."""
    if path is not None or len(text) <= TERMINAL_IR_LIMIT or not sys.stdout.isatty():
        return
    from ratc.units import format_bytes

    summary = f", print a summary with {summary_flag}" if summary_flag else ""
    raise RatcError(f"{what} is {format_bytes(len(text))}, too much for a terminal: write it with -o FILE"
                    f"{summary}, or print it anyway with -o -")


def run(args: argparse.Namespace) -> int:
    from ratc.cli.progress import phase
    from ratc.ir import parse_module, print_module
    from ratc.passes import PassManager, parse_pipeline
    from ratc.passes.change_stats import change_stats, snapshot

    from ratc.limits import MAX_IR_BYTES

    if args.json and not args.stats:
        raise RatcError("--json applies to --stats (the IR itself is text)")
    if args.file != "-":
        MAX_IR_BYTES.check_file(args.file)
    name, text = read_input(args.file)
    passes = parse_pipeline(args.pipeline) if args.pipeline.strip() else []
    with phase(f"reading {name}"):
        module = parse_module(text, name)
    before = snapshot(module) if args.stats else None
    # (stdin cannot be read again: dumps then replay from their own copy of the input)
    source = None if args.file == "-" else name
    inst = instrumentation(args, source)
    manager = PassManager(passes, verify=verify_mode(args), instrumentation=inst)
    with phase(f"running -p '{args.pipeline.strip()}'", enabled=not inst.prints()):
        module = manager.run(module)
    if args.output is not None or not args.stats:
        with phase("printing the module"):
            result = print_module(module)
        refuse_terminal_flood(args.output, result, "the resulting IR", "--stats")
        write_output(args.output, result)
    if to_file(args.output):
        report_written(args.output, f"the module after -p '{args.pipeline.strip()}'" if passes
                       else "the module as parsed (no passes)")
    if before is not None:
        stats = change_stats(before, module)
        if args.json:
            import json
            summary = json.dumps(stats.as_dict(), indent=2, sort_keys=True) + "\n"
        else:
            summary = stats.text()
        # data on stdout, unless the IR went there (-o -): then the summary is a note beside it
        print(summary, end="", file=sys.stderr if args.output == "-" else sys.stdout)
    return 0

"""`ratc opt`: parse an IR file, run a pass pipeline on it, print the result."""

from __future__ import annotations

import argparse

from ratc.io import read_input, report_written, to_file, write_output
from ratc.cli.pass_options import add_pass_options, instrumentation, verify_mode


def register(sub) -> None:
    p = sub.add_parser("opt", help="run a pass pipeline on an IR file",
                       description="Parse IR, verify it, run a pass pipeline and print the result.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="example:\n  ratc opt prog.ir -p 'cse,dce' --print-ir-after-change -o out.ir")
    p.add_argument("file", help="IR file to read ('-' for stdin)")
    p.add_argument("-p", "--pipeline", default="", help="pass pipeline, e.g. 'cse,dce' (see `ratc passes`)")
    p.add_argument("-o", "--output", help="write the result here instead of stdout")
    add_pass_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ratc.ir import parse_module, print_module
    from ratc.passes import PassManager, parse_pipeline

    from ratc.limits import MAX_IR_BYTES

    if args.file != "-":
        MAX_IR_BYTES.check_file(args.file)
    name, text = read_input(args.file)
    passes = parse_pipeline(args.pipeline) if args.pipeline.strip() else []
    module = parse_module(text, name)
    # (stdin cannot be read again: dumps then replay from their own copy of the input)
    source = None if args.file == "-" else name
    manager = PassManager(passes, verify=verify_mode(args), instrumentation=instrumentation(args, source))
    module = manager.run(module)
    write_output(args.output, print_module(module))
    if to_file(args.output):
        report_written(args.output, f"the module after -p '{args.pipeline.strip()}'" if passes
                       else "the module as parsed (no passes)")
    return 0

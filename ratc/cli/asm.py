"""`ratc asm FILE.rasm`: assemble (and print canonically), or run on the kernel VM with a report."""

from __future__ import annotations

from ratc.errors import RatcError


def register(subparsers) -> None:
    p = subparsers.add_parser("asm", help="assemble a .rasm kernel; --run executes it on the kernel VM",
                              description="Assemble a .rasm kernel and print it in canonical form, or run it "
                                          "on the kernel VM and print an llvm-mca-like report.")
    p.add_argument("file", help=".rasm file ('-' for stdin)")
    p.add_argument("--platform", default="mt3000", help="platform profile name or TOML path (default mt3000)")
    p.add_argument("--run", action="store_true", help="execute and print the kernel report")
    p.add_argument("--mode", choices=("full", "timing"), default="full",
                   help="full: numerics on every DSP; timing: cycle count only (fast)")
    p.add_argument("--input", action="append", default=[], metavar="BUF=FILE.npy",
                   help="initial contents of a DDR buffer (others start zeroed)")
    p.add_argument("--random-inputs", type=int, metavar="SEED",
                   help="fill every DDR buffer not given by --input with N(0,1) values from this seed")
    p.add_argument("--save", action="append", default=[], metavar="BUF=FILE.npy",
                   help="after a full run, save a DDR buffer")
    p.add_argument("-o", "--output", help="write the canonical .rasm here instead of stdout")
    p.set_defaults(func=run)


def run(args) -> int:
    from ratc.cli.io import read_input, write_output
    from ratc.codegen.assembler import assemble, disassemble
    from ratc.platform import load_platform

    platform = load_platform(args.platform)
    name, text = read_input(args.file)
    program = assemble(text, platform, filename=name)
    if not args.run:
        write_output(args.output, disassemble(program))
        return 0
    print(run_and_report(program, platform, args))
    return 0


def run_and_report(program, platform, args, useful_macs=None, min_ddr_bytes=None) -> str:
    """Run a program per the --mode/--input/--save flags and return its report."""
    import numpy as np

    from ratc.codegen.report import format_report, kernel_stats
    from ratc.vm.kernel_vm import run_program

    inputs = {}
    for spec in args.input:
        buf, _, path = spec.partition("=")
        if not path:
            raise RatcError(f"--input {spec!r}: expected BUF=FILE.npy")
        try:
            inputs[buf] = np.load(path)
        except OSError as exc:
            raise RatcError(f"--input {spec}: {exc}") from None
    if args.random_inputs is not None:
        rng = np.random.default_rng(args.random_inputs)
        for b in program.buffers:
            if b.space == "ddr" and b.name not in inputs:
                inputs[b.name] = rng.standard_normal(b.shape)
    result = run_program(program, platform, inputs, args.mode)
    for spec in args.save:
        buf, _, path = spec.partition("=")
        if args.mode != "full" or buf not in result.ddr:
            raise RatcError(f"--save {spec!r}: needs --mode full and a DDR buffer of the kernel")
        np.save(path, result.ddr[buf].reshape(program.buffer(buf).shape))
    if min_ddr_bytes is None:
        # a .rasm file declares its DDR arrays: each read (inputs) or written (outputs) once
        min_ddr_bytes = sum(b.size * b.itemsize for b in program.buffers if b.space == "ddr")
    stats = kernel_stats(program, platform, result.cycles, result.counts, useful_macs, min_ddr_bytes)
    return format_report(stats, platform, counted=useful_macs is None).rstrip("\n")

"""`ratc asm FILE.rasm`: assemble (and print canonically), or run on the kernel VM with a report."""

from __future__ import annotations

import io

from ratc.io import write_atomic
from ratc.errors import RatcError


# what each --mode of the kernel VM does (asm and kernel help, and the report's Mode line)
MODES = {
    "full": "executes every DSP's instructions with real numerics (the DDR buffers hold results)",
    "timing": "counts cycles, bundles and traffic without computing any value (fast)",
}


def mode_help(default: str) -> str:
    """The --mode help text of a command whose default mode is `default`."""
    return "with --run: " + "; ".join(f"{name}{' (default)' if name == default else ''} {what}"
                                      for name, what in MODES.items())


def register(subparsers) -> None:
    p = subparsers.add_parser("asm", help="assemble a .rasm kernel; --run executes it on the kernel VM",
                              description="Assemble a .rasm kernel and print it in canonical form, or run it "
                                          "on the kernel VM and print an llvm-mca-like report.")
    p.add_argument("file", help=".rasm file ('-' for stdin)")
    p.add_argument("--platform", default="mt3000", help="platform profile name or TOML path (default mt3000)")
    p.add_argument("--run", action="store_true", help="execute and print the kernel report")
    p.add_argument("--mode", choices=tuple(MODES), default="full", help=mode_help("full"))
    p.add_argument("--input", action="append", default=[], metavar="BUF=FILE.npy",
                   help="initial contents of a DDR buffer (others start zeroed)")
    p.add_argument("--random-inputs", type=int, metavar="SEED",
                   help="fill every DDR buffer not given by --input with N(0,1) values from this seed")
    p.add_argument("--save", action="append", default=[], metavar="BUF=FILE.npy",
                   help="after a full run, save a DDR buffer")
    p.add_argument("-o", "--output", help="write the canonical .rasm here instead of stdout")
    add_json_argument(p)
    p.set_defaults(func=run)


def add_json_argument(p) -> None:
    """--json of `asm` and `kernel`: the --run report as JSON."""
    p.add_argument("--json", action="store_true", help="with --run: print the kernel report as JSON (stable keys)")


def check_json(args) -> None:
    """--json describes a run's report: refused without --run."""
    if args.json and not args.run:
        raise RatcError("--json applies to --run's report (the kernel itself is .rasm text)")


def run(args) -> int:
    from ratc.io import read_input, report_written, to_file, write_output
    from ratc.codegen.assembler import assemble, disassemble
    from ratc.platform import load_platform

    check_json(args)
    platform = load_platform(args.platform)
    name, text = read_input(args.file)
    program = assemble(text, platform, filename=name)
    if not args.run:
        write_output(args.output, disassemble(program))
        if to_file(args.output):
            report_written(args.output, f"kernel {program.name} in canonical form")
        return 0
    print(run_and_report(program, platform, args))
    return 0


def _specs(specs, flag: str, ddr: set):
    """(spec, buffer, path) of each BUF=FILE.npy, the buffer one of the kernel's DDR arrays."""
    for spec in specs:
        buf, _, path = spec.partition("=")
        if not buf or not path:
            raise RatcError(f"{flag} {spec!r}: expected BUF=FILE.npy")
        if buf not in ddr:
            raise RatcError(f"{flag} {spec!r}: the kernel has no DDR buffer {buf!r} (its DDR buffers: "
                            f"{', '.join(sorted(ddr)) or 'none'})")
        yield spec, buf, path


def _load_array(spec: str, buf: str, path: str):
    """A numeric array from a .npy file, or an error naming the file."""
    import numpy as np

    try:
        array = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise RatcError(f"--input {spec!r}: {path}: no such file") from None
    except (OSError, ValueError, EOFError) as exc:
        raise RatcError(f"--input {spec!r}: {path} is not a .npy array file ({exc})") from None
    if not isinstance(array, np.ndarray) or array.dtype.kind not in "biuf":
        raise RatcError(f"--input {spec!r}: {path} holds {getattr(array, 'dtype', type(array).__name__)} "
                        "values; the kernel reads numbers")
    return array


def run_and_report(program, platform, args, useful_macs=None, min_ddr_bytes=None) -> str:
    """Run a program per the --mode/--input/--save flags and return its report."""
    import numpy as np

    from ratc.codegen.report import format_report, kernel_stats
    from ratc.vm.kernel_vm import check_full_run, run_program

    if args.mode == "full":
        check_full_run(program)     # before --input and --random-inputs allocate the buffers
    ddr = {b.name for b in program.buffers if b.space == "ddr"}
    inputs = {buf: _load_array(spec, buf, path) for spec, buf, path in _specs(args.input, "--input", ddr)}
    # every --save is checked before the run, and written after it, each file atomically
    saves = list(_specs(args.save, "--save", ddr))
    if saves and args.mode != "full":
        raise RatcError(f"--save {saves[0][0]!r}: needs --mode full (timing mode computes no values)")
    if args.random_inputs is not None:
        if args.random_inputs < 0:
            raise RatcError(f"--random-inputs must be a non-negative seed, got {args.random_inputs}")
        rng = np.random.default_rng(args.random_inputs)
        for b in program.buffers:
            if b.space == "ddr" and b.name not in inputs:
                inputs[b.name] = rng.standard_normal(b.shape)
    result = run_program(program, platform, inputs, args.mode)
    for _, buf, path in saves:
        out = io.BytesIO()
        np.save(out, result.ddr[buf].reshape(program.buffer(buf).shape))
        write_atomic(path if path.endswith(".npy") else path + ".npy", out.getvalue())     # numpy's naming
    if min_ddr_bytes is None:
        # a .rasm file declares its DDR arrays: each read (inputs) or written (outputs) once
        min_ddr_bytes = sum(b.size * b.itemsize for b in program.buffers if b.space == "ddr")
    stats = kernel_stats(program, platform, result.cycles, result.counts, useful_macs, min_ddr_bytes)
    if getattr(args, "json", False):
        import json
        return json.dumps({**stats.as_dict(), "mode": args.mode}, indent=2, sort_keys=True)
    lines = format_report(stats, platform, counted=useful_macs is None).rstrip("\n").split("\n")
    # which mode ran, after the Platform line (the report itself does not say)
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("Platform:")), 1)
    lines.insert(at, f"{'Mode:':<21}{args.mode} ({'real numerics' if args.mode == 'full' else 'cycles only, no values'})")
    return "\n".join(lines)

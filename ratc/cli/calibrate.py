"""`ratc calibrate`: measure this machine on microbenchmarks and write a host platform profile."""

from __future__ import annotations

import argparse
import sys
import time


DESCRIPTION = ("Measure this machine on microbenchmarks (never on training configurations): GEMM rates over "
               "a grid of shapes, memory-bound operator bandwidth, the fixed cost of an operator and of a pair "
               "of compute tasks, messages between ranks, all-reduce / reduce-scatter / all-gather over them, "
               "and how ranks sharing cores slow each other. Each figure is the median of repeated runs with "
               "its quartiles. Writes a host profile for --platform (kind = \"host\").")
EXAMPLES = """examples:
  ratc calibrate -o host.toml
  ratc calibrate -o host.toml --ranks 2 --threads 1 --quick
  ratc calibrate -o gpu.toml --backend nccl --ranks 8"""


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="measure this machine and write a host platform profile",
                       description=DESCRIPTION, epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", required=True, help="the host profile to write (TOML)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                   help="gloo measures the CPUs, nccl the GPUs (default gloo)")
    p.add_argument("--ranks", type=int, help="processes measured at once, at least 2 (default: gloo, as many as "
                                             "the cores hold at --threads each, at least 2; nccl, the GPUs)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1)")
    p.add_argument("--quick", action="store_true", help="fewer shapes, sizes and runs: seconds, for tests")
    p.set_defaults(func=run)


def _default_ranks(backend: str, threads: int) -> int:
    """One rank per GPU; on CPUs as many ranks of `threads` threads as the cores hold (at least 2)."""
    if backend == "nccl":
        import torch

        return torch.cuda.device_count()
    from ratc.calibrate.machine import cores

    return max(2, cores() // max(threads, 1))


def run(args: argparse.Namespace) -> int:
    from ratc.calibrate.profile import check_replaceable
    from ratc.calibrate.run import calibrate
    from ratc.calibrate.settings import Settings
    from ratc.io import report_written, write_atomic

    settings = Settings(backend=args.backend, ranks=args.ranks or _default_ranks(args.backend, args.threads),
                        threads=args.threads, quick=args.quick)
    check_replaceable(args.output)      # before minutes of measuring
    start = time.monotonic()

    def progress(text: str) -> None:
        print(f"ratc calibrate: {time.monotonic() - start:5.1f} s  {text}", file=sys.stderr, flush=True)

    text = calibrate(settings, args.output, progress)
    write_atomic(args.output, text, "-o")
    report_written(args.output, f"host profile measured in {time.monotonic() - start:.1f} s")
    return 0

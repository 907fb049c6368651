"""Kernel VM speed: timing mode on an 8192^3 GEMM, full-execution bundles per second.

Run: python benchmarks/bench_kernels.py [--repeat N]
Reports medians of N runs (default 5). Targets: timing mode <= 2 s; full >= 50,000 bundles/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from ratc.codegen import tile_choice
from ratc.codegen.gemm import generate_gemm
from ratc.platform import load_platform
from ratc.vm.kernel_timing import run_timing
from ratc.vm.kernel_vm import run_full


def median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ["RATC_CACHE_DIR"] = "off"    # a cached tile choice would skip the search
    platform = load_platform("mt3000")

    def generate():
        tile_choice._CHOSEN.clear()  # include the tile search (and the chooser's timing of its pick) in every run
        return generate_gemm(platform, 8192, 8192, 8192)

    gen_s, kernel = median_time(generate, args.repeat)
    time_s, cycles = median_time(lambda: run_timing(kernel.program, platform), args.repeat)
    print(f"GEMM 8192x8192x8192 ({kernel.options})")
    print(f"  generate (tile choice + codegen + validation): {gen_s:.3f} s (median of {args.repeat})")
    print(f"  timing mode:                                   {time_s:.3f} s -> {cycles} cycles")
    print(f"  total:                                         {gen_s + time_s:.3f} s (target <= 2 s)")

    small = generate_gemm(platform, 256, 256, 256)
    rng = np.random.default_rng(0)
    inputs = {"A": rng.standard_normal((256, 256)), "B": rng.standard_normal((256, 256))}
    full_s, result = median_time(lambda: run_full(small.program, platform, inputs), args.repeat)
    bundles = result.counts["bundles"] * small.program.dsps
    print(f"GEMM 256x256x256 full execution ({small.program.dsps} DSPs, {bundles} bundles)")
    print(f"  {full_s:.3f} s -> {bundles / full_s:,.0f} bundles/s (median of {args.repeat}; target >= 50,000)")
    print(f"  full cycles {result.cycles} == timing cycles {run_timing(small.program, platform)}: "
          f"{result.cycles == run_timing(small.program, platform)}")


if __name__ == "__main__":
    main()

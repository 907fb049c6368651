"""`ratc compile` + run of LLaMA-2-7B on 8 clusters, kernels included: cold and warm caches.

Each run is a fresh `ratc compile examples/llama.py --preset llama2-7b --clusters 8`
process (trace, plan with the kernel-VM execution profile, lifecycle passes with codegen,
program directory with kernels, one simulated step). "cold" starts from an empty
$RATC_CACHE_DIR (kernel timings and traces); "warm" reuses what the cold run filled. Reports medians of
wall-clock and CPU (user + sys) seconds; CPU time is what the compile costs when the
machine is shared. Targets (issue 10): <= 30 s cold, <= 10 s warm.

    python benchmarks/bench_compile.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "ratc.cli.main", "compile", str(ROOT / "examples" / "llama.py"),
           "--preset", "llama2-7b", "--clusters", "8"]
TARGET = {"cold": 30.0, "warm": 10.0}


def timed(command: list[str], env: dict, cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s) of a command in a fresh process; exits with its stderr if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(command, env=env, capture_output=True, text=True, cwd=cwd)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        sys.exit(f"{' '.join(command)} failed in {cwd}:\n{proc.stderr}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_once(cache: str, out: str) -> tuple[float, float]:
    """(wall s, CPU s) of one compile in a fresh process."""
    return timed(COMMAND + ["-o", out], {**os.environ, "RATC_CACHE_DIR": cache}, ROOT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    results = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            cache = str(Path(tmp) / f"cache{i}")
            results["cold"].append(run_once(cache, str(Path(tmp) / "out")))
            results["warm"].append(run_once(cache, str(Path(tmp) / "out")))
    ok = True
    print(f"{'caches':<14}{'wall s (median)':>16}{'CPU s (median)':>16}{'target s':>10}")
    for case, runs in results.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        ok &= min(wall, cpu) <= TARGET[case]
        print(f"{case:<14}{wall:>16.2f}{cpu:>16.2f}{TARGET[case]:>10.0f}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""This checkout against another (e.g. an issue's starting commit) on the everyday commands,
run alternately in one sitting: `ratc compile` of LLaMA-2-7B on 8 clusters with warm
caches, and `ratc run` of the program it wrote: as run after the compile (which keeps its
report in the run cache, ratc.vm.system.run_cache) and cold (the run cache emptied first, so
the program is parsed, checked, translated and simulated again).

Each run is a fresh process; the two checkouts alternate, each with its own warm
$RATC_CACHE_DIR (one untimed compile fills it). Reports the medians of wall-clock and CPU
(user + sys) seconds and this checkout's share of the other's. CPU time is the steadier on
a shared machine.

    git worktree add /tmp/base <commit>
    python benchmarks/bench_versus.py /tmp/base [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench_compile import timed as timed_command

ROOT = Path(__file__).resolve().parents[1]
MODEL = ["--preset", "llama2-7b", "--clusters", "8"]


def timed(checkout: Path, args: list[str], cache: str) -> tuple[float, float]:
    """(wall s, CPU s) of `ratc ARGS` run from `checkout` in a fresh process."""
    env = {**os.environ, "RATC_CACHE_DIR": cache, "PYTHONPATH": str(checkout)}
    return timed_command([sys.executable, "-m", "ratc", *args], env, checkout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path, help="the other checkout (a directory holding ratc/)")
    ap.add_argument("--runs", type=int, default=5, help="runs of each command per checkout (default 5)")
    args = ap.parse_args()
    if not (args.base / "ratc" / "__init__.py").is_file():
        sys.exit(f"{args.base}: not a ratc checkout (no ratc/__init__.py)")
    checkouts = {"this": ROOT, "base": args.base.resolve()}
    commands = ("compile", "run", "run cold")
    times: dict = {(who, cmd): [] for who in checkouts for cmd in commands}
    with tempfile.TemporaryDirectory() as tmp:
        for who, checkout in checkouts.items():      # fill each checkout's caches (untimed)
            timed(checkout, ["compile", str(checkout / "examples" / "llama.py"), *MODEL, "-o", f"{tmp}/{who}"],
                  f"{tmp}/cache-{who}")
        for i in range(args.runs):
            for who, checkout in checkouts.items():
                out = f"{tmp}/{who}"
                times[who, "compile"].append(timed(checkout, ["compile", str(checkout / "examples" / "llama.py"),
                                                              *MODEL, "-o", out], f"{tmp}/cache-{who}"))
                times[who, "run"].append(timed(checkout, ["run", out], f"{tmp}/cache-{who}"))
                shutil.rmtree(f"{tmp}/cache-{who}/runs", ignore_errors=True)
                times[who, "run cold"].append(timed(checkout, ["run", out], f"{tmp}/cache-{who}"))
            print(f"round {i + 1}/{args.runs} done", file=sys.stderr, flush=True)
    print(f"{'command':<10}{'this wall s':>13}{'base wall s':>13}{'this CPU s':>12}{'base CPU s':>12}{'CPU share':>11}")
    for cmd in commands:
        med = {who: [statistics.median(x[k] for x in times[who, cmd]) for k in (0, 1)] for who in checkouts}
        print(f"{cmd:<10}{med['this'][0]:>13.2f}{med['base'][0]:>13.2f}{med['this'][1]:>12.2f}"
              f"{med['base'][1]:>12.2f}{med['this'][1] / med['base'][1]:>10.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Kill `ratc compile -o DIR` over an existing program at random instants and check what is left.

Each trial starts `ratc compile` of the tiny preset (alternating two plans, so the old and
the new program differ) into a directory that holds the other plan's program, and sends
it SIGKILL or SIGTERM after a random delay: half of the trials anywhere in the run, half
while it writes the program (the delay counts from when its staging directory appears).
Then the next run's first step (`ratc.atomic.recover`, which every program write runs) and
a check: the target is a complete program, the old one or the new one, and no temporary is
left. Every tenth trial the next run is a whole `ratc compile`. Prints the outcome counts;
exits 1 on any failure.

    python benchmarks/kill_compile.py                 # 100 SIGKILL + 100 SIGTERM
    python benchmarks/kill_compile.py --trials 10 --seed 3
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ratc.atomic import TMP_TAG, recover
from ratc.program import load_program

PLANS = ("P=1,D=2,Z=2,b=16,A=4,Full,deadline", "P=2,D=1,Z=1,b=8,A=8,FSR,deadline")


def compile_cmd(target: Path, plan: str) -> list[str]:
    return [sys.executable, "-m", "ratc", "compile", "--preset", "tiny", "--plan", plan, "--no-run", "-o", str(target)]


def config_of(target: Path) -> str:
    return load_program(target).meta["config"]


def leftovers(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir() if p.name.startswith("."))


def one_trial(target: Path, rng: random.Random, signum: int, in_write: bool, full_run: float) -> str:
    """Run a killed compile; return the outcome ('old', 'new', 'finished' ...) or raise AssertionError."""
    old = config_of(target)
    new_plan = PLANS[1] if old == PLANS[0] else PLANS[0]
    proc = subprocess.Popen(compile_cmd(target, new_plan), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if in_write:
        deadline = time.monotonic() + 60
        while not any(p.name.startswith(f".{target.name}{TMP_TAG}") for p in target.parent.iterdir()):
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.0005)
        time.sleep(rng.uniform(0, 0.05))
    else:
        time.sleep(rng.uniform(0, full_run))
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    if proc.returncode not in (0, -signal.SIGKILL, 128 + signal.SIGTERM, -signal.SIGTERM):
        raise AssertionError(f"compile exited {proc.returncode}: {err.decode()[-400:]}")
    done = recover(target)
    got = config_of(target)          # raises if the program is incomplete or damaged
    if got not in (old, new_plan):
        raise AssertionError(f"the target holds {got}, neither the old {old} nor the new {new_plan}")
    if leftovers(target):
        raise AssertionError(f"temporaries left: {leftovers(target)}")
    return ("new" if got != old else "old") + (f", swap {done}" if done else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=100, help="trials per signal (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="ratc-kill-"))
    target = work / "prog"
    start = time.perf_counter()
    subprocess.run(compile_cmd(target, PLANS[0]), check=True, capture_output=True)
    full_run = time.perf_counter() - start
    assert config_of(target) == PLANS[0], "a plan's label is the --plan text it was given"
    counts = collections.Counter()
    failures = []
    for signum in (signal.SIGKILL, signal.SIGTERM):
        for trial in range(args.trials):
            try:
                counts[(signum.name, one_trial(target, rng, signum, trial % 2 == 1, full_run))] += 1
                if trial % 10 == 9:
                    subprocess.run(compile_cmd(target, PLANS[trial % 2]), check=True, capture_output=True)
                    assert not leftovers(target)
            except Exception as exc:      # report every kind of failure and go on
                failures.append(f"{signum.name} trial {trial}: {exc}")
                counts[(signum.name, "FAILED")] += 1
            print(f"\r{signum.name} {trial + 1}/{args.trials}", end="", file=sys.stderr, flush=True)
        print(file=sys.stderr)
    print(f"ratc compile killed at random instants ({args.trials} per signal, seed {args.seed}, "
          f"one compile {full_run:.1f} s)\n")
    print("| signal | outcome after the next run | trials |\n|---|---|---|")
    for (sig, outcome), n in sorted(counts.items()):
        print(f"| {sig} | {outcome} | {n} |")
    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

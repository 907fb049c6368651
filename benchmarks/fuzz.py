"""Fuzz every parser and loader at volume: each case in a forked child bounded in time and memory.

    python benchmarks/fuzz.py                         # 10 000 cases of every target
    python benchmarks/fuzz.py --target ir --cases 500 --seed 7
    python benchmarks/fuzz.py --target cli --replay 1234   # one case again, in process

The targets are tests/fuzz_targets.py's (the CI sample in tests/test_fuzz.py runs a few of
each). Prints, per target, how many cases succeeded, ended in a RatcError naming their place,
and failed (another exception, a RatcError naming no place, over the time or memory limit);
exits 1 on any failure, with the command that replays each.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import fuzz_targets  # noqa: E402

TIME_LIMIT = 10.0            # seconds per case
MEMORY_LIMIT = 2 << 30       # bytes of address space per case, above what the parent had mapped


def _address_space() -> int:
    """This process's mapped address space in bytes (VmSize)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def run_bounded(target: str, seed: int, env, time_limit: float, memory_limit: int) -> tuple[str, str]:
    """(outcome, message) of one case run in a forked child: 'ok', 'error' or 'failure'."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        code = 0
        try:
            limit = _address_space() + int(memory_limit)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            try:
                outcome = (fuzz_targets.run_case(fuzz_targets.make_case(target, seed, env)), "")
            except fuzz_targets.Failure as exc:
                outcome = ("failure", str(exc))
            except MemoryError:
                outcome = ("failure", f"over the memory limit ({memory_limit >> 20} MiB)")
        except BaseException:  # noqa: BLE001 - the child must never return into the parent's loop
            outcome = ("failure", f"making the case failed:\n{traceback.format_exc()[-2000:]}")
        try:
            os.write(write_end, json.dumps(outcome).encode())
        except BaseException:  # noqa: BLE001
            code = 3
        finally:
            os._exit(code)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + time_limit
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "failure", f"over the time limit ({time_limit:g} s)"
            chunk = os.read(read_end, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    except BaseException:
        os.kill(pid, signal.SIGKILL)        # interrupted: leave no child running
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
               else f"exit status {os.WEXITSTATUS(status)}")
        return "failure", f"the case's process died without a result ({how}; out of memory?)"
    outcome, message = json.loads(b"".join(chunks))
    return outcome, message


def build_env(work: Path):
    """Compile the tiny program (in a subprocess: the parent forks, so it must not start torch's
    threads) and load the texts the targets mutate."""
    program = work / "tiny"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "ratc", "compile", "--preset", "tiny", "--clusters", "2",
                           "--no-run", "-o", str(program)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"compiling the tiny program failed:\n{done.stderr}")
    return fuzz_targets.make_env(program, work / "cases")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", action="append", choices=sorted(fuzz_targets.TARGETS),
                        help="fuzz this target (repeatable; default: all)")
    parser.add_argument("--cases", type=int, default=10_000, help="cases per target (default 10 000)")
    parser.add_argument("--seed", type=int, default=0, help="first case's seed; case i uses seed + i")
    parser.add_argument("--replay", type=int, metavar="SEED", help="run one case in process and show it")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT, help="seconds per case (default 10)")
    parser.add_argument("--memory-limit", type=float, default=MEMORY_LIMIT / (1 << 30),
                        help="GiB of memory per case (default 2)")
    args = parser.parse_args(argv)
    targets = args.target or sorted(fuzz_targets.TARGETS)
    from tqdm import tqdm

    with tempfile.TemporaryDirectory(prefix="ratc-fuzz-") as tmp:
        os.environ.setdefault("RATC_CACHE_DIR", str(Path(tmp) / "cache"))
        env = build_env(Path(tmp))
        if args.replay is not None:
            return _replay(targets, args.replay, env)
        fuzz_targets.warm(env)     # once here, not in every child
        # `timeout` and kill stop the run with a report of the cases done so far
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
        failures, interrupted = [], False
        try:
            for target in targets:
                _fuzz(target, args, env, failures, tqdm)
        except KeyboardInterrupt:
            interrupted = True
            print("interrupted (the last count is of the cases run until then)", flush=True)
        for target, seed, message in failures:
            print(f"\nFAILURE {target} seed {seed}: {fuzz_targets.reproducer(target, seed)}\n  {message[:1500]}")
        return 1 if failures else 130 if interrupted else 0


def _fuzz(target: str, args, env, failures: list, tqdm) -> None:
    """Run the target's cases, print its counts (those so far if interrupted)."""
    counts = {"ok": 0, "error": 0, "failure": 0}
    start = time.monotonic()
    bar = tqdm(range(args.seed, args.seed + args.cases), desc=target, file=sys.stderr,
               disable=not sys.stderr.isatty(), unit="case")
    try:
        for seed in bar:
            outcome, message = run_bounded(target, seed, env, args.time_limit, args.memory_limit * (1 << 30))
            counts[outcome] += 1
            if outcome == "failure":
                failures.append((target, seed, message))
                first, _, _ = message.partition("\n")
                print(f"failure: {target} seed {seed}: {first[:200]}", flush=True)
            bar.set_postfix(fail=counts["failure"], refresh=False)
    finally:
        bar.close()
        done = sum(counts.values())
        print(f"{target:13} {done:6} cases (seeds {args.seed}..{args.seed + done - 1}) in "
              f"{time.monotonic() - start:7.1f} s: {counts['ok']:6} ok, {counts['error']:6} RatcError, "
              f"{counts['failure']:4} failures", flush=True)


def _replay(targets: list[str], seed: int, env) -> int:
    """Run one case of each target in process, showing what it is and its outcome."""
    code = 0
    for target in targets:
        case = fuzz_targets.make_case(target, seed, env)
        print(f"{target} seed {seed}: {case.what[:2000]}")
        try:
            print(f"  -> {fuzz_targets.run_case(case)}")
        except fuzz_targets.Failure as exc:
            print(f"  -> FAILURE {exc}")
            code = 1
    return code

if __name__ == "__main__":
    sys.exit(main())

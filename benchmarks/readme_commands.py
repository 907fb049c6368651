"""The README's commands, run in order on a fresh clone: each finishes, prints at most 200 lines, and takes how long.

    python benchmarks/readme_commands.py [--timeout 1800] [--skip-install] [--only PATTERN] [--write-docs]

Every line of the README's ```sh blocks is a command (a trailing backslash continues it);
they run in order, in a `git clone` of this checkout's HEAD in a temporary directory, with
the clone's code first on PYTHONPATH (the `ratc` on PATH is this environment's
entry point), each under a timeout. The install commands of the set-up run unless
--skip-install (they install the clone into this environment, as a user would). A command
that needs a GPU (`--backend nccl`) is skipped without one. "finished" means it ended
within its timeout without a Python traceback; its exit status is recorded too (some
commands show a refusal on purpose, e.g. a plan that does not fit). Prints a markdown
table; --write-docs writes it to docs/readme_commands.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "readme_commands.md"
MAX_LINES = 200
_FENCE = re.compile(r"^```sh\s*$\n(.*?)^```\s*$", re.S | re.M)


def readme_commands(text: str) -> list[str]:
    """The commands of a README's ```sh blocks, in order (continuation lines joined)."""
    out: list[str] = []
    for block in _FENCE.findall(text):
        pending = ""
        for line in block.splitlines():
            if not line.strip() and not pending:
                continue
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1].rstrip() + " "
                continue
            command = (pending + line.strip()).strip()
            pending = ""
            if command and not command.startswith("#"):
                out.append(command)
        if pending.strip():
            out.append(pending.strip())
    return out


def needs_gpu(command: str) -> bool:
    return "--backend nccl" in command or "--backend=nccl" in command


def is_install(command: str) -> bool:
    return command.startswith("pip install")


def run(command: str, cwd: Path, timeout: float) -> dict:
    """One command in a shell: its status, wall time, output lines, and whether it finished."""
    env = {**os.environ, "PYTHONPATH": str(cwd), "PYTHONUNBUFFERED": "1"}
    load = os.getloadavg()[0]       # other work on the machine inflates the wall time; say how much ran
    start = time.perf_counter()
    try:
        # bash, as a user's shell runs them (`source <(...)` is not POSIX sh)
        done = subprocess.run(command, shell=True, executable="/bin/bash", cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, errors="replace")
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
        return {"status": "timeout", "seconds": time.perf_counter() - start, "lines": len(out.splitlines()),
                "finished": False, "load": load}
    out = done.stdout + done.stderr
    return {"status": str(done.returncode), "seconds": time.perf_counter() - start, "lines": len(out.splitlines()),
            "finished": "Traceback (most recent call last)" not in out, "load": load}


def table(rows: list) -> str:
    lines = ["| # | command | exit | wall s | load | lines | ok |", "|---:|---|---:|---:|---:|---:|---|"]
    for i, (command, r) in enumerate(rows, 1):
        ok = "skipped: " + r["skipped"] if "skipped" in r else (
            "yes" if r["finished"] and r["lines"] <= MAX_LINES else
            "**NO**: " + ("traceback" if r["status"] != "timeout" and not r["finished"] else r["status"] if
                          not r["finished"] else f"{r['lines']} lines"))
        shown = command.replace("|", "\\|")
        wall = f"{r['seconds']:.1f} | {r['load']:.1f}" if "seconds" in r else " | "
        lines.append(f"| {i} | `{shown}` | {r.get('status', '')} | {wall} | {r.get('lines', '')} | {ok} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per command (default 1800)")
    ap.add_argument("--skip-install", action="store_true", help="leave out the set-up's pip install commands")
    ap.add_argument("--only", metavar="PATTERN", help="run only the commands matching this regular expression")
    ap.add_argument("--write-docs", action="store_true", help=f"write the table to {DOC.relative_to(ROOT)}")
    args = ap.parse_args()
    commands = readme_commands((ROOT / "README.md").read_text())
    gpu = _has_gpu()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "ratc"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        for i, command in enumerate(commands, 1):
            if args.only and not re.search(args.only, command):
                continue
            if args.skip_install and is_install(command):
                rows.append((command, {"skipped": "--skip-install"}))
                continue
            if needs_gpu(command) and not gpu:
                rows.append((command, {"skipped": "needs a GPU"}))
                continue
            print(f"[{i}/{len(commands)}] {command}", file=sys.stderr, flush=True)
            r = run(command, clone, args.timeout)
            print(f"    {r['status']} in {r['seconds']:.1f} s, {r['lines']} lines", file=sys.stderr, flush=True)
            rows.append((command, r))
    text = table(rows)
    if args.write_docs:
        sys.path.insert(0, str(ROOT))
        from ratc.io import write_atomic

        head = ("# The README's commands, timed\n\nGenerated by `python benchmarks/readme_commands.py "
                "--write-docs` on a fresh clone (2 cores): every command of the README's ```sh blocks in "
                f"order; ok = finished without a traceback and printed at most {MAX_LINES} lines; load = "
                "the machine's 1-minute load average as the command started (other work inflates its time).\n\n")
        write_atomic(str(DOC), head + text)
    print(text, end="")
    ran = [r for _, r in rows if "skipped" not in r]
    return 0 if all(r["finished"] and r["lines"] <= MAX_LINES for r in ran) else 1


def _has_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())

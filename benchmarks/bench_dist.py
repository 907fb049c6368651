"""The distributed runtime measured: start-up, time per step, exposed communication, and the
equality matrix against the one-process executor and plain PyTorch.

    python benchmarks/bench_dist.py                     # timings + the quick matrix
    python benchmarks/bench_dist.py --matrix medium     # 24 configurations of each preset
    python benchmarks/bench_dist.py --matrix full --write-docs   # all 288; writes docs/distributed_measured.md
    python benchmarks/bench_dist.py --matrix full --resume rows.jsonl   # resumable (hours on 2 cores)

Timings: `ratc launch`'s library entry on the tiny preset at P=2, D=2 (4 processes), median
of --runs: start-up (from the call to the first step), the median step (steps 1..N-1)
against the one-process executor's on the same program, and the share of a step the ranks
spent blocked on transfers and collectives. Matrix: for each configuration of the `tiny`
preset and the `tiny-tied` one (embedding and LM head share a weight), the runtime's losses
and final parameters against the one-process executor (bit for bit at D <= 2) and against
plain PyTorch training (relative loss deviation and parameter deviation, <= 1e-5).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from ratc.io import write_atomic
from ratc.dist.launch import launch
from ratc.dist.worker import RunConfig
from ratc.vm.functional.session import Session, TrainConfig, compile_for, parameter_deviation, relative_deviation
from ratc.vm.functional.units import flat_params

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(ROOT / "examples" / "llama.py")
DOC = ROOT / "docs" / "distributed_measured.md"
PRESETS = ("tiny", "tiny-tied")


def timings(runs: int, steps: int) -> dict:
    """Start-up and step times of launch at P=2, D=2 against the one-process executor."""
    cfg = TrainConfig(model=EXAMPLE, P=2, D=2, Z=1, M=4, b=2, reference=False)
    module = compile_for(cfg)
    startup, dist_step, exposed, local_step = [], [], [], []
    for _ in range(runs):
        start = time.perf_counter()
        results = launch(module, RunConfig(model=EXAMPLE, preset="tiny", steps=steps), 2, 2)
        total = time.perf_counter() - start
        r0 = results[0]
        startup.append(total - sum(r0.step_seconds))
        dist_step.append(statistics.median(r0.step_seconds[1:]))
        exposed.append(statistics.median(e / s for e, s in zip(r0.exposed_seconds[1:], r0.step_seconds[1:])))
        session = Session(cfg, module=module)
        times = []
        for i in range(steps):
            t = time.perf_counter()
            session.step(i)
            times.append(time.perf_counter() - t)
        local_step.append(statistics.median(times[1:]))
    return {"startup": statistics.median(startup), "dist_step": statistics.median(dist_step),
            "local_step": statistics.median(local_step), "exposed": statistics.median(exposed),
            "spread": (min(dist_step), max(dist_step))}


def configurations(kind: str):
    """(preset, P, D, Z, activation policy, deadline prefetch) of each matrix run."""
    if kind == "quick":
        yield from [("tiny", 2, 2, 1, "fsr", True), ("tiny", 1, 2, 3, "ckpt", False),
                    ("tiny-tied", 4, 1, 2, "full", True), ("tiny-tied", 2, 2, 0, "fsr", False)]
        return
    grid = list(itertools.product((1, 2, 4), (1, 2), (0, 1, 2, 3)))
    for preset in PRESETS:
        if kind == "medium":        # every P, D and ZeRO stage; the policies taken in turn
            for k, (P, D, Z) in enumerate(grid):
                yield preset, P, D, Z, ("fsr", "ckpt", "full")[k % 3], k % 2 == 0
        else:
            for (P, D, Z), act, sp in itertools.product(grid, ("full", "ckpt", "fsr"), (True, False)):
                yield preset, P, D, Z, act, sp


def matrix_row(preset: str, P: int, D: int, Z: int, act: str, sp: bool, steps: int) -> dict:
    """One configuration trained by `ratc launch`, the one-process executor and PyTorch."""
    cfg = TrainConfig(model=EXAMPLE, preset=preset, P=P, D=D, Z=Z, act=act, state_pipeline=sp, M=4, b=1)
    module = compile_for(cfg)
    results = launch(module, RunConfig(model=EXAMPLE, preset=preset, steps=steps), P, D)
    session = Session(cfg, module=module)
    ours, ref = zip(*(session.step(i) for i in range(steps)))
    params = session.executor.parameters()
    # each rank's shards laid end to end, then the unit's own layout (a tied parameter's
    # copy sits in a padded segment of its own) makes the flat vector of them
    dist_params = [session.executor.state[0][u].unshard(torch.cat([r.shards[u] for r in results if u in r.shards]))
                   for u in range(len(params))]
    losses = results[0].losses
    return {"config": _label(preset, P, D, Z, act, sp),
            "bitwise": losses == list(ours) and all(torch.equal(a, b) for a, b in zip(dist_params, params)),
            "loss_dev": max(relative_deviation(a, b) for a, b in zip(losses, ref)),
            "param_dev": parameter_deviation(dist_params, [flat_params(u, session.reference.model)
                                                           for u in session.units.units])}


def source_hash() -> str:
    """What the rows measured: the sha256 of ratc's Python sources (a resumed matrix reuses
    only rows of the same code)."""
    h = hashlib.sha256()
    for path in sorted((ROOT / "ratc").rglob("*.py")):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def measured_rows(path: Path | None, code: str, steps: int) -> dict:
    """{configuration: row} of a --resume file measured by this code at this step count."""
    if path is None or not path.exists():
        return {}
    rows = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            print(f"{path}:{n}: not a row (an interrupted write?); measured again", file=sys.stderr)
            continue
        if row.get("code") == code and row.get("steps") == steps:
            rows[row["config"]] = row
    return rows


def _label(preset: str, P: int, D: int, Z: int, act: str, sp: bool) -> str:
    return f"{preset} P={P} D={D} Z={Z} {act} {'deadline' if sp else 'bulk'}"


def _sections(text: str) -> dict:
    """{'## title': its lines, ...} of a measured doc ('' holds what precedes the first)."""
    out, title = {"": []}, ""
    for line in text.splitlines():
        if line.startswith("## "):
            title = line
            out[title] = []
        out[title].append(line)
    return out


def _equality(preset: str, rows: list, args, when: str) -> list:
    """The equality table of one preset's runs, headed by the command that made it."""
    bad = [r for r in rows if not r["bitwise"] or r["loss_dev"] > 1e-5 or r["param_dev"] > 1e-5]
    resumed = sum(bool(r.get("resumed")) for r in rows)
    earlier = (f" ({resumed} of the rows from earlier runs of the same code, ratc source {rows[0]['code']}, "
               "through --resume)" if resumed else "")
    return ([f"## Equality: {preset}", "",
             f"`python benchmarks/bench_dist.py --matrix {args.matrix} --presets {preset} --steps {args.steps}` "
             f"on {when}{earlier}; {args.steps} steps, M=4, b=1.", "",
             "| configuration | equal to the one-process executor bit for bit | max loss deviation "
             "from PyTorch | parameter deviation from PyTorch |", "|---|---|---|---|"]
            + [f"| {r['config']} | {'yes' if r['bitwise'] else 'NO'} | {r['loss_dev']:.2e} | {r['param_dev']:.2e} |"
               for r in rows]
            + ["", f"{len(rows) - len(bad)} of {len(rows)} configurations pass.", ""])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="timing repetitions (default 3; 0 skips the timings)")
    ap.add_argument("--steps", type=int, default=20, help="steps per matrix run (default 20)")
    ap.add_argument("--matrix", choices=("none", "quick", "medium", "full"), default="quick",
                    help="configurations checked: quick 4, medium 24 per preset (every P, D, Z), full 144 per preset")
    ap.add_argument("--presets", nargs="+", choices=PRESETS, default=list(PRESETS),
                    help="the presets of the matrix (default both)")
    ap.add_argument("--resume", type=Path, metavar="FILE",
                    help="append each matrix row to FILE as it is measured, and take the rows FILE already "
                         "holds for this code and step count instead of measuring them again")
    ap.add_argument("--write-docs", action="store_true",
                    help=f"write the results to {DOC.relative_to(ROOT)}, replacing only the sections measured")
    args = ap.parse_args()
    # one thread, as every rank runs (RunConfig.threads) and `ratc train` does: the one-process
    # executor is then compared at equal threads, and two threads on a busy 2-core machine
    # wait on each other for most of a step
    torch.set_num_threads(1)
    when = (f"{time.strftime('%Y-%m-%d')}, {torch.get_num_threads()}-thread {sys.platform}, torch "
            f"{torch.__version__}, gloo, load average {os.getloadavg()[0]:.1f} at the start")
    sections = {"": ["# The distributed runtime, measured", "",
                     "Each section says the command that measured it and when (timings are only as quiet as "
                     "the machine was).", ""]}
    if args.runs:
        t = timings(args.runs, 6)
        sections["## Timings"] = [
            "## Timings", "", f"`python benchmarks/bench_dist.py --runs {args.runs}` on {when}: tiny preset, "
            "P=2, D=2 (4 processes), M=4, b=2; medians.", "",
            "| start-up | step (runtime) | step (one process) | ratio | exposed communication |", "|---|---|---|---|---|",
            f"| {t['startup']:.2f} s | {t['dist_step'] * 1e3:.1f} ms ({t['spread'][0] * 1e3:.1f}-"
            f"{t['spread'][1] * 1e3:.1f}) | {t['local_step'] * 1e3:.1f} ms | "
            f"{t['dist_step'] / t['local_step']:.2f}x | {t['exposed']:.1%} of the step |", ""]
        print("\n".join(sections["## Timings"]), flush=True)
    if args.matrix != "none":
        configs = [c for c in configurations(args.matrix) if c[0] in args.presets]
        code = source_hash()
        done = measured_rows(args.resume, code, args.steps)
        rows: dict = {preset: [] for preset in args.presets}
        for k, c in enumerate(configs):
            row = done.get(_label(*c))
            if row is not None:
                row = {**row, "resumed": True}
            else:
                row = {**matrix_row(*c, steps=args.steps), "code": code, "steps": args.steps}
                if args.resume is not None:
                    with open(args.resume, "a") as f:     # (a killed run loses at most this line)
                        f.write(json.dumps(row, sort_keys=True) + "\n")
            rows[c[0]].append(row)
            print(f"[{k + 1}/{len(configs)}] {row}", file=sys.stderr, flush=True)
        for preset in args.presets:
            sections[f"## Equality: {preset}"] = _equality(preset, rows[preset], args, when)
    if args.write_docs:
        kept = _sections(DOC.read_text()) if DOC.exists() else {}
        merged = {**kept, **sections}
        order = ["", "## Timings"] + [f"## Equality: {p}" for p in PRESETS]
        text = "\n".join(line for title in order if title in merged for line in merged[title]) + "\n"
        write_atomic(DOC, text)
    print("\n".join(line for lines in sections.values() for line in lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Kill a rank and resume: the training continues bit for bit from the last checkpoint.

Each case (seeded) picks a configuration (ZeRO 0-3, P and D in {1, 2}, the tiny or the
tiny-tied preset), a step and a moment: mid-step (rank 0 SIGKILLed after that step's loss,
before its save) or mid-save (SIGKILLed while completing that step's checkpoint, after DCP
wrote every file). The job, checkpointing after every step, must fail naming the rank; the
last complete checkpoint must be the one before; resuming from it must give the losses and
final parameters of the uninterrupted run of the same program, bit for bit.

    python benchmarks/kill_resume.py [--cases 20] [--seed 0] [--steps 4]
    python benchmarks/kill_resume.py --every-layout    # each ZeRO stage x P x D once (16 cases)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import torch

from ratc.dist.launch import launch
from ratc.dist.worker import RunConfig
from ratc.errors import RatcError
from ratc.vm.functional import checkpoint as ckpt
from ratc.vm.functional.session import TrainConfig, compile_for

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "llama.py")
DEADLINE_S = 300


LAYOUTS = [(P, D, Z) for Z in range(4) for P in (1, 2) for D in (1, 2)]


def case(rng: random.Random, steps: int, layout: tuple | None = None) -> dict:
    """One seeded case: configuration (`layout` = (P, D, Z) if given), the step whose end
    is interrupted, and how."""
    P, D = layout[:2] if layout else rng.choice([(1, 1), (1, 2), (2, 1), (2, 2)])
    preset = rng.choice(["tiny", "tiny-tied"])
    Z = layout[2] if layout else rng.randrange(4)
    return {"preset": preset, "P": P, "D": D, "Z": Z,
            "kill_after": rng.randrange(1, steps), "moment": rng.choice(["mid-step", "mid-save"])}


def _die(*_):
    os.kill(os.getpid(), signal.SIGKILL)


def run_case(c: dict, steps: int) -> str:
    """'ok', or what differed."""
    train = TrainConfig(model=EXAMPLE, preset=c["preset"], P=c["P"], D=c["D"], Z=c["Z"], M=2, b=1, reference=False)
    module = compile_for(train)
    cfg = RunConfig(model=EXAMPLE, preset=c["preset"], steps=steps)
    whole = launch(module, cfg, c["P"], c["D"], deadline_s=DEADLINE_S)
    k = c["kill_after"]          # the job dies at the end of step index k (k steps saved before)
    with tempfile.TemporaryDirectory() as root:
        cfg = dataclasses.replace(cfg, checkpoint_dir=root, checkpoint_every=1)
        complete = ckpt.write_manifest
        on_step = None
        if c["moment"] == "mid-step":
            on_step = lambda i, *a: _die() if i == k else None      # noqa: E731
        else:       # the forked ranks inherit the patched module
            ckpt.write_manifest = lambda d, step, *a: _die() if step == k + 1 else complete(d, step, *a)
        try:
            launch(module, cfg, c["P"], c["D"], on_step=on_step, deadline_s=DEADLINE_S)
            return "the killed job did not fail"
        except RatcError as exc:
            if "rank 0 (stage 0, replica 0) was killed by SIGKILL" not in str(exc):
                return f"the job failed otherwise: {exc}"
        finally:
            ckpt.write_manifest = complete
        found = ckpt.find(root)
        if found.step != k:
            return f"the last complete checkpoint is step {found.step}, not {k}"
        resumed = launch(module, dataclasses.replace(cfg, resume=str(found.path), first_step=k), c["P"], c["D"],
                         deadline_s=DEADLINE_S)
    if resumed[0].losses != whole[0].losses[k:]:
        return f"losses differ: {resumed[0].losses} vs {whole[0].losses[k:]}"
    for a, b in zip(resumed, whole):
        if a.shards.keys() != b.shards.keys() or not all(torch.equal(a.shards[u], b.shards[u]) for u in a.shards):
            return f"rank {a.rank}'s final parameters differ"
    return "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=20, help="cases (default 20)")
    ap.add_argument("--seed", type=int, default=0, help="case i uses seed + i")
    ap.add_argument("--steps", type=int, default=4, help="steps of each run (default 4)")
    ap.add_argument("--every-layout", action="store_true",
                    help="one case per ZeRO stage, P and D (16; --cases is ignored)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    layouts = LAYOUTS if args.every_layout else [None] * args.cases
    args.cases = len(layouts)
    bad, start = 0, time.perf_counter()
    for i, layout in enumerate(layouts):
        c = case(random.Random(args.seed + i), args.steps, layout)
        outcome = run_case(c, args.steps)
        bad += outcome != "ok"
        print(f"seed {args.seed + i}: {c['preset']} P={c['P']} D={c['D']} Z={c['Z']} killed {c['moment']} "
              f"at step {c['kill_after']}: {outcome}", flush=True)
    print(f"{args.cases - bad} of {args.cases} cases resumed bit for bit ({time.perf_counter() - start:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

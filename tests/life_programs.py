"""Small training-step programs written as `life.plan` IR text and lowered by the lifecycle
passes for the system VM (no tests here).

A test states a plan in a few readable numbers (cycles and bytes per unit and
micro-batch); `plan_text` writes it as the IR the planner would emit, so the test's input is
text that `lowered` parses and runs through the compiler's own pipeline. Costs are given in
cycles of the MT-3000 profile's clock and written as seconds, which the VM turns back into
the same whole cycles.
"""

from __future__ import annotations

import functools
import math
import subprocess
import sys
from dataclasses import dataclass

import pytest

from ratc.ir import parse_module
from ratc.lifecycle.compile import default_pipeline
from ratc.lifecycle.lowering import find_plan
from ratc.passes import PassContext, PassManager, parse_pipeline
from ratc.platform import load_platform
from ratc.vm.system.driver import run_module


@functools.lru_cache(maxsize=None)
def mt3000():
    """The platform whose clock turns the plans' cycles into seconds and back."""
    return load_platform("mt3000")


@dataclass(frozen=True)
class Unit:
    """One unit's costs per micro-batch: work in cycles as (compute, DDR) parts run one after
    the other (a Recover repeats the forward's), state-chain cycles, and bytes. ZeRO-2's
    per-micro-batch reduce-scatters and ZeRO-3's gathers take no time."""

    fwd: tuple = (0, 0)
    bwd: tuple = (0, 0)
    saved: int = 0       # what the forward keeps for the backward (a recovered layer: what Recover remakes)
    act_in: int = 0      # the unit's input activation: its checkpoint, and its input gradient
    param: int = 0
    opt: int = 0
    grad: int = 0        # the full gradient (also the ZeRO >= 2 bucket)
    sync: int = 0        # GradSync, the whole collective
    update: int = 0
    prefetch: int = 0


FREE = Unit()


def _seconds(cycles: int) -> str:
    return repr(cycles / mt3000().dsp.clock)


def _phases(work: tuple) -> str:
    """A (compute, DDR) pair as the unit's phases: compute-bound, then DDR-bound."""
    c, d = work
    return f"[{_seconds(c)}, 0.0, 0.0, {_seconds(d)}]"


def _unit_text(index: int, stage: int, decoder: bool, u: Unit, D: int, Z: int) -> str:
    shard = u.grad if Z == 0 else math.ceil(u.grad / D)
    attrs = {
        "index": index, "name": f'"u{index}"', "stage": stage, "decoder": str(decoder).lower(),
        "fwd": _seconds(sum(u.fwd)), "fwd_compute": _seconds(u.fwd[0]), "fwd_ddr": _seconds(u.fwd[1]), "fwd_phases": _phases(u.fwd),
        "bwd": _seconds(sum(u.bwd)), "bwd_compute": _seconds(u.bwd[0]), "bwd_ddr": _seconds(u.bwd[1]), "bwd_phases": _phases(u.bwd),
        "input_bytes": f"{u.act_in}B", "saved": f"{u.saved}B", "workspace": "0B", "param": f"{u.param}B",
        "opt": f"{u.opt}B", "grad": f"{u.grad}B", "shard": f"{shard}B", "bucket": f"{u.grad if Z >= 2 else 0}B",
        "view": "0B", "sync": _seconds(u.sync), "sync_kind": '"all-reduce"' if Z == 0 else '"reduce-scatter"',
        "reduce": "0.0", "update": _seconds(u.update), "prefetch": _seconds(u.prefetch), "gather": "0.0"}
    return "    life.unit {" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}"


def plan_text(stages, M: int, D: int = 1, Z: int = 1, act: str = "full", pref: str = "deadline",
              p2p: int = 0, budget: int = 10**12, embedding: Unit = FREE, head: Unit = FREE) -> str:
    """A module holding one `life.plan`: `stages` lists each stage's decoder layers (Units);
    the embedding goes first on stage 0, the head last on the last stage."""
    P = len(stages)
    placed = [(0, False, embedding)] + [(p, True, u) for p, layers in enumerate(stages) for u in layers]
    placed.append((P - 1, False, head))
    units = [_unit_text(i, p, dec, u, D, Z) for i, (p, dec, u) in enumerate(placed)]
    return "\n".join([
        f"module @P{P}_D{D}_M{M} {{",
        f'  life.plan @plan {{P = {P}, D = {D}, T = 1, Z = {Z}, b = 1, A = {M}, act = "{act}", pref = "{pref}", '
        f'seq_len = 1, p2p = {_seconds(p2p)}, budget = {budget}B, model = "hand", platform = "mt3000"}} {{',
        *units, "  }", "}", ""])


def lowered(text: str, pipeline: str | None = None):
    """The module of `text` through `pipeline` (default: the plan's full lifecycle pipeline)."""
    module = parse_module(text, "plan.ir")
    pipeline = pipeline or default_pipeline(find_plan(module).attributes["pref"], budget="none")
    return PassManager(parse_pipeline(pipeline), ctx=PassContext(platform=mt3000())).run(module)


def simulated(text: str, steps: int = 2, symmetric: bool = True, memory_limit: bool = False):
    """(timeline, results) of the plan's program on the system VM; with `memory_limit` a stage
    over the plan's budget stops it."""
    return run_module(lowered(text), mt3000(), steps=steps, symmetric=symmetric, memory_limit=memory_limit)


def filecheck(output: str, checks: str, tmp_path) -> None:
    """Match `output` against FileCheck `checks` (CHECK: lines, as LLVM's and xDSL's tests);
    a mismatch fails the test with FileCheck's report."""
    check_file = tmp_path / "checks.txt"
    check_file.write_text(checks)
    run = subprocess.run([sys.executable, "-m", "filecheck", str(check_file)], input=output, text=True,
                         capture_output=True, timeout=60)
    if run.returncode != 0:
        pytest.fail(f"FileCheck failed:\n{run.stdout}{run.stderr}", pytrace=False)

"""Run the GEMM kernels one scheduled task is charged for, with real numerics, against numpy."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ratc.errors import RatcError

# Full execution simulates every bundle of every DSP (~1e5 bundles/s); beyond this many
# MACs a spot check would take minutes, so it asks for a smaller model or timing mode.
MAX_FULL_EXECUTION_MACS = 2**28

_TASK = re.compile(r"(\d+)\s*:\s*(\d+)?([FBR])(\d+)")
_TASK_OPS = {"F": "life.fwd", "B": "life.bwd", "R": "life.recover"}


@dataclass(frozen=True)
class KernelCheck:
    """One kernel run of a spot check: its shape, cycles and the largest deviation from numpy."""

    kernel: str
    shape: tuple[int, int, int]
    cycles: int
    max_abs_error: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.max_abs_error <= self.tolerance


def task_units(pipe, spec: str) -> tuple[int, list[int]]:
    """(stage, unit indices) of a task named 'STAGE:TASK', e.g. '0:F3' or '1:1B0'."""
    m = _TASK.fullmatch(spec.strip())
    if not m:
        raise RatcError(f"--kernel {spec!r}: expected STAGE:TASK such as 0:F3, 1:B0 or 0:R2 "
                        "(forward, backward or recover of a micro-batch)")
    stage, again, kind, mb = int(m.group(1)), m.group(2), m.group(3), int(m.group(4))
    if again is not None and int(again) != stage:
        raise RatcError(f"--kernel {spec!r}: the task names stage {again}, not {stage}")
    stages = {s.attributes["stage"]: s for s in pipe.region.ops}
    if stage not in stages:
        raise RatcError(f"--kernel {spec!r}: the program has stages 0..{len(stages) - 1}")
    units = [op.attributes["unit"] for op in stages[stage].region.ops
             if op.name == _TASK_OPS[kind] and op.attributes["mb"] == mb]
    if not units:
        raise RatcError(f"--kernel {spec!r}: stage {stage} runs no task {stage}{kind}{mb} "
                        "(see schedule.txt for its tasks)")
    return stage, sorted(set(units))


def check_kernel(program, platform, shape: tuple[int, int, int], seed: int) -> KernelCheck:
    """Execute an assembled GEMM kernel on random FP16 inputs and compare C with numpy."""
    from ratc.vm.kernel_vm import run_program

    m, n, k = shape
    if m * n * k > MAX_FULL_EXECUTION_MACS:
        raise RatcError(f"kernel {program.name} ({m}x{n}x{k}) is too large for full execution "
                        f"(> {MAX_FULL_EXECUTION_MACS:,} MACs); spot-check a smaller model, or time it "
                        f"with `ratc kernel gemm {m} {n} {k} --run`")
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    result = run_program(program, platform, {"A": a, "B": b}, "full")
    c = result.ddr["C"].reshape(m, n).astype(np.float32)
    want = a.astype(np.float32) @ b.astype(np.float32)
    # FP32 accumulation of exact FP16 products, then one FP16 rounding of the result.
    tolerance = float(np.max(np.abs(want)) * 2.0**-10 + 1e-3 * np.sqrt(k))
    return KernelCheck(program.name, shape, result.cycles, float(np.max(np.abs(c - want))), tolerance)

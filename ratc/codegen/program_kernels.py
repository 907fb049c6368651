"""The GEMM kernels a compiled program runs: one kernel per distinct shape, with call counts.

The planner's cost model times every matmul of a layer as its per-sequence forward GEMM
(m = sequence length) at the kernel's measured rate, a micro-batch of b sequences as b
such calls, and the backward (input- and weight-gradient) as two more at the same rate,
recomputation under checkpointing/FSR as one more. These counts are what the tasks of
the scheduled program are charged for, so they are the counts reported here.
"""

from __future__ import annotations

from collections import defaultdict

from ratc.codegen.gemm import generate_gemm

# Kernel calls per sequence and matmul: forward, recompute (ckpt/FSR), backward (dX and dW).
_RECOMPUTE = {"fsr": 1, "ckpt": 1, "full": 0}


def program_gemms(profile, plan_attrs: dict, unit_stages: list[int]) -> dict:
    """(m, n, k) -> {stage: calls per step} for every matmul of the program."""
    units = [profile.pre, *profile.decoder_layers(), profile.post]
    per_sequence = 1 + _RECOMPUTE[plan_attrs["act"]] + 2
    sequences = plan_attrs["b"] * plan_attrs["M"]
    calls: dict = defaultdict(lambda: defaultdict(int))
    for layer, stage in zip(units, unit_stages):
        for op in layer.ops:
            if op.gemm is not None:
                calls[tuple(op.gemm)][stage] += per_sequence * sequences
    return {shape: dict(sorted(stages.items())) for shape, stages in sorted(calls.items())}


def emit_program_kernels(platform, profile, plan_attrs: dict, unit_stages: list[int]) -> tuple[dict, dict]:
    """(files, table): each kernel's .rasm under kernels/, and the table for kernels.json."""
    files, entries = {}, []
    for (m, n, k), stages in program_gemms(profile, plan_attrs, unit_stages).items():
        kernel = generate_gemm(platform, m, n, k)
        stats = kernel.stats()
        files[f"kernels/{kernel.name}.rasm"] = kernel.text
        entries.append({"kernel": kernel.name, "m": m, "n": n, "k": k, "cycles": stats.cycles,
                        "seconds": stats.seconds, "mac_utilization": stats.mac_utilization,
                        "ddr_bytes": stats.ddr_bytes, "tiles": dict(kernel.options),
                        "calls_per_step": {str(s): c for s, c in stages.items()}})
    table = {"platform": platform.name, "clock_hz": platform.dsp.clock,
             "peak_mac_rate": platform.cluster.peak_mac_rate, "gemm": entries, "attention_backward": []}
    return files, table


def kernel_shares(table: dict, step_seconds: float) -> list[tuple[str, int, float, int, float]]:
    """(kernel, cycles, MAC utilization, calls on its busiest stage, share of the step) rows."""
    rows = []
    for e in table["gemm"]:
        calls = max(e["calls_per_step"].values())
        rows.append((e["kernel"], e["cycles"], e["mac_utilization"], calls, calls * e["seconds"] / step_seconds))
    return rows

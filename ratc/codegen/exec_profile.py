"""Execution profile: kernel times per shape from the kernel VM's timing mode, for the planner."""

from __future__ import annotations

import json

from ratc.cli.io import write_atomic
from ratc.codegen.tiling import platform_key

_CACHE: dict[tuple, dict] = {}


def gemm_profile(platform, m: int, n: int, k: int, **options) -> dict:
    """Cycles, seconds, MAC utilization and DDR figures of the generated GEMM (cached)."""
    key = (platform_key(platform), "gemm", m, n, k, tuple(sorted(options.items())))
    if key not in _CACHE:
        from ratc.codegen.gemm import generate_gemm

        _CACHE[key] = _entry(generate_gemm(platform, m, n, k, **options), {"m": m, "n": n, "k": k})
    return _CACHE[key]


def gemm_time(platform, m: int, n: int, k: int, **options) -> float:
    """Seconds for C[m,n] = A[m,k] B[k,n] on one cluster (FP16 in, FP32 accumulate)."""
    return gemm_profile(platform, m, n, k, **options)["seconds"]


def attention_backward_profile(platform, heads: int, seq: int, head_dim: int, kv_heads: int,
                               **options) -> dict:
    """Figures of the memory-resident attention-backward kernel (cached)."""
    key = (platform_key(platform), "attn_bwd", heads, seq, head_dim, kv_heads, tuple(sorted(options.items())))
    if key not in _CACHE:
        from ratc.codegen.attention import generate_attention_backward

        kernel = generate_attention_backward(platform, heads, seq, head_dim, kv_heads, **options)
        _CACHE[key] = _entry(kernel, {"heads": heads, "seq": seq, "head_dim": head_dim, "kv_heads": kv_heads})
    return _CACHE[key]


def attention_backward_time(platform, heads: int, seq: int, head_dim: int, kv_heads: int) -> float:
    """Seconds for dQ, dK, dV of one sequence's attention on one cluster."""
    return attention_backward_profile(platform, heads, seq, head_dim, kv_heads)["seconds"]


def _entry(kernel, shape: dict) -> dict:
    s = kernel.stats()
    return dict(shape, kernel=kernel.name, cycles=s.cycles, seconds=s.seconds, mac_utilization=s.mac_utilization,
                ddr_bytes=s.ddr_bytes, ddr_bound_seconds=s.ddr_bound_s, compute_bound_seconds=s.compute_bound_s,
                tiles=dict(kernel.options))


def write_execution_profile(platform, shapes, path, attention=()) -> dict:
    """Write a JSON table (GEMM shape -> cycles, seconds, MAC utilization) the planner can read.

    `shapes` are (m, n, k) triples; `attention` optional (heads, seq, head_dim, kv_heads) tuples.
    """
    table = {
        "platform": platform.name,
        "clock_hz": platform.dsp.clock,
        "peak_mac_rate": platform.cluster.peak_mac_rate,
        "gemm": [gemm_profile(platform, *map(int, s)) for s in sorted(set(map(tuple, shapes)))],
        "attention_backward": [attention_backward_profile(platform, *map(int, a))
                               for a in sorted(set(map(tuple, attention)))],
    }
    write_atomic(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
    return table


def read_execution_profile(path) -> dict[tuple[int, int, int], float]:
    """GEMM (m, n, k) -> seconds from a file written by write_execution_profile."""
    with open(path) as fh:
        table = json.load(fh)
    return {(e["m"], e["n"], e["k"]): e["seconds"] for e in table["gemm"]}

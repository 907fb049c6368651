"""Execution profile: kernel times per shape from the kernel VM's timing mode, for the planner."""

from __future__ import annotations

import json

from ratc.codegen import kernel_cache
from ratc.codegen.tiling import platform_key
from ratc.errors import RatcError
from ratc.io import write_atomic

_CACHE: dict[tuple, dict] = {}


def kernel_profile(platform, kind: str, shape: tuple, **options) -> dict:
    """Cycles, seconds, MAC utilization and DDR figures of a generated kernel.

    kind is 'gemm' (shape m, n, k), 'attn_bwd', 'flash_bwd' or 'flash_fwd' (heads, seq,
    head_dim, kv_heads).
    Cached in memory and on disk (ratc.codegen.kernel_cache).
    """
    shape = tuple(int(x) for x in shape)
    key = (platform_key(platform), kind, shape, tuple(sorted(options.items())))
    entry = _CACHE.get(key)
    if entry is None:
        disk_key = [list(key[0]), kind, list(shape), sorted([k, v] for k, v in options.items())]
        entry = kernel_cache.load(disk_key)
        if entry is None:
            entry = _entry(generate_kernel(platform, kind, shape, **options), kind, shape)
            kernel_cache.store(disk_key, entry)
        _CACHE[key] = entry
    return entry


def kernel_text(platform, kind: str, shape: tuple, **options) -> str:
    """The .rasm text of a generated kernel (cached on disk like its timing)."""
    key = ["text", list(platform_key(platform)), kind, [int(x) for x in shape], sorted([k, v] for k, v in options.items())]
    text = kernel_cache.load_text(key)
    if text is None:
        text = generate_kernel(platform, kind, shape, **options).text
        kernel_cache.store_text(key, text)
    return text


def generate_kernel(platform, kind: str, shape: tuple, **options):
    """The generated Kernel of one (kind, shape) with tile options."""
    if kind == "gemm":
        from ratc.codegen.gemm import generate_gemm
        return generate_gemm(platform, *shape, **options)
    if kind == "attn_bwd":
        from ratc.codegen.attention import generate_attention_backward
        return generate_attention_backward(platform, *shape, **options)
    if kind == "flash_bwd":
        from ratc.codegen.flash import generate_flash_backward
        return generate_flash_backward(platform, *shape, **options)
    if kind == "flash_fwd":
        from ratc.codegen.flash_fwd import generate_flash_forward
        return generate_flash_forward(platform, *shape, **options)
    raise RatcError(f"unknown kernel kind {kind!r} (known: gemm, attn_bwd, flash_bwd, flash_fwd)")


def gemm_profile(platform, m: int, n: int, k: int, **options) -> dict:
    """Figures of the generated GEMM C[m,n] = A[m,k] B[k,n] (cached)."""
    return kernel_profile(platform, "gemm", (m, n, k), **options)


def gemm_time(platform, m: int, n: int, k: int, **options) -> float:
    """Seconds for C[m,n] = A[m,k] B[k,n] on one cluster (FP16 in, FP32 accumulate)."""
    return gemm_profile(platform, m, n, k, **options)["seconds"]


def attention_backward_profile(platform, heads: int, seq: int, head_dim: int, kv_heads: int,
                               **options) -> dict:
    """Figures of the memory-resident attention-backward kernel (cached)."""
    return kernel_profile(platform, "attn_bwd", (heads, seq, head_dim, kv_heads), **options)


def attention_backward_time(platform, heads: int, seq: int, head_dim: int, kv_heads: int) -> float:
    """Seconds for dQ, dK, dV of one sequence's attention on one cluster."""
    return attention_backward_profile(platform, heads, seq, head_dim, kv_heads)["seconds"]


_SHAPE_KEYS = {"gemm": ("m", "n", "k"), "attn_bwd": ("heads", "seq", "head_dim", "kv_heads"),
               "flash_bwd": ("heads", "seq", "head_dim", "kv_heads"),
               "flash_fwd": ("heads", "seq", "head_dim", "kv_heads")}


def _entry(kernel, kind: str, shape: tuple) -> dict:
    s = kernel.stats()
    return dict(zip(_SHAPE_KEYS[kind], shape), kernel=kernel.name, cycles=s.cycles, seconds=s.seconds,
                mac_utilization=s.mac_utilization, ddr_bytes=s.ddr_bytes, ddr_bound_seconds=s.ddr_bound_s,
                compute_bound_seconds=s.compute_bound_s, tiles=dict(kernel.options))


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

"""Run the kernels one scheduled task calls, with real numerics, against numpy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratc.errors import RatcError

# Full execution simulates every bundle of every DSP (~1e5 bundles/s); beyond this many
# MACs a spot check would take minutes, so it asks for a smaller model or timing mode.
MAX_FULL_EXECUTION_MACS = 2**28



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


def check_kernel(program, platform, shape: tuple, seed: int, kind: str = "gemm") -> KernelCheck:
    """Execute an assembled kernel (gemm, attn_bwd, flash_bwd or flash_fwd) on random inputs and compare with numpy."""
    if kind == "flash_fwd":
        return check_flash_forward(program, platform, shape, seed)
    if kind in ("attn_bwd", "flash_bwd"):
        return check_attention(program, platform, shape, seed, fused=kind == "flash_bwd")
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


def check_attention(program, platform, shape: tuple, seed: int, fused: bool = False) -> KernelCheck:
    """Execute an attention-backward kernel on random inputs; dQ, dK, dV against numpy.

    The oracle is the textbook softmax backward in float64: P = softmax(scale Q K^T),
    dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = scale dS K,
    dK = scale dS^T Q, with each K/V head shared by heads / kv_heads query heads. The fused
    kernel (ratc.codegen.flash) reads each row's max m of scale Q K^T and r = 1 / sum exp(. - m) instead of P.
    """
    from ratc.vm.kernel_vm import run_program

    heads, seq, d, kv = shape
    if 4 * heads * seq * seq * d > MAX_FULL_EXECUTION_MACS:
        raise RatcError(f"kernel {program.name} ({heads} heads, sequence {seq}, head_dim {d}) is too large "
                        f"for full execution (> {MAX_FULL_EXECUTION_MACS:,} MACs); spot-check a smaller model")
    rng = np.random.default_rng(seed)
    q, do = (rng.standard_normal((heads, seq, d)).astype(np.float16) for _ in range(2))
    k, v = (rng.standard_normal((kv, seq, d)).astype(np.float16) for _ in range(2))
    rep, scale = heads // kv, 1 / np.sqrt(d)
    K, V = (np.repeat(x.astype(np.float64), rep, axis=0) for x in (k, v))
    Q, dO = q.astype(np.float64), do.astype(np.float64)
    s = scale * Q @ K.transpose(0, 2, 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    p16 = p.astype(np.float16)          # the kernel reads the forward's FP16 probabilities
    P = p16.astype(np.float64)
    out = P @ V
    D = (dO * out).sum(-1)
    dS = P * (dO @ V.transpose(0, 2, 1) - D[..., None])
    want = {"dQ": scale * dS @ K,
            "dK": (scale * dS.transpose(0, 2, 1) @ Q).reshape(kv, rep, seq, d).sum(1),
            "dV": (P.transpose(0, 2, 1) @ dO).reshape(kv, rep, seq, d).sum(1)}
    inputs = {"Q": q.reshape(-1, d), "dO": do.reshape(-1, d), "K": k.reshape(-1, d), "V": v.reshape(-1, d),
              "P": p16.reshape(heads * seq, seq), "D": D.reshape(-1, 1), "Sc": np.array([[scale]])}
    if fused:
        from ratc.codegen.flash import flash_constants
        top = s.max(-1, keepdims=True)
        r = 1 / np.exp(s - top).sum(-1, keepdims=True)
        del inputs["P"]
        inputs.update(MR=np.concatenate([top, r], -1).reshape(-1, 2), Ex=np.array(flash_constants()))
    result = run_program(program, platform, inputs, "full")
    error = tolerance = 0.0
    for name, ref in want.items():
        got = result.ddr[name].astype(np.float64).reshape(ref.shape)
        error = max(error, float(np.max(np.abs(got - ref))))
        # FP16 P, dS and outputs: a few FP16 ulps of each gradient's scale.
        tolerance = max(tolerance, float(4e-3 * np.abs(ref).max()))
    return KernelCheck(program.name, tuple(shape), result.cycles, error, tolerance)


def check_flash_forward(program, platform, shape: tuple, seed: int) -> KernelCheck:
    """Execute a fused attention-forward kernel on random Q, K, V; O against numpy's
    softmax(scale Q K^T) V in float64 (each K/V head shared by heads / kv_heads query heads)."""
    from ratc.codegen.flash_fwd import flash_forward_constants
    from ratc.vm.kernel_vm import run_program

    heads, seq, d, kv = shape
    if 2 * heads * seq * seq * d > MAX_FULL_EXECUTION_MACS:
        raise RatcError(f"kernel {program.name} ({heads} heads, sequence {seq}, head_dim {d}) is too large "
                        f"for full execution (> {MAX_FULL_EXECUTION_MACS:,} MACs); spot-check a smaller model")
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((heads, seq, d)).astype(np.float16)
    k, v = (rng.standard_normal((kv, seq, d)).astype(np.float16) for _ in range(2))
    scale = 1 / np.sqrt(d)
    K, V = (np.repeat(x.astype(np.float64), heads // kv, axis=0) for x in (k, v))
    s = scale * q.astype(np.float64) @ K.transpose(0, 2, 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ V
    inputs = {"Q": q.reshape(-1, d), "K": k.reshape(-1, d), "V": v.reshape(-1, d), "Sc": np.array([[scale]]),
              "Ex": np.array(flash_forward_constants(seq))}
    result = run_program(program, platform, inputs, "full")
    got = result.ddr["O"].astype(np.float64).reshape(want.shape)
    # FP16 probabilities and output: a few FP16 ulps of the output's scale
    return KernelCheck(program.name, tuple(shape), result.cycles, float(np.max(np.abs(got - want))),
                       float(4e-3 * np.abs(want).max()))

"""Which generated kernels a traced op runs, per sequence, in forward and in backward.

A matmul C[m,n] = A[m,k] B[k,n] runs its forward GEMM, the input gradient
dA = dC B^T (an m x k x n GEMM) and the weight gradient dB = A^T dC (k x n x m).
Attention runs unfused in forward, as the paper's backend implies (its attention
backward, Alg. 1 line 5, reloads the probabilities P from DDR): per head S = Q K^T
(seq x seq x head_dim) and O = P V (seq x head_dim x seq) as GEMM kernels, with the
softmax streaming S in and P out through DDR between them. Backward is the
memory-resident attention-backward kernel, after a stream computing D = rowsum(dO * O).
Under fused attention (a plan's attn=fused) the forward is the fused kernel of
ratc.codegen.flash_fwd (online softmax: no per-head GEMMs, no softmax stream; it writes O and
each row's max m and r = 1/sum), and the backward the fused kernel of ratc.codegen.flash,
which recomputes P from Q, K, m and r on chip instead of reloading it.
Every other op (norms, RoPE, element-wise, embedding, loss) runs at its roofline:
max(vector compute at peak, its bytes at DDR bandwidth).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

GEMM, ATTN_BWD, FLASH_BWD, FLASH_FWD = "gemm", "attn_bwd", "flash_bwd", "flash_fwd"
TILE_ROWS = 32  # attention micro-tile rows: tiles stay multiples of 32 whatever the VMAC height


def attention_tile_rows(vliw) -> int:
    """Rows of the attention kernel's micro-tile: VMAC rows times row groups."""
    return vliw.vmac_rows * max(1, TILE_ROWS // vliw.vmac_rows)


def attention_alignment(vliw) -> int:
    """What the attention-backward kernel needs head_dim and seq to be multiples of."""
    return math.lcm(vliw.vector_lanes, attention_tile_rows(vliw))


@dataclass(frozen=True)
class OpKernels:
    """One op's kernel calls per sequence: ((kind, shape), calls) pairs and streamed DDR bytes."""

    fwd: tuple
    bwd: tuple
    fwd_stream_bytes: float = 0.0
    bwd_stream_bytes: float = 0.0
    wgrad: tuple = ()       # of bwd, the weight-gradient GEMMs (a zero-bubble W task's)


def op_kernels(op, div: int, dtype_bytes: int, align: int = 1, attn: str = "paper") -> OpKernels | None:
    """The kernels of one op on a tensor-parallel rank that does 1/div of its work; None if none.

    The attention-backward kernel runs on head_dim and seq zero-padded to multiples of
    `align` (attention_alignment): zero rows and columns of Q, K, V, dO and P add nothing
    to dQ, dK, dV, so padding changes the cycles, not the result (fused: padded keys get
    P > 0 but zero K and V rows, so they add nothing to dQ either). The fused forward runs on
    the same padded shape: its cycles are what is used (padded keys would add exp(-m) to a
    row's sum, so an executed forward is run unpadded).
    """
    if op.gemm is not None:
        m, n, k = op.gemm
        n = max(1, n // div)
        bwd = []
        if op.bwd_input_flops:
            bwd.append(((GEMM, (m, k, n)), 1))
        wgrad = (((GEMM, (k, n, m)), 1),) if op.bwd_weight_flops else ()
        return OpKernels(fwd=(((GEMM, (m, n, k)), 1),), bwd=tuple(bwd) + wgrad, wgrad=wgrad)
    if op.kind == "attention" and op.attention is not None:
        heads, kv_heads, seq, head_dim = op.attention
        heads, kv_heads = max(1, heads // div), max(1, kv_heads // div)
        padded = (heads, _pad(seq, align), _pad(head_dim, align), kv_heads)
        if attn == "fused":
            fwd, stream = (((FLASH_FWD, padded), 1),), 0.0
        else:
            fwd = (((GEMM, (seq, seq, head_dim)), heads), ((GEMM, (seq, head_dim, seq)), heads))
            stream = 2.0 * heads * seq * seq * dtype_bytes
        if not op.bwd_input_flops:        # no input needs a gradient (behind frozen layers)
            return OpKernels(fwd=fwd, bwd=(), fwd_stream_bytes=stream)
        return OpKernels(
            fwd=fwd, bwd=((((FLASH_BWD if attn == "fused" else ATTN_BWD), padded), 1),),
            fwd_stream_bytes=stream,
            bwd_stream_bytes=2 * heads * seq * head_dim * dtype_bytes)
    return None


def _pad(x: int, align: int) -> int:
    return -(-x // align) * align


def merge(calls) -> tuple:
    """Sum ((kind, shape), calls) pairs by kernel, sorted: a unit's kernel list."""
    total: Counter = Counter()
    for key, n in calls:
        total[key] += n
    return tuple(sorted(total.items()))


def without(calls, part) -> tuple:
    """merge(calls) less the calls in `part` (a subset of them), e.g. a Backward's kernels
    but its weight-gradient ones."""
    total: Counter = Counter(dict(merge(calls)))
    total.subtract(dict(merge(part)))
    return tuple(sorted((k, n) for k, n in total.items() if n))


def kernel_symbol(kind: str, shape: tuple) -> str:
    """The kernel's symbol in a program (the name its generator gives it)."""
    from ratc.codegen.attention import attention_name
    from ratc.codegen.flash import flash_name
    from ratc.codegen.flash_fwd import flash_forward_name
    from ratc.codegen.gemm import gemm_name

    if kind == GEMM:
        return gemm_name(*shape)
    heads, seq, head_dim, kv_heads = shape
    name = {FLASH_BWD: flash_name, FLASH_FWD: flash_forward_name}.get(kind, attention_name)
    return name(heads, seq, head_dim, kv_heads)

"""The host execution profile: a step's operators priced from a host profile's measured tables.

A host (kind = "host", written by `ratc calibrate`) runs every traced op as torch operators
in fp32 on one thread per rank: GEMMs at the rate of the nearest measured shape of their
operand layout, every other op as memory-bound work from [[memory]], each operator paying
the fixed dispatch cost and each unit's Forward/Backward pair the fixed task cost. One
thread does all of it, so a host op has no separate DDR phase: its whole time is compute
(a Recover co-run with a Backward on a CPU rank runs whole, one after the other).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from ratc.planner.exec_profile import ExecutionProfile
from ratc.step.config import TrainingRecipe

FP32 = 4
# The functional executor trains in fp32 with torch's single-tensor AdamW (foreach=False,
# ratc.vm.functional.shards): a view and an fp32 master copy of each parameter (4 + 4 B), an
# fp32 gradient (4 B) and two moments (8 B). Its step reads and writes per element: the weight
# decay (param 8 B), exp_avg.lerp_ (grad 4, exp_avg 8), exp_avg_sq.mul_ and addcmul_ (8, 12),
# sqrt, divide and add_ of the denominator (8 each), param.addcdiv_ (16): 80 B, memory-bound
# (ratc.planner.state_chain prices it at the memory bandwidth).
HOST_RECIPE = TrainingRecipe(param_bytes=FP32, grad_bytes=FP32, optimizer_bytes=3 * FP32,
                             update_traffic_bytes=80)
# Top-level torch operators a traced op of each kind runs (forward, backward), as the profiler
# counts them in examples/llama.py's decoder layer (50 forward, 124 backward for its 24 ops): a
# linear layer is linear forward and transposes, matrix products and reshapes backward; an
# RMSNorm is float, pow, mean, add, rsqrt, mul, mul, type_as. [compute].dispatch is one node of
# a traced chain of multiplications forward and backward: one operator forward, three backward.
OPERATORS = {"matmul": (2, 8), "norm": (8, 14), "rope": (1, 2), "attention": (3, 6)}
DEFAULT_OPERATORS = (1, 3)
PER_NODE = 4
# The [[memory]] operator a traced op's kind streams like: a reduction over rows like softmax,
# a copy for data movement, an add for the other elementwise arithmetic.
MEMORY_OP = {"softmax": "softmax", "loss": "softmax", "embedding": "copy", "other": "copy"}
# The GEMM layouts of a linear layer: forward x @ w.T, input gradient dy @ w, weight gradient dy.T @ x.
FORWARD, INPUT_GRAD, WEIGHT_GRAD = "nt", "nn", "tn"


@dataclass(frozen=True)
class HostExecProfile(ExecutionProfile):
    """Operator times of a host profile's measured tables for a program of `ranks` processes."""

    platform: object
    ranks: int = 1             # processes running at once (P x D x T): [sharing] between them
    recipe = HOST_RECIPE
    cost_source = "this host's measured tables (ratc calibrate)"
    element_bytes = FP32
    prices_ops = True

    def for_ranks(self, ranks: int) -> "HostExecProfile":
        return self if ranks == self.ranks else dataclasses.replace(self, ranks=ranks)

    @functools.cached_property
    def _sharing(self) -> tuple:
        """(GEMM, memory-bound) slow-down of a rank of a program of `ranks`: the measured
        [sharing] figure at the calibration's ranks, linear in the number of other busy ranks
        (1 alone), and at least [sharing].load, what the machine's other processes take from a
        long task (the [sharing] figures were measured under that load, so it is in them)."""
        share, measured = self.platform.sharing, self.platform.host.ranks
        load = share.load.median
        if self.ranks <= 1 or measured <= 1:
            return load, load
        frac = (self.ranks - 1) / (measured - 1)
        return (max(load, 1 + (share.matmul.median - 1) * frac),
                max(load, 1 + (share.memory.median - 1) * frac))

    @functools.cached_property
    def _rows(self) -> dict:
        """layout -> ((m, n, k), rate) rows in the profile's order."""
        out: dict = {}
        for r in self.platform.matmul:
            out.setdefault(r.layout, []).append(((r.m, r.n, r.k), r.rate.median))
        return out

    def matmul_rate(self, m: int, n: int, k: int, layout: str = FORWARD) -> float:
        """MAC/s of the measured GEMM nearest (m, n, k) in log space, of this layout if measured."""
        rows = self._rows.get(layout) or [row for rs in self._rows.values() for row in rs]
        return _nearest(tuple(rows), (m, n, k))

    def gemm_time(self, m: int, n: int, k: int, layout: str = FORWARD) -> float:
        """Seconds of an (m, n, k) GEMM on one rank, with the other ranks' sharing slow-down."""
        return m * n * k / self.matmul_rate(m, n, k, layout) * self._sharing[0]

    def gemm_efficiency(self, m: int, n: int, k: int) -> float:
        return self.matmul_rate(m, n, k) / self.platform.compute.matmul_peak.median

    def memory_time(self, op: str, nbytes: float) -> float:
        """Seconds of a memory-bound operator moving nbytes: interpolated in bytes between its
        [[memory]] rows (the add's where the op was not measured), at the nearest row's rate
        outside them."""
        rows = sorted((r.bytes, r.seconds.median) for r in self.platform.memory if r.op == op) or \
            sorted((r.bytes, r.seconds.median) for r in self.platform.memory if r.op == "add")
        if nbytes <= 0:
            return 0.0
        (b0, t0), (b1, t1) = rows[0], rows[-1]
        if nbytes <= b0 or b0 == b1:
            t = nbytes * t0 / b0
        elif nbytes >= b1:
            t = nbytes * t1 / b1
        else:
            t = t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)
        return t * self._sharing[1]

    @property
    def dispatch(self) -> float:
        return self.platform.compute.dispatch.median

    def unit_overhead(self) -> tuple:
        """(forward, backward) seconds a unit's tasks pay beyond their operators: the measured
        Forward/Backward pair of a one-op graph, less its operator's dispatch, split evenly."""
        task = max(0.0, self.platform.compute.task.median - self.dispatch)
        return task / 2, task / 2

    def op_times(self, op, div: int, dtype_bytes: int) -> tuple:
        """(fwd compute, fwd DDR, bwd compute, bwd DDR) seconds of one traced op for one sequence
        (its DDR parts are 0: one thread runs all of it)."""
        scale = FP32 / dtype_bytes              # the trace's bytes are in its dtype; the host runs fp32
        n_fwd, n_bwd = OPERATORS.get(op.kind, DEFAULT_OPERATORS)
        call_f, call_b = n_fwd * self.dispatch / PER_NODE, n_bwd * self.dispatch / PER_NODE
        fwd_macs = op.fwd_flops / 2 / div
        if op.gemm is not None:
            m, n, k = op.gemm
            n = max(1, n // div)
            fwd = self.gemm_time(m, n, k, FORWARD)
            bwd = (self.gemm_time(m, k, n, INPUT_GRAD) * (op.bwd_input_flops > 0)
                   + self.gemm_time(n, k, m, WEIGHT_GRAD) * (op.bwd_weight_flops > 0))
            return fwd + call_f, 0.0, (bwd + call_b) if op.grad else 0.0, 0.0
        moved = (op.bytes_read + op.bytes_written) * scale / div
        kind = MEMORY_OP.get(op.kind, "silu" if "silu" in op.name else "add")
        fwd, bwd = self.memory_time(kind, moved), self.memory_time(kind, 2 * moved)
        if op.kind == "attention" and op.attention is not None:
            heads, _, seq, head_dim = op.attention
            bwd_macs = (op.bwd_input_flops + op.bwd_weight_flops) / 2 / div
            fwd += fwd_macs / self.matmul_rate(seq, seq, head_dim, FORWARD) * self._sharing[0]
            bwd += bwd_macs / self.matmul_rate(seq, head_dim, seq, INPUT_GRAD) * self._sharing[0]
            # the scores and their softmax, heads x seq x seq, are written and read again
            scores = heads // div * seq * seq * FP32
            fwd += self.memory_time("softmax", 2 * scores)
            bwd += self.memory_time("softmax", 4 * scores)
        return fwd + call_f, 0.0, (bwd + call_b) if op.grad else 0.0, 0.0


@functools.lru_cache(maxsize=65536)
def _nearest(rows: tuple, shape: tuple) -> float:
    """The rate of the row whose shape is nearest `shape` in log space (the first on a tie)."""
    def distance(row):
        return sum(math.log(a / b) ** 2 for a, b in zip(row[0], shape))
    return min(rows, key=distance)[1]

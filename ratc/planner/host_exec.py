"""The host execution profile: a step's operators priced from a host profile's measured tables.

A host (kind = "host", written by `ratc calibrate`) runs every traced op as torch operators
in fp32 on one thread per rank: GEMMs at the rate of the nearest measured shape of their
operand layout, every other op as memory-bound work from [[memory]]. Each task pays fixed
costs once for its whole micro-batch: the task's own, each operator's and each parameter
tensor's (a micro-batch of b sequences is one task, not b). One thread does all of it, so a
host op has no separate DDR phase: its whole time is compute (a Recover co-run with a
Backward on a CPU rank runs whole, one after the other).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from ratc.planner.exec_profile import ExecutionProfile
from ratc.platform.schema import ColdRow
from ratc.step.config import TrainingRecipe
from ratc.step.rules import streamed_seconds

FP32 = 4
# What the functional executor's fp32 AdamW step (torch's single-tensor AdamW, foreach=False,
# ratc.vm.functional.shards) reads and writes per element: the weight decay (param 8 B),
# exp_avg.lerp_ (grad 4, exp_avg 8), exp_avg_sq.mul_ and addcmul_ (8, 12), sqrt, divide and
# add_ of the denominator (8 each), param.addcdiv_ (16): 80 B. The update's [[memory]] rows
# count these bytes, and its time is interpolated in them as a memory-bound operator's.
UPDATE_TRAFFIC = 80
# What a unit's Backward moves per trained parameter element beyond its operators
# (ratc.vm.functional.units.flat_grad, FunctionalExecutor._weight_grad): torch.cat of the
# per-parameter gradients into the flat one (read 4 B, write 4 B), and its add_ into the
# micro-batches' sum (read 8 B, write 4 B).
GRADIENT_FLATTEN, GRADIENT_ACCUMULATE = 8, 12
# What a rank's step moves through the caches per parameter element between two runs of one
# unit's task (one micro-batch: its stages' Forwards and Backwards): the Forward reads the
# weight (4 B); the Backward reads it again (4), writes the per-parameter gradient (4), and
# flattens and accumulates it (GRADIENT_FLATTEN + GRADIENT_ACCUMULATE). Activations are left
# out: a micro-batch's are a small part of a step's bytes on the models a host trains.
STEP_TRAFFIC = 4 + 4 + 4 + GRADIENT_FLATTEN + GRADIENT_ACCUMULATE
# Top-level torch operators a traced op of each kind runs forward, as the profiler counts them
# in examples/llama.py's decoder layer (50 for its 24 ops): a linear layer 2 (with the view or
# transpose of its output), an RMSNorm 8 (float, pow, mean, add, rsqrt, mul, mul, type_as),
# attention 3, others 1. [compute].operator_forward / _backward price one such operator forward
# and in its autograd.
OPERATORS = {"matmul": 2, "norm": 8, "rope": 1, "attention": 3}
DEFAULT_OPERATORS = 1
# The [[memory]] operator a traced op's kind streams like: a reduction over rows like softmax,
# a copy for data movement, an add for the other elementwise arithmetic.
MEMORY_OP = {"softmax": "softmax", "loss": "softmax", "embedding": "copy", "other": "copy"}
# The GEMM layouts of a linear layer: forward x @ w.T, input gradient dy @ w, weight gradient dy.T @ x.
FORWARD, INPUT_GRAD, WEIGHT_GRAD = "nt", "nn", "tn"


def host_bytes(nbytes: float, dtype_bytes: int) -> float:
    """A trace's bytes (in the model's dtype) as the host moves them: it runs fp32."""
    return nbytes * FP32 / dtype_bytes


@dataclass(frozen=True)
class HostExecProfile(ExecutionProfile):
    """Operator times of a host profile's measured tables for a program of `ranks` processes
    running micro-batches of `batch` sequences."""

    platform: object
    ranks: int = 1             # processes running at once (P x D x T): [sharing] between them
    batch: int = 1             # sequences per micro-batch: a task of them pays its fixed costs once
    evicted: float = 0.0       # bytes the ranks' steps move through the shared cache between two runs of a task
    cost_source = "this host's measured tables (ratc calibrate)"
    element_bytes = FP32
    prices_ops = True

    def for_program(self, ranks: int, b: int, params: float = 0.0) -> "HostExecProfile":
        """This profile for a program of `ranks` processes running micro-batches of `b`
        sequences, each rank holding `params` parameter elements (its stages' share of the
        model: what its step moves through the caches between two runs of a unit's task).
        Every rank moves its share in that interval, and the ranks of one machine share its
        last-level cache: a task finds the eviction of all of theirs (two pipeline stages of
        half the model each, the whole model's; two replicas, twice it). Its own share alone
        would already empty the core's private cache at any size the [[cold]] rows cover."""
        evicted = STEP_TRAFFIC * params * ranks
        same = (ranks, b, evicted) == (self.ranks, self.batch, self.evicted)
        return self if same else dataclasses.replace(self, ranks=ranks, batch=b, evicted=evicted)

    def fixed(self, key: str) -> float:
        """A fixed cost of [compute] (task_forward, operator_backward, ...) at this profile's
        eviction: [compute]'s figure with nothing evicted and the [[cold]] rows' at theirs,
        interpolated in bytes up to the first row and in log-bytes between rows; past the last
        row, the last (nothing more to evict)."""
        return self._fixed[key]

    @functools.cached_property
    def _fixed(self) -> dict:
        out = {}
        for key in (f.name for f in dataclasses.fields(ColdRow) if f.name != "evicted"):
            rows = sorted((r.evicted, getattr(r, key).median) for r in self.platform.cold)
            out[key] = _fixed_at(((0, getattr(self.platform.compute, key).median), *rows), self.evicted)
        return out

    @functools.cached_property
    def recipe(self) -> TrainingRecipe:
        """The executor's fp32 training: a view and an fp32 master copy of each parameter (4 + 4 B),
        an fp32 gradient (4 B), two AdamW moments (8 B), and its measured update (the [[memory]]
        rows of `update`, slowed as this profile's memory-bound work is)."""
        rows = tuple((nbytes, t * self._sharing[1]) for nbytes, t in self._memory_rows("update"))
        return TrainingRecipe(param_bytes=FP32, grad_bytes=FP32, optimizer_bytes=3 * FP32,
                              update_traffic_bytes=UPDATE_TRAFFIC, update_rows=rows,
                              update_in_stream=self.platform.updates_in_compute_stream)

    @functools.cached_property
    def _sharing(self) -> tuple:
        """(GEMM, memory-bound, interpreter) slow-down of a rank of a program of `ranks`. A lone
        rank's is [sharing].load, what the machine's other processes take from a long task, and
        for its interpreter work [sharing].tasks, what they take from the synthetic units run in
        a step's order. Ranks sharing the cores take [sharing].busy from each other's interpreter work (a
        unit's time with every rank running it and gloo's threads busy, over its unpreempted
        time alone: the load is in it), and from a GEMM or a memory-bound operator the larger
        of that and [sharing].matmul or .memory (their contention for cache and memory
        bandwidth): the larger, not the product, as each was measured with the other ranks
        running. Each figure is linear in the number of other busy ranks over the
        calibration's, and at least the lone rank's (it was measured under the same load)."""
        share, measured = self.platform.sharing, self.platform.host.ranks
        load, tasks = share.load.median, share.tasks.median
        if self.ranks <= 1 or measured <= 1:
            return load, load, tasks
        frac = (self.ranks - 1) / (measured - 1)

        def scaled(fig) -> float:
            return 1 + (fig.median - 1) * frac
        busy = max(load, tasks, scaled(share.busy))
        return max(busy, scaled(share.matmul)), max(busy, scaled(share.memory)), busy

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

    def _memory_rows(self, op: str) -> list:
        """(bytes, seconds) of an operator's [[memory]] rows in increasing bytes (the add's where
        the op was not measured)."""
        return sorted((r.bytes, r.seconds.median) for r in self.platform.memory if r.op == op) or \
            sorted((r.bytes, r.seconds.median) for r in self.platform.memory if r.op == "add")

    def memory_time(self, op: str, nbytes: float) -> float:
        """Seconds of a memory-bound operator moving nbytes: interpolated in bytes between its
        [[memory]] rows (ratc.step.rules.streamed_seconds), with the sharing slow-down."""
        if nbytes <= 0:
            return 0.0
        return streamed_seconds(self._memory_rows(op), nbytes) * self._sharing[1]

    def unit_overhead(self, layer, saved: float = 0.0, dtype_bytes: int = FP32) -> tuple:
        """(forward, backward) seconds per sequence a unit's tasks pay beyond their operators: a
        one-operator unit's task less its operator, each parameter tensor's work (the
        backward's of those that train), and the executor's loop after the task, once per
        micro-batch of `batch` sequences; after a Backward the loop also releases what the
        Forward saved (`saved` bytes per sequence in the trace's dtype, fp32 here). All of it
        with the interpreter's slow-down by the ranks sharing the cores and the machine's load."""
        f, comp = self.fixed, self.platform.compute
        params = len(layer.params)
        trained = params - len(layer.frozen)
        fwd = (max(0.0, f("task_forward") - f("operator_forward")) + params * f("parameter_forward")
               + comp.loop_forward.median)
        bwd = (max(0.0, f("task_backward") - f("operator_backward")) + trained * f("parameter_backward")
               + comp.loop_backward.median)
        released = host_bytes(saved, dtype_bytes) / comp.release_bandwidth.median
        slow = self._sharing[2] / self.batch
        return fwd * slow, (bwd * slow + released * self._sharing[2]
                            + self.gradient_time(layer) / self.batch)

    def gradient_time(self, layer) -> float:
        """Seconds a unit's Backward spends on its weight gradient's bytes beyond its operators:
        autograd's dense gradient of an embedding weight, zero-filled before the rows are added
        (4 B an element of the table); the per-parameter gradients concatenated into the flat
        gradient (GRADIENT_FLATTEN B an element) and added into the micro-batches' sum
        (GRADIENT_ACCUMULATE B; the first micro-batch's is a copy, priced alike)."""
        frozen = set(layer.frozen)
        trained = {name: math.prod(shape) for name, shape, _ in layer.params if name not in frozen}
        tables = {w for op in layer.ops if op.kind == "embedding" for w in op.inputs}
        dense = sum(n for name, n in trained.items() if name in tables)
        elements = sum(trained.values())
        return (self.memory_time("copy", FP32 * dense + GRADIENT_FLATTEN * elements)
                + self.memory_time("add", GRADIENT_ACCUMULATE * elements))

    def op_times(self, op, div: int, dtype_bytes: int) -> tuple:
        """(fwd compute, fwd DDR, bwd compute, bwd DDR) seconds of one traced op per sequence of
        a micro-batch of `batch` (its DDR parts are 0: one thread runs all of it)."""
        b = self.batch
        calls = OPERATORS.get(op.kind, DEFAULT_OPERATORS) * self._sharing[2] / b
        call_f, call_b = calls * self.fixed("operator_forward"), calls * self.fixed("operator_backward")
        if op.gemm is not None:
            m, n, k = op.gemm       # m: the rows of one sequence; a micro-batch's GEMM has b times them
            m, n = m * b, max(1, n // div)
            fwd = self.gemm_time(m, n, k, FORWARD)
            bwd = (self.gemm_time(m, k, n, INPUT_GRAD) * (op.bwd_input_flops > 0)
                   + self.gemm_time(n, k, m, WEIGHT_GRAD) * (op.bwd_weight_flops > 0))
            return fwd / b + call_f, 0.0, (bwd / b + call_b) if op.grad else 0.0, 0.0
        fwd, bwd = self._streamed(op, div, dtype_bytes)
        return fwd + call_f, 0.0, (bwd + call_b) if op.grad else 0.0, 0.0

    def _streamed(self, op, div: int, dtype_bytes: int) -> tuple:
        """(forward, backward) seconds per sequence of a non-GEMM op: its bytes as memory-bound
        work over the whole micro-batch, and attention's products and scores."""
        b = self.batch
        moved = host_bytes(op.bytes_read + op.bytes_written, dtype_bytes) / div * b
        kind = MEMORY_OP.get(op.kind, "silu" if "silu" in op.name else "add")
        fwd, bwd = self.memory_time(kind, moved), self.memory_time(kind, 2 * moved)
        if op.kind == "attention" and op.attention is not None:
            heads, _, seq, head_dim = op.attention
            fwd_macs = op.fwd_flops / 2 / div * b
            bwd_macs = (op.bwd_input_flops + op.bwd_weight_flops) / 2 / div * b
            fwd += fwd_macs / self.matmul_rate(seq, seq, head_dim, FORWARD) * self._sharing[0]
            bwd += bwd_macs / self.matmul_rate(seq, head_dim, seq, INPUT_GRAD) * self._sharing[0]
            # the scores and their softmax, heads x seq x seq, are written and read again
            scores = heads // div * seq * seq * FP32 * b
            fwd += self.memory_time("softmax", 2 * scores)
            bwd += self.memory_time("softmax", 4 * scores)
        return fwd / b, bwd / b


def _fixed_at(rows: tuple, evicted: float) -> float:
    """A fixed cost at `evicted` bytes from its (bytes, seconds) rows, the first at 0 bytes."""
    if evicted >= rows[-1][0]:
        return rows[-1][1]
    (x0, y0), (x1, y1) = next((lo, hi) for lo, hi in zip(rows, rows[1:]) if evicted < hi[0])
    at = evicted / x1 if x0 == 0 else math.log(evicted / x0) / math.log(x1 / x0)
    return y0 + (y1 - y0) * at


@functools.lru_cache(maxsize=65536)
def _nearest(rows: tuple, shape: tuple) -> float:
    """The rate of the row whose shape is nearest `shape` in log space (the first on a tie)."""
    def distance(row):
        return sum(math.log(a / b) ** 2 for a, b in zip(row[0], shape))
    return min(rows, key=distance)[1]

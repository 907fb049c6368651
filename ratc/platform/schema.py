"""Typed sections of a platform profile: every physical parameter ratc uses lives here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from ratc import units


# What a value of each kind may be: durations may be zero, every other amount must be positive.
LOWER = {"int": ">0", "float": ">0", "bytes": ">0", "bandwidth": ">0", "frequency": ">0", "mac_rate": ">0",
         "time": ">=0"}

MAX_REGISTERS = 4096     # per register file: the kernel VM allocates each one whole
# Upper bounds that keep every command's work bounded: the kernel VM builds one DSP (with
# its register files) per core, and the codegen and timing models loop over lanes, rows
# and cycles. Each is orders of magnitude above any real machine (MT-3000: 24 DSPs,
# 64 lanes x 4 rows; an H100: 132 SMs).
MAX_CORES = 4096
MAX_LANES = 1024
MAX_LATENCY = 1_000_000      # cycles
MAX_ONCHIP = 2**30           # bytes of one on-chip memory (SM, AM)
MAX_GSM = 2**36
MAX_CLUSTERS_PER_NODE = 65_536


def quantity(kind: str, doc: str, low: str | None = None, high: float | None = None,
             choices: tuple = ()):
    """A dataclass field parsed from a TOML value in the given unit kind; `low` ('>0' or '>=0',
    default per kind) and `high` bound it; a string field may be limited to `choices`."""
    base = kind.removeprefix(FIGURE)
    return field(metadata={"kind": kind, "doc": doc, "low": low or LOWER.get(base), "high": high,
                           "choices": choices})


FIGURE = "figure:"      # kind prefix of a measured figure: {median, q1, q3} in the base kind


@dataclass(frozen=True)
class Figure:
    """A measured value: the median of repeated runs, and the quartiles of those runs (its spread)."""

    median: float
    q1: float
    q3: float

    def __iter__(self):
        return iter((self.median, self.q1, self.q3))

    @property
    def spread(self) -> float:
        """The interquartile range of the runs."""
        return self.q3 - self.q1

    def agrees(self, other: "Figure") -> bool:
        """Whether two measurements of one figure agree: their medians differ by no more than
        their spreads together (the spread of a difference of two independent measurements)."""
        return abs(self.median - other.median) <= self.spread + other.spread


def check_range(value, low: str | None, high: float | None, choices: tuple = (), shown=None) -> None:
    """Raise UnitError unless the parsed value is finite and within its bounds (`shown`: the
    value as written, for the message), or one of `choices`; a Figure's every number is checked."""
    if isinstance(value, Figure):
        for key, number in zip(("median", "q1", "q3"), value):
            try:
                check_range(number, low, high, shown=shown.get(key) if isinstance(shown, dict) else None)
            except units.UnitError as exc:
                raise units.UnitError(f"{key} {exc}") from None
        return
    if choices and value not in choices:
        raise units.UnitError(f"must be one of {', '.join(map(repr, choices))}, got {value!r}")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return
    got = f"got {value if shown is None else shown!r}"
    try:
        finite = math.isfinite(value)
    except OverflowError:       # an int past any float: every use of it as a rate or size overflows
        finite = False
    if not finite:
        raise units.UnitError(f"must be a finite number, {got}")
    if low == ">0" and value <= 0:
        raise units.UnitError(f"must be positive, {got}")
    if low == ">=0" and value < 0:
        raise units.UnitError(f"must not be negative, {got}")
    if high is not None and value > high:
        raise units.UnitError(f"must be at most {high:g}, {got}")


# Each kind maps a raw TOML value to the SI number stored on the dataclass.
PARSERS = {
    "int": lambda v: _typed(v, int),
    "float": lambda v: float(_typed(v, (int, float))),
    "str": lambda v: _typed(v, str),
    "bytes": units.parse_bytes,
    "bandwidth": units.parse_bandwidth,
    "time": units.parse_time,
    "frequency": units.parse_frequency,
    "mac_rate": lambda v: units.parse_rate(v, "MAC"),
    "int_table": lambda v: {str(k): _typed(x, int) for k, x in _typed(v, dict).items()},
}


def _figure(base: str):
    """The parser of a measured figure whose three numbers are in the `base` kind."""
    def parse(value) -> Figure:
        table = _typed(value, dict)
        keys = ("median", "q1", "q3")
        wrong = sorted(set(table) ^ set(keys))
        if wrong:
            raise units.UnitError(f"expected a measured figure {{ median = ..., q1 = ..., q3 = ... }}, "
                                  f"{'unknown' if wrong[0] in table else 'missing'} key {wrong[0]!r}")
        fig = Figure(*(PARSERS[base](table[k]) for k in keys))
        if not fig.q1 <= fig.median <= fig.q3:
            raise units.UnitError(f"the quartiles must hold the median: q1 <= median <= q3, "
                                  f"got {table['q1']!r}, {table['median']!r}, {table['q3']!r}")
        return fig
    return parse


PARSERS.update({FIGURE + base: _figure(base) for base in ("float", "time", "bandwidth", "mac_rate")})


def _typed(value, types):
    if isinstance(value, bool) or not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
        raise units.UnitError(f"expected {names}, got {value!r}")
    return value


@dataclass(frozen=True)
class ClusterSpec:
    """One acceleration cluster (or one GPU): the unit a pipeline stage is placed on."""

    dsps: int = quantity("int", "compute cores (DSPs or SMs) per cluster", high=MAX_CORES)
    peak_mac_rate: float = quantity("mac_rate", "FP16 multiply-accumulates per second")
    memory_budget: int = quantity("bytes", "usable training memory per cluster")
    ddr_bandwidth: float = quantity("bandwidth", "effective off-chip memory bandwidth")
    gsm_size: int = quantity("bytes", "cluster-shared on-chip memory", high=MAX_GSM)


@dataclass(frozen=True)
class NetworkSpec:
    """Links between clusters."""

    clusters_per_node: int = quantity("int", "clusters sharing the fast intra-node link", high=MAX_CLUSTERS_PER_NODE)
    intra_node_bandwidth: float = quantity("bandwidth", "point-to-point bandwidth inside a node")
    intra_node_latency: float = quantity("time", "per-message latency inside a node")
    inter_node_bandwidth: float = quantity("bandwidth", "point-to-point bandwidth between nodes")
    inter_node_latency: float = quantity("time", "per-message latency between nodes")


@dataclass(frozen=True)
class CollectiveSpec:
    """How collectives are built from point-to-point transfers."""

    algorithm: str = quantity("str", "collective algorithm: 'ring'")


@dataclass(frozen=True)
class DSPSpec:
    """One DSP core: clock and private memories."""

    clock: float = quantity("frequency", "core clock")
    sm_size: int = quantity("bytes", "scalar memory per DSP", high=MAX_ONCHIP)
    am_size: int = quantity("bytes", "array memory per DSP", high=MAX_ONCHIP)




@dataclass(frozen=True)
class VLIWSpec:
    """The DSP's 8-slot VLIW core as the kernel VM models it (latencies in cycles)."""

    vector_lanes: int = quantity("int", "FP32 lanes per vector register (FP16 elements per vector load)",
                                 high=MAX_LANES)
    vmac_rows: int = quantity("int", "rows one VMAC updates: MACs per VMAC = vmac_rows * vector_lanes",
                              high=MAX_LANES)
    scalar_registers: int = quantity("int", "integer registers r0..", high=MAX_REGISTERS)
    quad_registers: int = quantity("int", "registers q0.. holding vmac_rows FP16 left-operand values", high=MAX_REGISTERS)
    vector_registers: int = quantity("int", "vector registers v0..", high=MAX_REGISTERS)
    vmac_latency: int = quantity("int", "cycles from VMAC issue until its accumulators are readable",
                            low=">=0", high=MAX_LATENCY)
    alu_latency: int = quantity("int", "cycles of an integer ALU op (SMAC1/SMAC2/SIEU)",
                            low=">=0", high=MAX_LATENCY)
    sld_latency: int = quantity("int", "cycles of a scalar (quad) load from SM",
                            low=">=0", high=MAX_LATENCY)
    vld_latency: int = quantity("int", "cycles of a vector load from AM",
                            low=">=0", high=MAX_LATENCY)
    branch_penalty: int = quantity("int", "bubble cycles after a taken loop branch (SBR)",
                            low=">=0", high=MAX_LATENCY)
    barrier_latency: int = quantity("int", "cycles for the cluster barrier to release after the last arrival",
                            low=">=0", high=MAX_LATENCY)


@dataclass(frozen=True)
class DMASpec:
    """Per-DSP DMA engines; the DDR engine gets an equal share of the cluster's DDR bandwidth."""

    ddr_latency: float = quantity("time", "startup latency of a DMA touching DDR")
    gsm_bandwidth: float = quantity("bandwidth", "per-DSP port bandwidth of GSM <-> SM/AM transfers")
    gsm_latency: float = quantity("time", "startup latency of a GSM <-> SM/AM transfer")
    local_bandwidth: float = quantity("bandwidth", "AM <-> SM transfer bandwidth inside one DSP")
    local_latency: float = quantity("time", "startup latency of an AM <-> SM transfer")


@dataclass(frozen=True)
class FailureSpec:
    """How often a cluster fails, and what a checkpoint and a restart cost (`ratc plan --failures`)."""

    cluster_mtbf: float = quantity("time", "mean time between failures of one cluster", low=">0")
    checkpoint_bandwidth: float = quantity("bandwidth", "one cluster's write (and read) bandwidth to checkpoint storage")
    storage_bandwidth: float = quantity("bandwidth", "aggregate bandwidth of the checkpoint storage, shared by all clusters")
    relaunch_time: float = quantity("time", "re-launching a job after a failure, before its checkpoint is read")


MAX_SHAPE = 1 << 20          # one GEMM dimension of the calibration grid
MAX_RANKS = 4096


@dataclass(frozen=True)
class HostSpec:
    """How a host profile was measured (`ratc calibrate`): device, backend, ranks and threads."""

    device: str = quantity("str", "what ran the operators", choices=("cpu", "cuda"))
    backend: str = quantity("str", "torch.distributed backend between the ranks", choices=("gloo", "nccl"))
    cores: int = quantity("int", "logical CPUs the calibration saw", high=MAX_CORES)
    ranks: int = quantity("int", "processes measured at once (one per GPU on cuda)", high=MAX_RANKS)
    threads: int = quantity("int", "torch threads per rank", high=MAX_CORES)
    dtype: str = quantity("str", "element type of every benchmark", choices=("float32",))
    repeats: int = quantity("int", "repeated runs behind each figure's median and quartiles", high=10_000)
    torch: str = quantity("str", "torch version measured")


@dataclass(frozen=True)
class ComputeSpec:
    """One rank's operators: the best GEMM rate, the fixed costs, and memory-bound bandwidth."""

    matmul_peak: "Figure" = quantity(FIGURE + "mac_rate", "best GEMM rate of the [[matmul]] grid")
    task_forward: "Figure" = quantity(FIGURE + "time", "a Forward of a one-operator fx graph as the executor "
                                                       "runs a unit: the fixed cost of a Forward task")
    task_backward: "Figure" = quantity(FIGURE + "time", "its Backward (torch.autograd.grad, the gradient "
                                                        "flattened): the fixed cost of a Backward task")
    operator_forward: "Figure" = quantity(FIGURE + "time", "one more torch operator (on a few elements) in a traced "
                                                           "graph's Forward, over a block of a layer's kinds of "
                                                           "operators: the fixed cost every operator pays")
    operator_backward: "Figure" = quantity(FIGURE + "time", "... in its Backward (the operator's autograd)")
    parameter_forward: "Figure" = quantity(FIGURE + "time", "one more parameter tensor, held by its own submodule, "
                                                            "in a unit's Forward: its view, leaf and module call")
    parameter_backward: "Figure" = quantity(FIGURE + "time", "... in its Backward: its gradient, flattened")
    loop_forward: "Figure" = quantity(FIGURE + "time", "the executor's loop after a Forward or a Recover, to the "
                                                       "next task's start (ratc.calibrate.loop)")
    loop_backward: "Figure" = quantity(FIGURE + "time", "... after a Backward, less the release of what its "
                                                        "Forward saved")
    release_bandwidth: "Figure" = quantity(FIGURE + "bandwidth", "saved activations (fp32 bytes) a Backward's "
                                                                 "autograd graph releases per second, in the loop")
    cache_bandwidth: "Figure" = quantity(FIGURE + "bandwidth", "memory-bound operators on tensors that "
                                                               "fit in the cache")
    memory_bandwidth: "Figure" = quantity(FIGURE + "bandwidth", "memory-bound operators on tensors far "
                                                                "larger than the last-level cache")


@dataclass(frozen=True)
class P2PSpec:
    """A message between two ranks (send / recv): time = latency + bytes / bandwidth, fitted through
    the fastest calls (those not waiting for a core; the waits are [[collectives]]' tails)."""

    latency: "Figure" = quantity(FIGURE + "time", "one-way time of the fit at zero bytes")
    bandwidth: "Figure" = quantity(FIGURE + "bandwidth", "bytes per second of the fit's slope")


@dataclass(frozen=True)
class SharingSpec:
    """How ranks running at once slow each other (per-rank time with all ranks busy / alone)."""

    matmul: "Figure" = quantity(FIGURE + "float", "slow-down of a GEMM")
    memory: "Figure" = quantity(FIGURE + "float", "slow-down of a memory-bound operator")
    load: "Figure" = quantity(FIGURE + "float", "a lone rank's GEMM over one continuous window over its "
                                                "unpreempted time: what the machine's other processes "
                                                "take from a task longer than a scheduler slice")
    tasks: "Figure" = quantity(FIGURE + "float", "a lone rank's synthetic units run in a step's order (every "
                                                 "Forward, then the Backwards) over one continuous window over "
                                                 "their unpreempted time: what the machine's other processes "
                                                 "take from interpreter-bound work")
    busy: "Figure" = quantity(FIGURE + "float", "the synthetic units of [sharing].tasks over a window while "
                                                "every rank runs them, over their unpreempted time alone: what "
                                                "ranks sharing the cores and the other processes take from a rank")


@dataclass(frozen=True)
class MatmulRow:
    """One [[matmul]] entry: the rate of an (m, n, k) GEMM in one operand layout."""

    m: int = quantity("int", "rows of the output", high=MAX_SHAPE)
    n: int = quantity("int", "columns of the output", high=MAX_SHAPE)
    k: int = quantity("int", "the reduced dimension", high=MAX_SHAPE)
    layout: str = quantity("str", "operand layout: nt = x @ w.T (forward), nn = dy @ w (input gradient), "
                                  "tn = dy.T @ x (weight gradient)", choices=("nt", "nn", "tn"))
    rate: "Figure" = quantity(FIGURE + "mac_rate", "multiply-accumulates per second")


@dataclass(frozen=True)
class MemoryRow:
    """One [[memory]] entry: a memory-bound operator over a given number of bytes."""

    op: str = quantity("str", "the operator (update: the executor's AdamW step of a shard)",
                       choices=("add", "copy", "softmax", "silu", "update"))
    bytes: int = quantity("bytes", "bytes it reads and writes")
    seconds: "Figure" = quantity(FIGURE + "time", "time of one call")


@dataclass(frozen=True)
class BesideRow:
    """One [[beside]] entry: a collective over `ranks` ranks, or `p2p` (two ranks exchanging a
    message), issued beside compute in a chain as a step issues them: its extra time per call
    over the compute alone. Where a program's ranks take every core its collectives and hand-
    offs cost this (interpolated in bytes between a row and the next), not their time alone."""

    op: str = quantity("str", "the collective, or p2p: an exchange of a message each way between two ranks",
                       choices=("p2p", "all_reduce", "reduce_scatter", "all_gather"))
    ranks: int = quantity("int", "ranks in the group", high=MAX_RANKS)
    bytes: int = quantity("bytes", "the whole buffer (p2p: the message)")
    seconds: "Figure" = quantity(FIGURE + "time", "extra time per call beside compute")


@dataclass(frozen=True)
class ColdRow:
    """One [[cold]] entry: [compute]'s fixed costs measured again with `evicted` bytes of other
    data read before every timed call. In a step a unit's task runs again only after the step's
    other tasks have moved their weights, gradients and activations through the caches; the
    planner reads these rows at that distance (ratc.planner.host_exec)."""

    evicted: int = quantity("bytes", "bytes read between two timed calls")
    task_forward: "Figure" = quantity(FIGURE + "time", "as [compute].task_forward, after the eviction")
    task_backward: "Figure" = quantity(FIGURE + "time", "as [compute].task_backward, after the eviction")
    operator_forward: "Figure" = quantity(FIGURE + "time", "as [compute].operator_forward, after the eviction")
    operator_backward: "Figure" = quantity(FIGURE + "time", "as [compute].operator_backward, after the eviction")
    parameter_forward: "Figure" = quantity(FIGURE + "time", "as [compute].parameter_forward, after the eviction")
    parameter_backward: "Figure" = quantity(FIGURE + "time", "as [compute].parameter_backward, after the eviction")


@dataclass(frozen=True)
class CollectiveRow:
    """One [[collectives]] entry: a collective over `ranks` ranks, time = latency + bytes / bandwidth
    (bytes: the whole buffer, as the planner's ring formulas take it), fitted through the fastest
    calls; `tail` is what a call costs when it waits for a core."""

    op: str = quantity("str", "the collective", choices=("all_reduce", "reduce_scatter", "all_gather"))
    ranks: int = quantity("int", "ranks in the group", high=MAX_RANKS)
    latency: "Figure" = quantity(FIGURE + "time", "time of the fit at zero bytes")
    bandwidth: "Figure" = quantity(FIGURE + "bandwidth", "buffer bytes per second of the fit's slope")
    tail: "Figure" = quantity(FIGURE + "time", "90th percentile of the smallest message's time")


SECTIONS: dict[str, type] = {
    "cluster": ClusterSpec,
    "network": NetworkSpec,
    "collective": CollectiveSpec,
    "dsp": DSPSpec,
    "vliw": VLIWSpec,
    "dma": DMASpec,
    "failures": FailureSpec,
    "host": HostSpec,
    "compute": ComputeSpec,
    "p2p": P2PSpec,
    "sharing": SharingSpec,
}
# Arrays of tables ([[name]]) of a host profile: its measured tables, one row per entry.
TABLES: dict[str, type] = {"matmul": MatmulRow, "memory": MemoryRow, "cold": ColdRow,
                           "collectives": CollectiveRow, "beside": BesideRow}
# Sections a profile may leave out (the commands that need one say so, naming the platform).
OPTIONAL_SECTIONS = frozenset({"failures"})
# The sections of each platform kind beyond the shared [cluster], [network], [collective] and
# [failures]: a DSP machine's models for the kernel VM, a host's measured figures.
KIND_SECTIONS = {"dsp": ("dsp", "vliw", "dma"), "host": ("host", "compute", "p2p", "sharing")}
KIND_TABLES = {"dsp": (), "host": tuple(TABLES)}


def section_fields(cls: type) -> dict[str, str]:
    """Field name -> unit kind for a section dataclass."""
    return {f.name: f.metadata["kind"] for f in fields(cls)}


def section_bounds(cls: type) -> dict[str, tuple]:
    """Field name -> (low, high, choices) for a section dataclass."""
    return {f.name: (f.metadata["low"], f.metadata["high"], f.metadata["choices"]) for f in fields(cls)}

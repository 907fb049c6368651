"""Typed sections of a platform profile: every physical parameter ratc uses lives here."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ratc import units


def quantity(kind: str, doc: str):
    """A dataclass field parsed from a TOML value in the given unit kind."""
    return field(metadata={"kind": kind, "doc": doc})


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


def _typed(value, types):
    if isinstance(value, bool) or not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
        raise units.UnitError(f"expected {names}, got {value!r}")
    return value


@dataclass(frozen=True)
class ClusterSpec:
    """One acceleration cluster (or one GPU): the unit a pipeline stage is placed on."""

    dsps: int = quantity("int", "compute cores (DSPs or SMs) per cluster")
    peak_mac_rate: float = quantity("mac_rate", "FP16 multiply-accumulates per second")
    memory_budget: int = quantity("bytes", "usable training memory per cluster")
    ddr_bandwidth: float = quantity("bandwidth", "effective off-chip memory bandwidth")
    gsm_size: int = quantity("bytes", "cluster-shared on-chip memory")


@dataclass(frozen=True)
class NetworkSpec:
    """Links between clusters."""

    clusters_per_node: int = quantity("int", "clusters sharing the fast intra-node link")
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
    sm_size: int = quantity("bytes", "scalar memory per DSP")
    am_size: int = quantity("bytes", "array memory per DSP")


@dataclass(frozen=True)
class VLIWSpec:
    """The DSP's 8-slot VLIW core as the kernel VM models it (latencies in cycles)."""

    vector_lanes: int = quantity("int", "FP32 lanes per vector register (FP16 elements per vector load)")
    vmac_rows: int = quantity("int", "rows one VMAC updates: MACs per VMAC = vmac_rows * vector_lanes")
    scalar_registers: int = quantity("int", "integer registers r0..")
    quad_registers: int = quantity("int", "registers q0.. holding vmac_rows FP16 left-operand values")
    vector_registers: int = quantity("int", "vector registers v0..")
    vmac_latency: int = quantity("int", "cycles from VMAC issue until its accumulators are readable")
    alu_latency: int = quantity("int", "cycles of an integer ALU op (SMAC1/SMAC2/SIEU)")
    sld_latency: int = quantity("int", "cycles of a scalar (quad) load from SM")
    vld_latency: int = quantity("int", "cycles of a vector load from AM")
    branch_penalty: int = quantity("int", "bubble cycles after a taken loop branch (SBR)")
    barrier_latency: int = quantity("int", "cycles for the cluster barrier to release after the last arrival")


@dataclass(frozen=True)
class DMASpec:
    """Per-DSP DMA engines; the DDR engine gets an equal share of the cluster's DDR bandwidth."""

    ddr_latency: float = quantity("time", "startup latency of a DMA touching DDR")
    gsm_bandwidth: float = quantity("bandwidth", "per-DSP port bandwidth of GSM <-> SM/AM transfers")
    gsm_latency: float = quantity("time", "startup latency of a GSM <-> SM/AM transfer")
    local_bandwidth: float = quantity("bandwidth", "AM <-> SM transfer bandwidth inside one DSP")
    local_latency: float = quantity("time", "startup latency of an AM <-> SM transfer")


SECTIONS: dict[str, type] = {
    "cluster": ClusterSpec,
    "network": NetworkSpec,
    "collective": CollectiveSpec,
    "dsp": DSPSpec,
    "vliw": VLIWSpec,
    "dma": DMASpec,
}


def section_fields(cls: type) -> dict[str, str]:
    """Field name -> unit kind for a section dataclass."""
    return {f.name: f.metadata["kind"] for f in fields(cls)}

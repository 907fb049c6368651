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


SECTIONS: dict[str, type] = {
    "cluster": ClusterSpec,
    "network": NetworkSpec,
    "collective": CollectiveSpec,
    "dsp": DSPSpec,
}


def section_fields(cls: type) -> dict[str, str]:
    """Field name -> unit kind for a section dataclass."""
    return {f.name: f.metadata["kind"] for f in fields(cls)}

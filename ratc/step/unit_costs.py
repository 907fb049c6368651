"""One unit's costs as a `life.unit` holds them: each field an attribute of that name, its
kind the IR's; the dialect's attribute specification is generated from this record.

Times are seconds and sizes bytes, per micro-batch of `b` sequences; state sizes are one
replica's (after ZeRO sharding)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields


def _attr(kind: str, what: str, optional: bool = False):
    return field(default=None, metadata={"kind": kind + "?", "what": what}) if optional else \
        field(metadata={"kind": kind, "what": what})


@dataclass(frozen=True)
class UnitCosts:
    """A unit's costs; `attributes()` is its life.unit's attribute dictionary."""

    index: int = _attr("int", "0 the embedding, 1..L the decoder layers, L+1 the head")
    name: str = _attr("str", "the layer's name in the model")
    stage: int = _attr("int", "the pipeline stage holding it")
    decoder: bool = _attr("bool", "a decoder layer (recomputed under checkpointing and FSR)")
    fwd: float = _attr("float", "a Forward, TP all-reduces included")
    fwd_compute: float = _attr("float", "of which the compute engine is busy")
    fwd_ddr: float = _attr("float", "of which the DDR engine is busy")
    bwd: float = _attr("float", "a Backward, TP all-reduces included")
    bwd_compute: float = _attr("float", "of which the compute engine is busy")
    bwd_ddr: float = _attr("float", "of which the DDR engine is busy")
    input_bytes: object = _attr("bytes", "its input activation (a checkpoint)")
    saved: object = _attr("bytes", "what its Forward saves for its Backward")
    workspace: object = _attr("bytes", "scratch memory while it runs")
    param: object = _attr("bytes", "its fp16 parameters held")
    opt: object = _attr("bytes", "its optimizer state held (fp32 master, AdamW moments)")
    grad: object = _attr("bytes", "its gradient accumulator held")
    shard: object = _attr("bytes", "the synchronized gradient this replica updates")
    bucket: object = _attr("bytes", "a gradient bucket buffer (ZeRO >= 2)")
    view: object = _attr("bytes", "a gathered parameter view (ZeRO-3)")
    sync: float = _attr("float", "GradSync")
    sync_kind: str = _attr("all-reduce|reduce-scatter", "GradSync's collective")
    reduce: float = _attr("float", "a micro-batch's reduce-scatter (ZeRO >= 2)")
    update: float = _attr("float", "UpdateShard")
    prefetch: float = _attr("float", "PrefetchW (ZeRO 1, 2)")
    gather: float = _attr("float", "a ZeRO-3 gather before a use")
    fwd_kernels: list = _attr("list", "[kind, *shape, calls] of the Forward's kernels", optional=True)
    bwd_kernels: list = _attr("list", "[kind, *shape, calls] of the Backward's kernels", optional=True)
    fwd_other: float = _attr("float", "Forward seconds no kernel runs", optional=True)
    bwd_other: float = _attr("float", "Backward seconds no kernel runs", optional=True)
    fwd_phases: list = _attr("list<float>", "the Forward's (compute, DDR) seconds per phase, flat", optional=True)
    bwd_phases: list = _attr("list<float>", "the Backward's (compute, DDR) seconds per phase, flat", optional=True)
    stream: object = _attr("bytes", "headroom a Recover streaming into its Backward needs", optional=True)
    frozen: bool = _attr("bool", "nothing trained: no gradient, no state chain", optional=True)
    tied: object = _attr("bytes", "the tied part of its synchronized gradient", optional=True)
    tie: float = _attr("float", "TieSum over the tied copies' stages", optional=True)

    def attributes(self) -> dict:
        """The life.unit attributes (the optional ones only when set)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def spec(cls) -> dict:
        """{attribute: IR kind} of life.unit."""
        return {f.name: f.metadata["kind"] for f in fields(cls)}

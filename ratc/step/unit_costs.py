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
    stage: int = _attr("int", "the pipeline stage (rank) holding it")
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
    bwd_w: float = _attr("float", "zero-bubble schedules: of bwd, its weight-gradient (W) task's seconds "
                         "(ratc.step.rules.backward_parts)", optional=True)
    bwd_i_kernels: list = _attr("list", "zero-bubble schedules: of bwd_kernels, its I's", optional=True)
    bwd_w_kernels: list = _attr("list", "... and its W's (the weight-gradient GEMMs)", optional=True)
    w_grads: object = _attr("bytes", "zero-bubble schedules: the output gradients of its weighted GEMMs, which its "
                            "I keeps for its W", optional=True)
    w_inputs: object = _attr("bytes", "zero-bubble schedules: its weighted GEMMs' saved inputs, which its I keeps "
                             "for its W (ratc.step.rules.held_for_w)", optional=True)
    stream: object = _attr("bytes", "headroom a Recover streaming into its Backward needs", optional=True)
    chunk: int = _attr("int", "interleaved (v > 1): the rank's model chunk holding it, virtual stage "
                       "chunk * P + stage", optional=True)
    frozen: bool = _attr("bool", "nothing trained: no gradient, no state chain", optional=True)
    tied: object = _attr("bytes", "the tied part of its synchronized gradient", optional=True)
    tie: float = _attr("float", "TieSum over the tied copies' stages", optional=True)
    keep: str = _attr("full|selective", "what it keeps for its Backward under ckpt / FSR when not its input "
                      "(the default: a whole-layer Recover)", optional=True)
    core: object = _attr("bytes", "selective: of `saved`, the attention core's s x s tensors its Recover rebuilds",
                         optional=True)
    core_fwd: float = _attr("float", "selective: its Recover (the attention core's forward)", optional=True)
    core_compute: float = _attr("float", "of which the compute engine is busy", optional=True)
    core_ddr: float = _attr("float", "of which the DDR engine is busy (it re-reads Q, K, V and writes the scores "
                                     "and probabilities)", optional=True)
    core_kernels: list = _attr("list", "[kind, *shape, calls] of that Recover's kernels", optional=True)
    core_other: float = _attr("float", "that Recover's seconds no kernel runs", optional=True)
    core_phases: list = _attr("list<float>", "that Recover's (compute, DDR) seconds per phase, flat", optional=True)

    def attributes(self) -> dict:
        """The life.unit attributes (the optional ones only when set)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def spec(cls) -> dict:
        """{attribute: IR kind} of life.unit."""
        return {f.name: f.metadata["kind"] for f in fields(cls)}


# The unit attributes a Recover's work comes from, by what the unit keeps: a whole-layer
# Recover re-runs the Forward; a selective one the attention core.
RECOVER_WORK = {
    "layer": {"dur": "fwd", "compute": "fwd_compute", "ddr": "fwd_ddr", "kernels": "fwd_kernels",
              "other": "fwd_other", "phases": "fwd_phases", "bytes": "saved"},
    "selective": {"dur": "core_fwd", "compute": "core_compute", "ddr": "core_ddr", "kernels": "core_kernels",
                  "other": "core_other", "phases": "core_phases", "bytes": "core"},
}


def recover_work(unit_attrs: dict) -> dict:
    """{role: unit attribute} of a unit's Recover (its `keep`: selective, else whole-layer)."""
    return RECOVER_WORK["selective" if unit_attrs.get("keep") == "selective" else "layer"]

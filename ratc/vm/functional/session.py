"""A training session: the model file built for real, split into units, run by ratc and by PyTorch."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ratc.errors import RatcError
from ratc.step.rules import shards
from ratc.vm.functional.data import SyntheticData
from ratc.vm.functional.executor import FunctionalExecutor
from ratc.vm.functional.reference import Reference
from ratc.vm.functional.shards import AdamW
from ratc.vm.functional.units import UnitSet, flat_params, split_model


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines one training run (ratc's and the reference's)."""

    model: str = "examples/llama.py"
    preset: str | None = "tiny"
    P: int = 1
    D: int = 1
    Z: int = 0
    act: str = "fsr"
    state_pipeline: bool = True
    M: int = 4                          # micro-batches per replica per step
    b: int = 2                          # sequences per micro-batch
    seed: int = 0
    platform: str = "mt3000"            # only task durations (placement) depend on it
    reference: bool = True              # also train the plain-PyTorch reference
    keep: str = ""                      # what each decoder layer keeps (Candidate.keep; "" every one its input)
    v: int = 1                          # model chunks (virtual stages) per stage: interleaved 1F1B when > 1
    sched: str = "1f1b"                 # the pipeline schedule (ratc.step.schedules): 1f1b, zb1p or zbv
    corun: str = "prev"                  # FSR under zb1p / zbv: each I's first Recover's host (Candidate.corun)
    attn: str = "paper"                 # the attention kernels (placement only: the same math either way)
    opt: AdamW = field(default_factory=AdamW)

    @property
    def global_batch(self) -> int:
        return self.M * self.b * self.D


FP32 = torch.finfo(torch.float32).bits // 8     # every copy ratc train holds is float32
ADAMW_MOMENTS = 2                                # exp_avg, exp_avg_sq per parameter


def host_bytes(params: int, cfg: TrainConfig) -> int:
    """Host memory the run's tensors take: fp32 copies of every parameter, counted per copy."""
    copies = 2                                   # the built model; the executor's initial flat vectors
    copies += cfg.D                              # each replica's parameter view
    master = 1 + ADAMW_MOMENTS                   # master weights + AdamW moments, sharded under ZeRO >= 1
    copies += master * (cfg.D // shards(cfg.Z, cfg.D, "optimizer"))
    copies += cfg.D                              # each replica's gradient accumulator
    if cfg.reference:
        copies += 2 + ADAMW_MOMENTS              # the reference's weights, gradients, AdamW moments
    return params * copies * FP32


def activation_bytes(cfg: TrainConfig) -> int:
    """Host memory the step's saved activations take at most: the traced profile's full-save
    bytes per sequence, in float32, for every sequence of the global batch (the reference's
    one backward over the global batch keeps all of them; ratc's executor keeps at most as
    many, from every micro-batch of every replica in flight)."""
    from ratc.frontend.modelfile import trace_model_file
    from ratc.ir.types import DTYPE_BYTES

    profile = trace_model_file(cfg.model, cfg.preset)
    per_seq = profile.pre.saved_bytes + profile.post.saved_bytes + sum(
        t.saved_bytes * t.repeat for t in profile.layers)
    return per_seq * FP32 // DTYPE_BYTES.get(profile.dtype, 2) * cfg.global_batch


def machine_bytes() -> int:
    """This machine's physical memory."""
    import os
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_host_memory(cfg: TrainConfig, limit: int | None = None) -> int:
    """The run's host_bytes, counted on a meta-device build; an error if over the machine's memory."""
    from ratc.frontend.modelfile import import_model_file, load_model_file
    from ratc.units import format_bytes

    spec = load_model_file(cfg.model, cfg.preset)
    try:
        with torch.device("meta"):
            params = sum(p.numel() for p in import_model_file(cfg.model).build_model(**dict(spec.config)).parameters())
    except Exception as exc:  # noqa: BLE001 - anything the user's file raises is reported
        raise RatcError(f"{cfg.model}: build_model raised {type(exc).__name__}: {exc}") from None
    weights = host_bytes(params, cfg)
    limit = machine_bytes() if limit is None else limit
    if weights > limit:
        raise RatcError(f"training {spec.preset} for real ({params:,} parameters, D={cfg.D}, Z={cfg.Z}"
                        f"{', with the PyTorch reference' if cfg.reference else ''}) needs about "
                        f"{format_bytes(weights)} of host memory, more than this machine's {format_bytes(limit)}; "
                        "ratc train runs small models (e.g. --preset tiny)")
    # a huge micro-batch exhausted memory with parameters that fit: count activations too
    acts = activation_bytes(cfg)
    if weights + acts > limit:
        raise RatcError(f"training {spec.preset} for real with a global batch of {cfg.global_batch} sequences "
                        f"(M={cfg.M} x b={cfg.b} x D={cfg.D}) needs about {format_bytes(weights + acts)} of host "
                        f"memory ({format_bytes(acts)} of saved activations, {format_bytes(weights)} of "
                        f"parameters and optimizer state), more than this machine's {format_bytes(limit)}; "
                        "use a smaller --micro-batch-size or fewer --micro-batches")
    return weights + acts


def build_model(path: str, preset: str | None, seed: int):
    """The model file's module for real (CPU, float32, seeded init) and its input spec."""
    from ratc.frontend.modelfile import import_model_file, load_model_file

    spec = load_model_file(path, preset)       # validates the protocol and the preset
    mod = import_model_file(path)
    torch.manual_seed(seed)
    try:
        with torch.device("cpu"):
            model = mod.build_model(**dict(spec.config))
    except Exception as exc:  # noqa: BLE001 - anything the user's file raises is reported
        raise RatcError(f"{path}: build_model raised {type(exc).__name__}: {exc}") from None
    return model.float().train(), spec


def compile_for(cfg: TrainConfig):
    """ratc's scheduled life program for the run: plan IR -> lifecycle passes (verified after each).

    The state pipeline on means layer-wise GradSync plus deadline-placed UpdateShard and
    PrefetchW (the planner's `deadline` policy); off means all three at the step end (`bulk`).
    """
    from ratc.frontend.modelfile import trace_model_file
    from ratc.lifecycle.compile import CompileOptions, compile_program
    from ratc.step.config import ACT_POLICIES, Candidate
    from ratc.platform import load_platform

    if cfg.act not in ACT_POLICIES:
        raise RatcError(f"activation policy must be one of {', '.join(ACT_POLICIES)}, got '{cfg.act}'")
    profile = trace_model_file(cfg.model, cfg.preset)
    cand = Candidate(P=cfg.P, D=cfg.D, T=1, Z=cfg.Z, b=cfg.b, A=cfg.M, act=cfg.act,
                     pref="deadline" if cfg.state_pipeline else "bulk", keep=cfg.keep, v=cfg.v, sched=cfg.sched,
                     corun=cfg.corun, attn=cfg.attn)
    return compile_program(profile, cand, load_platform(cfg.platform), CompileOptions(memory_limit=False))


def check_program(module, spec) -> None:
    """A given program must be compiled for this model and sequence length, without TP."""
    from ratc.lifecycle.lowering import find_plan
    from ratc.step.plan import Plan

    plan_op = find_plan(module)
    a, plan = plan_op.attributes, Plan.from_ir(plan_op).config
    if a["model"] != spec.preset or a["seq_len"] != spec.seq_len:
        raise RatcError(f"the program is compiled for model '{a['model']}' at sequence length "
                        f"{a['seq_len']}, the model file builds '{spec.preset}' at {spec.seq_len}")
    if plan.T != 1:
        raise RatcError(f"the program's plan has T={plan.T}; ratc train runs no tensor parallelism "
                        "(compile it with T=1)")


class Session:
    """ratc's executor and (optionally) the PyTorch reference, fed the same batches."""

    def __init__(self, cfg: TrainConfig, module=None):
        for name, v in (("P", cfg.P), ("D", cfg.D), ("M", cfg.M), ("b", cfg.b)):
            if v < 1:
                raise RatcError(f"{name} must be at least 1, got {v}")
        self.cfg = cfg
        check_host_memory(cfg)      # before any real tensor: a 70B model would exhaust the machine
        model, spec = build_model(cfg.model, cfg.preset, cfg.seed)
        self.preset, self.seq_len = spec.preset, spec.seq_len
        self.units: UnitSet = split_model(model)
        if module is not None:
            check_program(module, spec)
        self.module = module if module is not None else compile_for(cfg)
        self.executor = FunctionalExecutor(self.module, self.units,
                                           [flat_params(u, model) for u in self.units.units], cfg.opt)
        self.reference = Reference(model, cfg.opt) if cfg.reference else None
        self.data = SyntheticData(spec.vocab, spec.seq_len, cfg.global_batch, cfg.seed)

    def step(self, i: int) -> tuple[float, float | None]:
        """Step i of both; (ratc loss, reference loss or None)."""
        batch = self.data.batch(i)
        ours = self.executor.step(batch)
        return ours, (self.reference.step(batch) if self.reference is not None else None)

    def parameter_deviation(self) -> float:
        """Deviation of ratc's current parameters from the reference's (see `parameter_deviation`)."""
        return parameter_deviation(self.executor.parameters(),
                                   [flat_params(u, self.reference.model) for u in self.units.units])


def parameter_deviation(ours: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    """max over units of ||ours - ref||_2 / ||ref||_2 of the unit's flat parameters.

    A norm, not a per-element ratio: an element whose gradient cancels to near zero has an
    Adam step dominated by rounding, in ratc and in the reference alike.
    """
    return max((float((a - b).norm() / b.norm().clamp_min(1e-30)) for a, b in zip(ours, ref) if b.numel()),
               default=0.0)


def relative_deviation(a: float, b: float) -> float:
    """|a - b| / |b|, the paper's per-step relative loss deviation."""
    return abs(a - b) / abs(b)

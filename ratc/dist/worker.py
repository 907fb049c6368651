"""One rank of a distributed run: build its part of the model, run the program's steps."""

from __future__ import annotations

import datetime
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from ratc.errors import RatcError
from ratc.hostmem import keep_freed_memory


@dataclass(frozen=True)
class RunConfig:
    """What every rank of a run needs, besides the program."""

    model: str                      # the model file (checked against the program's record)
    preset: str | None
    steps: int = 10
    seed: int = 0
    lr: float = 1e-3
    threads: int = 1
    timeout_s: float = 60.0
    backend: str = "gloo"
    check_collectives: bool = False  # agree on every collective's fingerprint before issuing it
    trace: bool = False              # record every task, transfer, collective and wait
    record_from: int = 0             # ... from this step on (--measure skips the warm-up's)
    checkpoint_dir: str | None = None   # save checkpoints here (ratc.vm.functional.checkpoint)
    checkpoint_every: int = 0        # ... every this many steps (0: after the last step only)
    resume: str | None = None        # a checked checkpoint directory to start from
    first_step: int = 0              # the step the run starts at (the checkpoint's)

    def saves_after(self, step: int) -> bool:
        """Whether a checkpoint is saved once `step` steps are done."""
        if self.checkpoint_dir is None:
            return False
        return step == self.steps or (self.checkpoint_every > 0 and step % self.checkpoint_every == 0)


class Stopped(RatcError):
    """The ranks stopped after a step, having saved a checkpoint of it (a rank got SIGTERM)."""

    EXIT = 128 + signal.SIGTERM     # a rank's exit status when it stopped so, as a shell reports SIGTERM


@dataclass
class RankResult:
    """What a rank reports back: the step losses (every rank has them), its state shards."""

    rank: int
    first_step: int = 0             # the step number of losses[0]
    losses: list = field(default_factory=list)
    step_seconds: list = field(default_factory=list)
    exposed_seconds: list = field(default_factory=list)  # per step: mean over ranks of time blocked on comms
    trace: list = field(default_factory=list)            # rank 0: every rank's trace events, if recorded
    shards: dict = field(default_factory=dict)     # unit -> this replica's fp32 master shard


def _device(backend: str, rank: int) -> torch.device:
    """This rank's device: its own GPU under NCCL (LOCAL_RANK under torchrun), else the CPU."""
    if backend != "nccl":
        return torch.device("cpu")
    import os

    local = int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count()
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def on_device(device: torch.device):
    """Tensors the executor creates go to the rank's GPU; on the CPU nothing changes (a device
    context intercepts every torch call, which would slow the CPU path for nothing)."""
    import contextlib

    return torch.device(device) if device.type != "cpu" else contextlib.nullcontext()


def _shape(module) -> tuple[int, int, int, int]:
    """(P, D, M, b) of a program."""
    from ratc.lifecycle.lowering import find_plan
    from ratc.step.plan import Plan

    plan = Plan.from_ir(find_plan(module)).config
    return plan.P, plan.D, plan.A, plan.b


def find_plan_model(module) -> str:
    """The model name the program's plan was made for."""
    from ratc.lifecycle.lowering import find_plan

    return find_plan(module).attributes["model"]


def plan_label(module) -> str:
    """The program's configuration label (P=...,D=...,...)."""
    from ratc.lifecycle.lowering import find_plan
    from ratc.step.plan import Plan

    return Plan.from_ir(find_plan(module)).label()


def tie_stages(module) -> list[list[int]]:
    """Per tie group of the program, the stages holding its copies (ascending)."""
    from ratc.lifecycle.lowering import find_pipeline, find_plan

    pipe = find_pipeline(module)
    stage_of = {i: s.attributes["stage"] for s in pipe.region.ops for i in s.attributes["units"]}
    return [sorted({stage_of[i] for i in g}) for g in find_plan(module).attributes.get("ties", [])]


def run_identity(module, cfg: RunConfig):
    """What a checkpoint of this run records of it (ratc.vm.functional.checkpoint.RunIdentity),
    from the model built on the meta device."""
    from ratc.frontend.modelfile import load_model_file
    from ratc.lifecycle.lowering import find_plan
    from ratc.step.plan import Plan
    from ratc.vm.functional.checkpoint import RunIdentity, segments_of
    from ratc.vm.functional.units import split_model

    spec = load_model_file(cfg.model, cfg.preset)       # (on the meta device)
    units = split_model(spec.module.float().train())
    plan_op = find_plan(module)
    return RunIdentity(plan_op.attributes["model"], spec.seq_len, Plan.from_ir(plan_op).config.global_batch,
                       cfg.seed, cfg.lr, segments_of(units))


def rehearse(module, cfg: RunConfig) -> dict:
    """Every stage-boundary message's fields, from one step of the program on the meta device
    (ratc.dist.rehearsal); the same on every rank, so `ratc launch` runs it once before forking."""
    from ratc.dist.rehearsal import message_specs
    from ratc.frontend.modelfile import import_model_file, load_model_file
    from ratc.vm.functional.shards import AdamW
    from ratc.vm.functional.units import flat_params, split_model

    _, _, M, b = _shape(module)
    spec = load_model_file(cfg.model, cfg.preset)

    def meta_units():
        meta = import_model_file(cfg.model).build_model(**dict(spec.config)).float().train()
        meta_set = split_model(meta)
        return meta_set, [flat_params(u, meta) for u in meta_set.units]
    return message_specs(module, meta_units, AdamW(lr=cfg.lr), _shape(module)[1] * M * b, spec.seq_len)


def _executor(module, cfg: RunConfig, mesh, specs: dict, device: torch.device):
    """This rank's executor over the torch.distributed transport, and the run's data."""
    from ratc.dist.transport import DistTransport
    from ratc.vm.functional.data import SyntheticData
    from ratc.vm.functional.executor import FunctionalExecutor
    from ratc.vm.functional.session import build_model, check_program
    from ratc.vm.functional.shards import AdamW
    from ratc.vm.functional.streams import RecoveryStream
    from ratc.vm.functional.units import flat_params, split_model

    _, D, M, b = _shape(module)
    model, spec = build_model(cfg.model, cfg.preset, cfg.seed)     # on the CPU: the seeded init is the same
    check_program(module, spec)
    model = model.to(device)
    units = split_model(model)
    transport = DistTransport(mesh, specs, M, cfg.timeout_s, device, cfg.check_collectives)
    with on_device(device):      # the executor's state and buffers on the rank's device
        executor = FunctionalExecutor(module, units, [flat_params(u, model) for u in units.units],
                                      AdamW(lr=cfg.lr), transport, RecoveryStream.for_device(device))
    return executor, transport, SyntheticData(spec.vocab, spec.seq_len, D * M * b, cfg.seed)


def run_rank(module, cfg: RunConfig, rank: int, world: int, store=None, on_step=None,
             specs: dict | None = None) -> RankResult:
    """Join the process group and run cfg.steps steps of the program as `rank`; `on_step(i,
    loss, seconds, exposed seconds)` after each step. `specs`: rehearse()'s, if known."""
    from ratc.dist.trace import Recorder
    from ratc.dist.transport import Mesh
    from ratc.lifecycle.lowering import find_plan

    P, D, M, b = _shape(module)
    if world != P * D:
        raise RatcError(f"the program runs on P x D = {P} x {D} = {P * D} ranks, the job has {world}")
    torch.set_num_threads(cfg.threads)
    keep_freed_memory()
    device = _device(cfg.backend, rank)
    kwargs = {"store": store, "rank": rank, "world_size": world} if store is not None else {}
    if device.type == "cuda":
        kwargs["device_id"] = device
    dist.init_process_group(cfg.backend, timeout=datetime.timedelta(seconds=cfg.timeout_s), **kwargs)
    try:
        mesh = Mesh(P, D, rank, tie_stages(module))
        executor, transport, data = _executor(module, cfg, mesh, specs or rehearse(module, cfg), device)
        recorder = Recorder(units=len(find_plan(module).region.ops)) if cfg.trace else None
        identity = None
        if cfg.resume is not None or cfg.checkpoint_dir is not None:
            from ratc.vm.functional.checkpoint import identity_of, restore

            identity = identity_of(executor, find_plan_model(module), data.seq_len, cfg.seed, cfg.lr)
            if cfg.resume is not None:
                from torch.distributed.device_mesh import DeviceMesh

                with on_device(device):
                    restore(executor, Path(cfg.resume), DeviceMesh.from_group(transport.group, device.type))
        if cfg.checkpoint_dir is not None:
            # SIGTERM (a scheduler's, or torchrun's): finish the step, agree on it, save, stop
            signal.signal(signal.SIGTERM, lambda *_: setattr(transport, "stop_requested", True))
        result = RankResult(rank, first_step=cfg.first_step)
        transport.barrier()     # every rank starts the first step together: it then times the step, not the set-up
        for i in range(cfg.first_step, cfg.steps):
            if recorder and i >= cfg.record_from:
                recorder.step = i
                executor.on_task, transport.recorder = recorder.task, recorder
            start = time.perf_counter()
            with on_device(device):
                loss = executor.step({k: v.to(device) for k, v in data.batch(i).items()})
            result.losses.append(loss)
            result.step_seconds.append(time.perf_counter() - start)
            result.exposed_seconds.append(sum(transport.exposed) / world)
            if on_step is not None:
                on_step(i, loss, result.step_seconds[-1], result.exposed_seconds[-1])
            if cfg.saves_after(i + 1) or transport.stopping:
                from ratc.dist.checkpoints import save

                save(executor, transport, cfg.checkpoint_dir, i + 1, identity, plan_label(module))
            if transport.stopping:
                raise Stopped(f"{mesh.where()}: stopped by SIGTERM after step {i + 1}, its checkpoint saved "
                              f"under {cfg.checkpoint_dir}")
        result.shards = {u: s.master.detach().cpu().clone() for u, s in enumerate(executor.state[mesh.r])
                         if s is not None}
        if recorder:        # after the last step, at the same point on every rank
            every = [None] * world if rank == 0 else None
            dist.gather_object(recorder.events, every, dst=0)
            result.trace = every or []
        return result
    finally:
        dist.destroy_process_group()

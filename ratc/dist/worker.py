"""One rank of a distributed run: build its part of the model, run the program's steps."""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ratc.errors import RatcError


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


@dataclass
class RankResult:
    """What a rank reports back: the step losses (every rank has them), its state shards."""

    rank: int
    losses: list = field(default_factory=list)
    step_seconds: list = field(default_factory=list)
    exposed_seconds: list = field(default_factory=list)  # per step: mean over ranks of time blocked on comms
    trace: list = field(default_factory=list)            # rank 0: every rank's trace events, if recorded
    shards: dict = field(default_factory=dict)     # unit -> this replica's fp32 master shard


def _device(backend: str) -> torch.device:
    if backend == "nccl":
        local = dist.get_rank() % max(torch.cuda.device_count(), 1)
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return torch.device("cpu")


def run_rank(module, cfg: RunConfig, rank: int, world: int, store=None, on_step=None) -> RankResult:
    """Join the process group and run cfg.steps steps of the program as `rank`; `on_step(i,
    loss, seconds)` after each step."""
    from ratc.dist.rehearsal import message_specs
    from ratc.dist.trace import Recorder
    from ratc.dist.transport import DistTransport, Mesh
    from ratc.lifecycle.lowering import find_pipeline, find_plan
    from ratc.vm.functional.data import SyntheticData
    from ratc.vm.functional.executor import FunctionalExecutor
    from ratc.vm.functional.session import build_model, check_program
    from ratc.vm.functional.shards import AdamW
    from ratc.vm.functional.units import flat_params, split_model

    pipe, plan = find_pipeline(module).attributes, find_plan(module).attributes
    P, D, M, b = pipe["P"], plan["D"], pipe["M"], plan["b"]
    if world != P * D:
        raise RatcError(f"the program runs on P x D = {P} x {D} = {P * D} ranks, the job has {world}")
    torch.set_num_threads(cfg.threads)
    timeout = datetime.timedelta(seconds=cfg.timeout_s)
    kwargs = {"store": store, "rank": rank, "world_size": world} if store is not None else {}
    dist.init_process_group(cfg.backend, timeout=timeout, **kwargs)
    try:
        mesh = Mesh(P, D, rank)
        device = _device(cfg.backend)
        opt = AdamW(lr=cfg.lr)
        model, spec = build_model(cfg.model, cfg.preset, cfg.seed)
        check_program(module, spec)
        units = split_model(model)

        def meta_units():
            from ratc.frontend.modelfile import import_model_file
            meta = import_model_file(cfg.model).build_model(**dict(spec.config)).float().train()
            meta_set = split_model(meta)
            return meta_set, [flat_params(u, meta) for u in meta_set.units]
        specs = message_specs(module, meta_units, opt, D * M * b, spec.seq_len)
        transport = DistTransport(mesh, specs, M, cfg.timeout_s, device, cfg.check_collectives)
        executor = FunctionalExecutor(module, units, [flat_params(u, model) for u in units.units], opt, transport)
        data = SyntheticData(spec.vocab, spec.seq_len, D * M * b, cfg.seed)
        recorder = Recorder() if cfg.trace else None
        executor.on_task = recorder.task if recorder else None
        transport.recorder = recorder
        result = RankResult(rank)
        # every rank starts the first step together: its time then measures the step, not the set-up
        transport._wait(dist.barrier(async_op=True), "the barrier before the first step", "every rank")
        for i in range(cfg.steps):
            if recorder:
                recorder.step = i
            start = time.perf_counter()
            loss = executor.step(data.batch(i))
            result.losses.append(loss)
            result.step_seconds.append(time.perf_counter() - start)
            result.exposed_seconds.append(sum(transport.exposed) / world)
            if on_step is not None:
                on_step(i, loss, result.step_seconds[-1], result.exposed_seconds[-1])
        result.shards = {u: s.master.detach().clone() for u, s in enumerate(executor.state[mesh.r]) if s is not None}
        if recorder:        # after the last step, at the same point on every rank
            every = [None] * world if rank == 0 else None
            dist.gather_object(recorder.events, every, dst=0)
            result.trace = every or []
        return result
    finally:
        dist.destroy_process_group()

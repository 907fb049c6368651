"""Lay out a planner candidate as a 1F1B step program, from the planner's own unit costs."""

from __future__ import annotations

from ratc.errors import RatcError
from ratc.planner.collectives import link_for
from ratc.planner.config import Candidate
from ratc.vm.system.driver import model_macs
from ratc.vm.system.onefoneb import StepSpec, UnitSpec, Work, build
from ratc.vm.system.program import Link, Program

# The planner's pref policy names the VM's state policy one to one.
STATE_OF_PREF = {"bulk": "bulk", "layerwise": "layerwise", "deadline": "deadline"}


def _work(total: float, compute: float, clock: float, b: int) -> Work:
    """b sequences of a unit: the compute-busy part, then the rest of its roofline time on DDR."""
    c = int(round(b * compute * clock))
    return Work(compute=c, ddr=max(0, int(round(b * total * clock)) - c))


def _link(link, clock: float) -> Link:
    return Link.from_seconds(float(link.latency), float(link.bandwidth), clock)


def step_spec(planner, cand: Candidate, steps: int = 2, symmetric: bool = True) -> StepSpec:
    """The StepSpec of a candidate, in cycles of the platform's DSP clock."""
    if cand.T != 1:
        raise RatcError(f"{cand.label()}: the system VM lays out T = 1 plans only (tensor parallelism is not modelled)")
    if cand.Z >= 3:
        raise RatcError(f"{cand.label()}: the system VM lays out ZeRO 0-2 plans only")
    platform, recipe, model = planner.platform, planner.recipe, planner.model
    clock = platform.dsp.clock
    ddr = platform.cluster.ddr_bandwidth
    units = planner.units(cand.T).units
    sc = planner.stages(cand.P, cand.T, cand.balance)
    _, mem, _ = planner.detail(cand)
    D, Z, b = cand.D, cand.Z, cand.b
    shard = D if Z >= 1 else 1
    stages, static = [], []
    for p, (s, e) in enumerate(sc.ranges):
        row = []
        for j, u in enumerate(units[s:e]):
            row.append(UnitSpec(
                name=u.name if (e - s) == 1 else f"u{s + j}",
                fwd=_work(u.fwd, u.fwd_compute, clock, b),
                bwd=_work(u.bwd, u.bwd_compute, clock, b),
                rec=_work(u.fwd, u.fwd_compute, clock, b) if u.decoder else None,
                grad_bytes=int(u.params * recipe.grad_bytes),
                update=int(round(u.params / shard * recipe.update_traffic_bytes / ddr * clock)),
                param_bytes=int(u.params * recipe.param_bytes) if Z in (1, 2) else 0,
                saved_bytes=int(b * u.saved_bytes),
                ckpt_bytes=int(b * u.ckpt_bytes)))
        stages.append(tuple(row))
        static.append(tuple((name, int(getattr(mem, name)[0, p])) for name in
                            ("params", "grads", "optimizer", "grad_bucket", "workspace") if getattr(mem, name)[0, p]))
    seq = model.seq_len
    return StepSpec(
        P=cand.P, D=D, M=cand.A, stages=tuple(stages),
        boundary_bytes=int(b * seq * model.hidden * planner.elem),
        p2p=_link(link_for(platform, D * cand.T + 1), clock),
        ring_link=_link(link_for(platform, D * cand.T), clock),
        act=cand.act, state=STATE_OF_PREF[cand.pref], sync="all_reduce" if Z == 0 else "reduce_scatter",
        static=tuple(static), memory_budget=int(planner.budget), clock=clock,
        tokens_per_step=cand.global_batch * seq, macs_per_step=cand.global_batch * model_macs(model),
        peak_mac_rate=platform.cluster.peak_mac_rate, steps=steps, symmetric=symmetric)


def program_for(planner, cand: Candidate, steps: int = 2, symmetric: bool = True) -> Program:
    """The simulated program of a candidate."""
    return build(step_spec(planner, cand, steps=steps, symmetric=symmetric))


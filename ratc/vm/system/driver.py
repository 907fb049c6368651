"""End to end: a planner candidate or a compiled life module through the system VM, and
the planner's predictions against the VM's measurements."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ratc.errors import RatcError
from ratc.step.config import Candidate


def model_macs(profile) -> float:
    """MACs of one sequence's forward and backward through the whole model (no recomputation)."""
    layers = [profile.pre, *profile.decoder_layers(), profile.post]
    return sum(lp.fwd_flops + lp.bwd_flops for lp in layers) / 2


def compile_candidate(profile, cand: Candidate, platform, planner=None):
    """The scheduled life module of a candidate; the budget is left to the VM to enforce."""
    from ratc.lifecycle.compile import CompileOptions, compile_program
    from ratc.passes.base import PassError

    try:
        return compile_program(profile, cand, platform, CompileOptions(planner=planner, memory_limit=False))
    except PassError as exc:
        raise RatcError(f"{cand.label()}: {exc}") from None


def run_module(module, platform, macs_per_step: float = 0.0, steps: int = 2, symmetric: bool = True,
               memory_limit: bool = True):
    """(timeline, results) of a scheduled life module; with `memory_limit` a stage over the
    plan's memory budget stops the run (OutOfMemory)."""
    from ratc.vm.system.engine import simulate
    from ratc.vm.system.life import translate
    from ratc.vm.system.results import summarize

    tl = simulate(translate(module, platform, steps=steps, symmetric=symmetric, macs_per_step=macs_per_step,
                            memory_limit=memory_limit))
    return tl, summarize(tl)


@dataclass(frozen=True)
class Comparison:
    """A candidate's predicted (Eq. 12) and simulated step time."""

    cand: Candidate
    predicted: float
    simulated: float
    peak: int                  # the VM's largest per-stage peak memory (bytes)

    @property
    def error(self) -> float:
        """Relative error of the prediction against the simulation."""
        return (self.predicted - self.simulated) / self.simulated


def compare(planner, evaluated) -> list:
    """Comparisons for planner results (ratc.planner.search.Evaluated), simulated via the lifecycle."""
    out = []
    macs = model_macs(planner.model)
    for ev in evaluated:
        module = compile_candidate(planner.model, ev.cand, planner.platform, planner)
        _, res = run_module(module, planner.platform, macs * ev.cand.global_batch, memory_limit=False)
        out.append(Comparison(ev.cand, ev.t_step, res.step_seconds, max(res.stage_peak_bytes)))
    return out


def kendall_tau(xs, ys) -> float:
    """Kendall's tau-b rank correlation of two equally long sequences (ties counted as in scipy)."""
    n = len(xs)
    if n != len(ys) or n < 2:
        raise RatcError(f"Kendall tau needs two sequences of equal length >= 2 (got {n} and {len(ys)})")
    conc = disc = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx = (xs[i] > xs[j]) - (xs[i] < xs[j])
            dy = (ys[i] > ys[j]) - (ys[i] < ys[j])
            if dx and dy:
                conc += dx == dy
                disc += dx != dy
            elif dx:
                tx += 1
            elif dy:
                ty += 1
    denom = ((conc + disc + tx) * (conc + disc + ty)) ** 0.5
    return (conc - disc) / denom if denom else 0.0


@dataclass(frozen=True)
class ProgramRun:
    """A program's step simulated on the system VM, beside the planner's prediction of it."""

    module: object              # the scheduled life module simulated
    cand: Candidate
    model: str                  # the plan's model name
    timeline: object
    results: object
    predicted: float | None     # the planner's Eq. 12 step time (None without the model's graph IR)
    macs: float                 # MACs per step (0 without the model's graph IR)
    cost_source: str = ""       # where the prediction's operator costs come from
    # `ratc plan`'s default prediction (the paper's Table 5 GEMM efficiencies) when the
    # program was priced otherwise (generated kernels): the plan's step time, side by side
    plan_default: float | None = None
    plan_default_source: str = ""


def _quiet(text: str):
    return contextlib.nullcontext()


def simulate_program(program, platform, exec_profile, *, plan: str | None = None, steps: int = 2,
                     symmetric: bool = True, memory_limit: bool = True, other_platform: bool = False,
                     compiled=None, phase=_quiet) -> ProgramRun:
    """Simulate a checked program (ratc.program_check.open_program) on `platform`: its own
    schedule, a just-compiled one (`compiled` = (module, profile)), or the configuration
    `plan` recompiled for its model; raises OutOfMemory over the plan's budget when
    `memory_limit`. `phase(text)` is a context manager reporting progress."""
    from ratc.codegen.program_kernels import program_exec_profile
    from ratc.lifecycle.lowering import find_plan
    from ratc.planner.exec_profile import load_exec_profile
    from ratc.planner.search import Planner
    from ratc.step.config import parse_config
    from ratc.step.plan import Plan

    module, profile = compiled if compiled is not None else (program.module, program.profile)
    if plan is not None and compiled is None:
        if profile is None:
            raise RatcError(f"{program.root}: --plan needs the model's graph IR in the program, and there is none")
        with phase(f"compiling {plan}"):
            # with the program's execution profile, so a kernel-VM program is recompiled with
            # its kernels, and its budget (a --memory-budget it was compiled with), unless
            # the platform is another machine's
            budget = None if other_platform else Plan.from_ir(find_plan(program.module)).budget
            module = compile_candidate(profile, parse_config(plan), platform,
                                       Planner(profile, platform, exec_profile, budget))
    plan_op = find_plan(module)
    cand = Plan.from_ir(plan_op).config
    macs = model_macs(profile) * cand.global_batch if profile is not None else 0.0
    from ratc.vm.system.memory import OutOfMemory

    try:
        with phase(f"simulating {steps} step{'s' if steps > 1 else ''} of {cand.label()} on the system VM"):
            tl, res = run_module(module, platform, macs, steps=steps, symmetric=symmetric, memory_limit=memory_limit)
    except OutOfMemory as exc:
        exc.config = cand.label()       # (the configuration that ran out, for the report)
        raise
    predicted = plan_default = None
    default_source = ""
    if profile is not None:
        # priced with the program's own kernels (re-tiled ones included), unless they are
        # another machine's
        kernels_here = not other_platform or plan is not None or compiled is not None
        priced = program_exec_profile(exec_profile, module) if kernels_here else exec_profile
        (ev,) = Planner(profile, platform, priced).evaluate_group([cand])
        predicted = ev.t_step
        default = load_exec_profile(platform)      # the planner's (and `ratc plan`'s) default pricing
        if type(default) is not type(exec_profile):
            (ev,) = Planner(profile, platform, default).evaluate_group([cand])
            plan_default, default_source = ev.t_step, default.cost_source
    return ProgramRun(module, cand, plan_op.attributes["model"], tl, res, predicted, macs,
                      exec_profile.cost_source if predicted is not None else "", plan_default, default_source)

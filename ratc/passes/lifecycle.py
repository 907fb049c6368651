"""The lifecycle passes: plan -> per-stage life programs -> 1F1B -> state chain -> FSR -> memory."""

from __future__ import annotations

from typing import Literal

from ratc.errors import RatcError
from ratc.ir.core import Module
from ratc.lifecycle import liveness, lowering, placement
from ratc.lifecycle.actions import token, tokens
from ratc.lifecycle.schedule import order_sends, reorder_stage
from ratc.passes.base import Pass, PassContext, PassError, option, register_pass
from ratc.step.config import ACT_OPTION_NAMES
from ratc.step.plan import Plan
from ratc.step.schedules import order_name

ACT_OPTIONS = {"plan": None, **ACT_OPTION_NAMES}
ActPolicyOption = Literal[tuple(ACT_OPTIONS)]


def _pipeline(module: Module):
    try:
        return lowering.find_pipeline(module)
    except RatcError as exc:
        raise PassError(str(exc)) from None


# Evidence on a pipeline that a placement pass has run (fsr only places under act = fsr).
_RAN = {"state-pipeline": lambda a: "state" in a, "update-prefetch": lambda a: "update" in a,
        "fsr": lambda a: bool(a.get("fsr"))}


def _before(pipe, name: str, later: tuple, why: str) -> None:
    """Refuse to run pass `name` on a pipeline that has been through any of `later` already:
    what those placed rests on what `name` would change (`why`)."""
    ran = [p for p in later if _RAN[p](pipe.attributes)]
    if ran:
        raise PassError(f"{name} runs before {' and '.join(ran)}, and @{pipe.sym_name} has been through "
                        f"{'them' if len(ran) > 1 else 'it'} already: {why}; run the pipeline again from "
                        "lower-to-life (e.g. on the plan alone)")


def _snapshot(pipe) -> list:
    """Each stage's tasks in order with their attributes, memory-plan annotations aside."""
    skip = liveness.PLAN_OP_ATTRS
    return [[(op, {k: v for k, v in op.attributes.items() if k not in skip}) for op in s.region.ops]
            for s in pipe.region.ops]


def _moving(module: Module, move) -> None:
    """Run `move(pipeline)`; if it moved or re-placed any task, an earlier memory plan no
    longer holds and its annotations go (memory-plan, run again, writes new ones)."""
    pipe = _pipeline(module)
    if "peak" not in pipe.attributes:       # no memory plan yet (the usual order): nothing to keep true
        move(pipe)
        return
    before = _snapshot(pipe)
    move(pipe)
    if _snapshot(pipe) != before:
        liveness.clear_plan(pipe)


@register_pass
class LowerToLife(Pass):
    """Lower the life.plan into per-stage programs of Forward/Backward/Recover and state tasks."""

    name = "lower-to-life"
    act_policy: ActPolicyOption = option(
        "plan", "activation policy: the plan's, or full-save | checkpoint | fsr")

    def run(self, module: Module, ctx: PassContext) -> None:
        try:
            lowering.lower(module, ACT_OPTIONS[self.act_policy])
        except RatcError as exc:
            raise PassError(str(exc)) from None


@register_pass
class Schedule1F1B(Pass):
    """Order each stage's main path as its plan's schedule: 1F1B, interleaved 1F1B or ZB1P."""

    name = "schedule-1f1b"

    def run(self, module: Module, ctx: PassContext) -> None:
        _before(_pipeline(module), self.name, ("state-pipeline", "update-prefetch", "fsr"),
                "the state chain and the co-running Recovers are placed around the main path's order")

        def move(pipe):
            plan = lowering.find_plan(module).attributes
            for stage in pipe.region.ops:
                reorder_stage(stage, plan["P"], plan["A"])
            if plan.get("sched", "1f1b") != "1f1b":
                order_sends(pipe)
            pipe.attributes["schedule"] = order_name(plan.get("v", 1), plan.get("sched", "1f1b"))
        _moving(module, move)


@register_pass
class StatePipeline(Pass):
    """Issue each layer's GradSync when its gradient accumulation completes (Eq. 2)."""

    name = "state-pipeline"
    mode: Literal["layerwise", "bulk"] = option(
        "layerwise", "layerwise, or bulk: the step-end baseline (under ZeRO >= 2 each bucket is still "
                     "reduce-scattered during backward, as ZeRO-2 does)")

    def run(self, module: Module, ctx: PassContext) -> None:
        _before(_pipeline(module), self.name, ("update-prefetch", "fsr"),
                "UpdateShard and PrefetchW follow their GradSync, and Recovers their hosts, where they are")
        _moving(module, lambda pipe: placement.state_pipeline(pipe, self.mode))


@register_pass
class UpdatePrefetch(Pass):
    """Place UpdateShard/PrefetchW inside [t_sync(l), t_use(l)) by earliest deadline (Eq. 3, 4)."""

    name = "update-prefetch"
    mode: Literal["deadline", "eager", "bulk"] = option(
        "deadline", "deadline (EDF), eager (right after each GradSync), or bulk (step end)")

    def run(self, module: Module, ctx: PassContext) -> None:
        _before(_pipeline(module), self.name, ("fsr",), "each co-running Recover directly follows its host")
        _moving(module, lambda pipe: placement.update_prefetch(pipe, self.mode))


@register_pass
class Fsr(Pass):
    """Forward-side recovery: co-run each Recover with the compute task before it (Eq. 7)."""

    name = "fsr"
    rec_buffers: int = option(2, "layer-sized recovery buffers: 2 lets every Recover co-run with the "
                                 "Backward before it; 1 only those whose host reads none (a Forward)")
    stream: bool = option(True, "a Recover co-running with a Backward that reads a recovery buffer fills "
                                "what that Backward frees: one buffer plus the unit's headroom, not two")

    def run(self, module: Module, ctx: PassContext) -> None:
        from ratc.platform import load_platform

        if self.rec_buffers < 1:
            raise PassError(f"fsr: rec-buffers must be at least 1, got {self.rec_buffers}")
        pipe = _pipeline(module)
        if pipe.attributes["act"] != "fsr":
            return
        if pipe.attributes.get("fsr"):
            # co-running grows each host's duration by its Recover's: a second run would grow it again
            raise PassError(f"fsr: @{pipe.sym_name}'s Recovers are already co-scheduled (fsr = true); "
                            "fsr runs once per lowering (re-run the pipeline from lower-to-life)")
        plan = lowering.find_plan(module)
        clock = None
        try:
            if any("cycles" in op.attributes for s in pipe.region.ops for op in s.region.ops):
                clock = (ctx.platform or load_platform(plan.attributes["platform"])).cycles_per_second
            _moving(module, lambda pipe: placement.fsr(pipe, plan, self.rec_buffers, clock, stream=self.stream))
        except RatcError as exc:
            raise PassError(str(exc)) from None


@register_pass
class MemoryPlan(Pass):
    """Live ranges, lifetime tiers, buffer reuse and per-stage peak; fail over budget."""

    name = "memory-plan"
    budget: str = option("plan", "per-stage budget: 'plan' (the plan's), 'none', or a size such as 20GB")

    def run(self, module: Module, ctx: PassContext) -> None:
        from ratc.ir.attributes import ByteSize
        from ratc.units import format_bytes, parse_bytes

        pipe = _pipeline(module)
        plans = [liveness.plan_stage(stage) for stage in pipe.region.ops]
        for stage, sp in zip(pipe.region.ops, plans):
            stage.attributes.update(peak=ByteSize(sp.peak), peak_at=sp.peak_at, buffers=sp.slots,
                                    tiers={k: ByteSize(v) for k, v in sp.tiers.items()})
        pipe.attributes["peak"] = [sp.peak for sp in plans]
        if self.budget == "none":
            return
        if self.budget == "plan":
            budget = Plan.from_ir(lowering.find_plan(module)).budget
        else:
            try:
                budget = int(parse_bytes(self.budget))
            except (RatcError, ValueError) as exc:
                raise PassError(f"memory-plan: bad budget '{self.budget}': {exc}") from None
            if budget <= 0:
                raise PassError(f"memory-plan: budget must be positive, got '{self.budget}'")
        worst = max(plans, key=lambda sp: sp.peak)
        if worst.peak <= budget:
            return
        stage = pipe.region.ops[worst.stage]
        op = stage.region.ops[worst.peak_at]
        name, at = token(op, worst.stage), _moment(stage, worst.peak_at)
        live = ", ".join(f"%{b.name} {format_bytes(b.size)} ({b.tier})" for b in worst.live_at_peak[:8])
        more = len(worst.live_at_peak) - 8
        raise PassError(
            f"stage {worst.stage} needs {format_bytes(worst.peak)}, over the {format_bytes(budget)} budget, "
            f"at op #{worst.peak_at} ({op.name} {name if at == f'during {name}' else f'{name}, {at}'}); "
            f"live there: {live}"
            + (f", and {more} more" if more > 0 else ""))


def _moment(stage, index: int) -> str:
    """The task running at op `index`: the last listed task up to it (e.g. 'during 0B3@12')."""
    p = stage.attributes["stage"]
    for op in reversed(stage.region.ops[:index + 1]):
        listed = tokens([op], p)
        if listed:
            return f"during {listed[0]}"
    return "before the first task"


@register_pass
class Codegen(Pass):
    """Generate one kernel per distinct GEMM / attention shape and charge each task its cycles."""

    name = "codegen"
    # (it sets task costs and adds module-level kernel symbols, which the structure check
    # does not read)
    changes_structure = False
    tiles: str = option("", "tile choices per kernel, quoted: \"SYMBOL:key=value,...;SYMBOL:...\" "
                            "(gemm: gm gn md nd kt groups unroll; attn_bwd: br bc)")

    def run(self, module: Module, ctx: PassContext) -> None:
        from ratc.codegen.program_kernels import codegen, parse_tiles
        from ratc.platform import load_platform

        _before(_pipeline(module), self.name, ("update-prefetch", "fsr"),
                "their placement and co-run durations rest on the task durations codegen sets")
        try:
            platform = ctx.platform or load_platform(lowering.find_plan(module).attributes["platform"])
            if not platform.has_kernels:
                # a host runs torch operators: no VLIW kernels, and its tasks keep the planner's durations
                return
            codegen(module, platform, parse_tiles(self.tiles))
        except RatcError as exc:
            raise PassError(str(exc)) from None

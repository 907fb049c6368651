"""compile_program: a model profile and a planned candidate to a scheduled, memory-planned module."""

from __future__ import annotations

from dataclasses import dataclass

from ratc.ir.core import Module
from ratc.lifecycle.plan_ir import plan_module

# The planner's state/prefetch policy (ratc.step.config.PREF_POLICIES) as pass modes:
# bulk = both mechanisms off; layerwise = layer-wise GradSync but step-end update and
# prefetch; deadline = both on.
PREF_MODES = {"bulk": ("bulk", "bulk"), "layerwise": ("layerwise", "bulk"), "deadline": ("layerwise", "deadline")}


def default_pipeline(pref: str, rec_buffers: int = 2, budget: str = "plan", codegen: bool = False,
                     tiles: str = "", stream: bool = True) -> str:
    """The full lifecycle pipeline for a plan's prefetch policy, as pipeline text.

    With `codegen` the tasks are charged their generated kernels' cycles before the
    timing-driven passes (update-prefetch deadlines, FSR windows) place work; `tiles` is
    its tile-choice option. `stream` = False gives FSR's co-running Recovers buffers of their
    own instead of streaming into what their host Backwards free.
    """
    from ratc.passes.base import format_option

    state, update = PREF_MODES[pref]
    kernels = (f"codegen{{tiles={format_option(tiles)}}}," if tiles else "codegen,") if codegen else ""
    return (f"lower-to-life,schedule-1f1b,{kernels}state-pipeline{{mode={state}}},update-prefetch{{mode={update}}},"
            f"fsr{{rec-buffers={rec_buffers}{'' if stream else ',stream=false'}}},memory-plan{{budget={budget}}}")


@dataclass(frozen=True)
class CompileOptions:
    """How compile_program builds a program (every field has its everyday default)."""

    planner: object = None          # a Planner whose cost caches and memory budget the plan uses
    pipeline: str | None = None     # pass pipeline text; default: default_pipeline(...) of the fields below
    codegen: bool | None = None     # the codegen pass in the default pipeline; None: when the planner's
                                    # execution profile runs kernels
    tiles: str = ""                 # the codegen pass's tile choices
    rec_buffers: int = 2
    stream: bool = True
    memory_limit: bool = True       # memory-plan fails a stage over the plan's budget
    verify: str = "structure"       # how much the pass manager verifies (ratc.passes.manager.VERIFY_MODES)
    instrumentation: object = None  # a PassManager Instrumentation


def compile_program(profile, cand, platform, options: CompileOptions = CompileOptions()) -> Module:
    """Run the lifecycle pipeline on one candidate (a ratc.step.config.Candidate)."""
    from ratc.passes import PassContext, PassManager, parse_pipeline

    o, planner = options, options.planner
    codegen = o.codegen if o.codegen is not None else planner is not None and planner.exec_profile.runs_kernels
    text = o.pipeline or default_pipeline(cand.pref, o.rec_buffers, "plan" if o.memory_limit else "none", codegen,
                                          o.tiles, o.stream)
    module = plan_module(profile, cand, platform, planner)
    pm = PassManager(parse_pipeline(text), verify=o.verify, instrumentation=o.instrumentation,
                     ctx=PassContext(platform=platform))
    return pm.run(module)

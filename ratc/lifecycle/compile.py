"""compile_program: a model profile and a planned candidate to a scheduled, memory-planned module."""

from __future__ import annotations

from ratc.ir.core import Module
from ratc.lifecycle.plan_ir import plan_module

# The planner's state/prefetch policy (ratc.planner.config.PREF_POLICIES) as pass modes:
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


def compile_program(profile, cand, platform, options: dict | None = None) -> Module:
    """Run the lifecycle pipeline on one candidate (a ratc.planner.config.Candidate).

    options: `pipeline` (text; default from the candidate's pref policy), `codegen` (bool:
    include the codegen pass in the default pipeline; default: when the planner's execution
    profile runs kernels), `tiles` (the codegen pass's tile choices), `rec_buffers`, `stream`,
    `budget` ('plan', 'none' or a size), `instrumentation` (a PassManager Instrumentation),
    `verify_each` (default True), `planner` (a Planner to reuse its cost caches).
    """
    from ratc.passes import PassContext, PassManager, parse_pipeline

    options = dict(options or {})
    planner = options.get("planner")
    codegen = options.get("codegen", planner is not None and planner.exec_profile.runs_kernels)
    text = options.get("pipeline") or default_pipeline(cand.pref, options.get("rec_buffers", 2),
                                                        options.get("budget", "plan"), codegen,
                                                        options.get("tiles", ""), options.get("stream", True))
    module = plan_module(profile, cand, platform, options.get("planner"))
    pm = PassManager(parse_pipeline(text), verify_each=options.get("verify_each", True),
                     instrumentation=options.get("instrumentation"), ctx=PassContext(platform=platform))
    return pm.run(module)

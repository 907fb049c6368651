"""What `ratc report` reads from a compiled program directory (ratc.program)."""

from __future__ import annotations

from dataclasses import dataclass

from ratc.errors import RatcError


@dataclass
class ProgramInputs:
    """The model profile, the scheduled life module (its kernels included), its platform and
    the execution profile it was compiled with."""

    profile: object
    module: object
    platform: object
    exec_profile: str


def load_inputs(outdir) -> ProgramInputs:
    """The report's inputs from a program written by `ratc compile` (manifest-checked)."""
    from ratc.ir.dialects.graph import profile_from_module
    from ratc.program import load_program

    program = load_program(outdir)
    graph = program.module_with("graph.layer")
    if graph is None:
        raise RatcError(f"{outdir}: the program has no graph IR (a file with graph.layer ops); the report needs "
                        "the model's profile to plan and to draw the Eq. 9 breakdown")
    module = program.module_with("life.pipeline")
    if module is None:
        raise RatcError(f"{outdir}: no scheduled life program (a file with a life.pipeline); "
                        "compile one with `ratc compile`")
    return ProgramInputs(profile_from_module(graph), module, program.platform(),
                         program.meta.get("exec_profile", "paper-table5"))

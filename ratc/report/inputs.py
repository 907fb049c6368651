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
    """The report's inputs from a program written by `ratc compile`, through the loader
    `ratc run` and `ratc train` use (ratc.program_check: every file's meaning checked)."""
    from ratc.program_check import MODEL_IR, open_program, program_platform

    program = open_program(outdir)
    if program.profile is None:
        raise RatcError(f"{outdir}: the program has no {MODEL_IR} (the model's graph IR); the report needs "
                        "the model's profile to plan and to draw the Eq. 9 breakdown")
    return ProgramInputs(program.profile, program.module, program_platform(program),
                         program.meta.get("exec_profile", "paper-table5"))

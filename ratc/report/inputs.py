"""What `ratc report` reads from a compiled program directory (ratc.program)."""

from __future__ import annotations

from dataclasses import dataclass

from ratc.errors import RatcError


@dataclass
class ProgramInputs:
    """The model profile, the scheduled life module (its kernels included) and its platform."""

    profile: object
    module: object
    platform: object


def _module_with(program, marker: str):
    from ratc.ir import parse_module

    for name in program.names():
        if name.endswith((".ir", ".mlir")) and marker in program.text(name):
            return parse_module(program.text(name), str(program.root / name))
    return None


def load_inputs(outdir) -> ProgramInputs:
    """The report's inputs from a program written by `ratc compile` (manifest-checked)."""
    from ratc.ir import verify
    from ratc.ir.dialects.graph import profile_from_module
    from ratc.lifecycle.lowering import find_plan
    from ratc.platform import load_platform
    from ratc.program import load_program

    program = load_program(outdir)
    graph = _module_with(program, "graph.layer")
    if graph is None:
        raise RatcError(f"{outdir}: the program has no graph IR (a file with graph.layer ops); the report needs "
                        "the model's profile to plan and to draw the Eq. 9 breakdown")
    module = _module_with(program, "life.pipeline")
    if module is None:
        raise RatcError(f"{outdir}: no scheduled life program (a file with a life.pipeline); "
                        "compile one with `ratc compile`")
    verify(module)
    platform = load_platform(find_plan(module).attributes["platform"])
    return ProgramInputs(profile_from_module(graph), module, platform)

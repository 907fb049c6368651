"""A generated kernel: its symbol, program, .rasm text and how to run it."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from ratc.codegen.assembler import disassemble, parse_instruction
from ratc.codegen.program import Buffer, Bundle, KernelProgram, Loop, assign_slots, validate


# Timing a kernel runs its loop nest: 2**51 MACs (a 131072^3 GEMM) takes seconds, larger
# ones minutes. The paper's largest kernels (an LM head of 16 x 8192 tokens) are ~2**47.
MAX_KERNEL_MACS = 2 ** 51


def check_kernel_size(what: str, macs: int) -> None:
    """Raise unless a kernel of `macs` MACs is small enough to generate and time."""
    from ratc.errors import RatcError

    if macs > MAX_KERNEL_MACS:
        raise RatcError(f"{what}: {macs:.3g} MACs, more than ratc generates and times in one kernel "
                        f"({MAX_KERNEL_MACS:.3g}, a 131072^3 GEMM: larger ones would take minutes); "
                        "split the shape")


@dataclass
class Kernel:
    """A kernel ready for the kernel VM.

    `macs` counts useful MACs (padding excluded); `min_ddr_bytes` is the compulsory DDR
    traffic (every input read once, every output written once).
    """

    name: str
    program: KernelProgram
    platform: object
    macs: int
    min_ddr_bytes: int
    options: dict = field(default_factory=dict)

    @cached_property
    def text(self) -> str:
        return disassemble(self.program)

    def run(self, inputs=None, mode: str = "full"):
        """Run on the kernel VM ('full' with numerics, or 'timing')."""
        from ratc.vm.kernel_vm import run_program

        return run_program(self.program, self.platform, inputs, mode)

    @cached_property
    def cycles(self) -> int:
        """Cycle count from the fast timing mode."""
        from ratc.vm.kernel_timing import run_timing

        return run_timing(self.program, self.platform)

    def stats(self, cycles: int | None = None):
        """Report figures (cycles from the timing mode unless given)."""
        from ratc.codegen.report import kernel_stats
        from ratc.vm.kernel_timing import static_counts

        return kernel_stats(self.program, self.platform, self.cycles if cycles is None else cycles,
                            static_counts(self.program, self.platform), self.macs, self.min_ddr_bytes)


class Emitter:
    """Builds a program body (bundles and loops) while a generator walks its schedule."""

    def __init__(self):
        self.stack: list[list] = [[]]
        self.open: list[tuple[str, int]] = []
        self.labels = 0

    def bundle(self, *instrs: str) -> None:
        self.stack[-1].append(assign_slots([parse_instruction(i) for i in instrs if i]))

    def open_loop(self, stem: str, count: int) -> str:
        """Start a counted loop; returns its label for close_loop."""
        self.labels += 1
        label = f"{stem}{self.labels}"
        self.stack.append([])
        self.open.append((label, count))
        return label

    def close_loop(self, label: str) -> None:
        """End the loop, putting its back-branch into the last bundle (or a new one)."""
        body = self.stack.pop()
        top, count = self.open.pop()
        assert top == label, f"loop {label} closed while {top} is open"
        sbr = parse_instruction(f"sbr {label}")
        if body and isinstance(body[-1], Bundle):
            body[-1] = assign_slots(list(body[-1].instrs) + [sbr])
        else:
            body.append(assign_slots([sbr]))
        self.stack[-1].append(Loop(label, count, tuple(body)))

    def program(self, name: str, dsps: int, buffers: list[tuple], platform) -> KernelProgram:
        """The finished, validated program."""
        program = KernelProgram(name, dsps, tuple(Buffer(bname, space, dtype, tuple(shape))
                                                  for space, bname, dtype, shape in buffers), tuple(self.stack[0]))
        validate(program, platform)
        return program


def peeled_loop(e: Emitter, stem: str, count: int, body) -> None:
    """body(first, last) for each of `count` iterations: the first and last peeled, the rest a loop."""
    body(True, count == 1)
    if count > 2:
        label = e.open_loop(stem, count - 2)
        body(False, False)
        e.close_loop(label)
    if count > 1:
        body(False, True)


def repeated(e: Emitter, stem: str, count: int, body) -> None:
    """body() once, inside a counted loop when count > 1."""
    label = e.open_loop(stem, count) if count > 1 else None
    body()
    if label:
        e.close_loop(label)

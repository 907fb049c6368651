"""The DSP instruction set: slots, mnemonics, operand kinds and register files."""

from __future__ import annotations

from dataclasses import dataclass

# The eight issue slots of one VLIW bundle, in canonical (printing) order.
SLOTS = ("VMAC", "SMAC1", "SMAC2", "SLDST", "VLDST1", "VLDST2", "SIEU", "SBR")

# Functional-unit class -> the slots that can execute it, in assignment order.
UNIT_SLOTS = {
    "vmac": ("VMAC",),
    "alu": ("SMAC1", "SMAC2", "SIEU"),
    "sldst": ("SLDST",),
    "vldst": ("VLDST1", "VLDST2"),
    "sieu": ("SIEU",),
    "sbr": ("SBR",),
}

MEMORY_SPACES = ("ddr", "gsm", "sm", "am")
DTYPES = {"f16": 2, "f32": 4}
REGISTER_FILES = ("r", "q", "v")
DMA_FLAGS = ("t", "clip", "add")


@dataclass(frozen=True)
class OpSpec:
    """One mnemonic: its functional unit and operand kinds.

    Operand kinds: r/q/v register of that file, i immediate, m memory BUF[reg+imm],
    L loop label, f trailing DMA flags.
    """

    unit: str
    operands: str
    doc: str


OPS: dict[str, OpSpec] = {
    "vmac": OpSpec("vmac", "vqv", "v[d..d+rows) += outer(q, v[b]) (FP16 x FP16 -> FP32 MACs)"),
    "vmacz": OpSpec("vmac", "vqv", "v[d..d+rows) = outer(q, v[b]) (starts an accumulation)"),
    "vsub": OpSpec("vmac", "vvv", "v[d] = v[a] - v[b] (lane-wise)"),
    "vmul": OpSpec("vmac", "vvv", "v[d] = v[a] * v[b] (lane-wise)"),
    # Not used by the paper's kernels: the fused attention forward's running row max.
    "vmax": OpSpec("vmac", "vvv", "v[d] = max(v[a], v[b]) (lane-wise)"),
    "li": OpSpec("alu", "ri", "r[d] = imm"),
    "mov": OpSpec("alu", "rr", "r[d] = r[a]"),
    "add": OpSpec("alu", "rrr", "r[d] = r[a] + r[b]"),
    "sub": OpSpec("alu", "rrr", "r[d] = r[a] - r[b]"),
    "addi": OpSpec("alu", "rri", "r[d] = r[a] + imm"),
    "muli": OpSpec("alu", "rri", "r[d] = r[a] * imm"),
    "divi": OpSpec("alu", "rri", "r[d] = r[a] // imm"),
    "remi": OpSpec("alu", "rri", "r[d] = r[a] % imm"),
    "sldq": OpSpec("sldst", "qm", "q[d] = rows FP16 values at m"),
    "vld": OpSpec("vldst", "vm", "v[d] = lanes values at m (FP16 widened to FP32)"),
    "vbc": OpSpec("vldst", "vm", "v[d] = the value at m broadcast to every lane"),
    "vst": OpSpec("vldst", "vm", "lanes values at m = v[s] (rounded to the buffer's type)"),
    "dma": OpSpec("sieu", "immiiiif",
                  "channel, dst, src, rows, cols, dst row stride, src row stride [t] [clip] [add]"),
    "wait": OpSpec("sieu", "i", "stall until every DMA on the channel has completed"),
    "barrier": OpSpec("sieu", "", "stall until every DSP of the cluster reaches a barrier"),
    "sbr": OpSpec("sbr", "L", "loop back-branch: ends the body of the loop with this label"),
}


@dataclass(frozen=True)
class Reg:
    """A register: file letter and index."""

    file: str
    index: int

    def __str__(self) -> str:
        return f"{self.file}{self.index}"


@dataclass(frozen=True)
class Mem:
    """A memory operand in elements: BUF[reg+offset], or BUF[row, col] into a 2-D buffer (DMA only)."""

    buffer: str
    reg: Reg | None
    offset: int
    col_reg: Reg | None = None
    col_offset: int | None = None

    @property
    def is_2d(self) -> bool:
        return self.col_offset is not None

    def regs(self) -> list[Reg]:
        return [r for r in (self.reg, self.col_reg) if r is not None]

    def __str__(self) -> str:
        index = _address(self.reg, self.offset)
        if self.is_2d:
            index += ", " + _address(self.col_reg, self.col_offset)
        return f"{self.buffer}[{index}]"


def _address(reg: Reg | None, offset: int) -> str:
    if reg is None:
        return str(offset)
    if offset == 0:
        return str(reg)
    return f"{reg}{'+' if offset > 0 else '-'}{abs(offset)}"


@dataclass(frozen=True)
class Label:
    """A loop label used by sbr."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Flags:
    """Trailing DMA flags (t = transpose, clip = zero-fill/drop outside the DDR matrix, add = accumulate)."""

    names: tuple[str, ...]

    def __str__(self) -> str:
        return " ".join(self.names)

"""Kernel programs in memory: buffers, instructions, bundles, loops, and their validation."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ratc.codegen.isa import DMA_FLAGS, DTYPES, MEMORY_SPACES, OPS, SLOTS, UNIT_SLOTS, Flags, Label, Mem, Reg
from ratc.errors import LocatedError, SourceLocation


@dataclass(frozen=True)
class Buffer:
    """A named array in one memory space; offsets into it are in elements."""

    name: str
    space: str
    dtype: str
    shape: tuple[int, ...]
    loc: SourceLocation | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize


@dataclass(frozen=True)
class Instr:
    """One instruction: mnemonic and operands."""

    op: str
    operands: tuple = ()
    loc: SourceLocation | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return self.op + (" " + ", ".join(str(o) for o in self.operands) if self.operands else "")

    def regs_read(self, vmac_rows: int) -> list[Reg]:
        """Registers this instruction reads (including address registers)."""
        ops = self.operands
        if self.op == "vmac":
            return [Reg("v", ops[0].index + i) for i in range(vmac_rows)] + [ops[1], ops[2]]
        if self.op in ("vmacz",):
            return [ops[1], ops[2]]
        if self.op in ("vsub", "vmul", "vmax"):
            return [ops[1], ops[2]]
        if self.op == "vst":
            return [ops[0]] + _mem_regs(ops[1])
        if self.op in ("sldq", "vld", "vbc"):
            return _mem_regs(ops[1])
        if self.op == "dma":
            return _mem_regs(ops[1]) + _mem_regs(ops[2])
        if OPS[self.op].unit == "alu":
            return [o for o in ops[1:] if isinstance(o, Reg)]
        return []

    def regs_written(self, vmac_rows: int) -> list[Reg]:
        """Registers this instruction writes."""
        ops = self.operands
        if self.op in ("vmac", "vmacz"):
            return [Reg("v", ops[0].index + i) for i in range(vmac_rows)]
        if self.op in ("vsub", "vmul", "vmax", "vld", "vbc", "sldq") or OPS[self.op].unit == "alu":
            return [ops[0]]
        return []


def _mem_regs(m: Mem) -> list[Reg]:
    return m.regs()


@dataclass(frozen=True)
class Bundle:
    """Up to eight instructions issued together, one per slot (slots parallel to instrs)."""

    instrs: tuple[Instr, ...]
    slots: tuple[str, ...]
    loc: SourceLocation | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Loop:
    """A counted loop; its last bundle holds `sbr label`, taken count-1 times."""

    label: str
    count: int
    body: tuple
    loc: SourceLocation | None = field(default=None, compare=False)


@dataclass(frozen=True)
class KernelProgram:
    """A kernel: the program every DSP of the cluster runs (r0 holds the DSP id on entry)."""

    name: str
    dsps: int
    buffers: tuple[Buffer, ...]
    body: tuple
    loc: SourceLocation | None = field(default=None, compare=False)     # of the .dsps directive

    def buffer(self, name: str) -> Buffer:
        for b in self.buffers:
            if b.name == name:
                return b
        raise KeyError(name)


def assign_slots(instrs: list[Instr], loc: SourceLocation | None = None) -> Bundle:
    """Place instructions into slots by functional unit; error if a unit is oversubscribed."""
    for ins in instrs:
        if ins.op not in OPS:
            raise LocatedError(f"unknown instruction {ins.op!r}", ins.loc or loc)
    free = {s: True for s in SLOTS}
    placed: dict[str, Instr] = {}
    # sieu-only ops claim SIEU before ALU ops spill into it.
    order = sorted(instrs, key=lambda i: 0 if OPS[i.op].unit == "sieu" else 1)
    for ins in order:
        for slot in UNIT_SLOTS[OPS[ins.op].unit]:
            if free[slot]:
                free[slot] = False
                placed[slot] = ins
                break
        else:
            used = ", ".join(UNIT_SLOTS[OPS[ins.op].unit])
            raise LocatedError(f"no free slot for '{ins}' (its unit's slots {used} are taken)", ins.loc or loc)
    slots = tuple(s for s in SLOTS if s in placed)
    return Bundle(tuple(placed[s] for s in slots), slots, loc)


def iter_bundles(body, executions: int = 1):
    """Yield (bundle, executions) for every bundle, executions = product of enclosing loop counts."""
    for item in body:
        if isinstance(item, Loop):
            yield from iter_bundles(item.body, executions * item.count)
        else:
            yield item, executions


def validate(program: KernelProgram, platform) -> None:
    """Check buffers against capacities, operands against the ISA, and loop structure."""
    vl = platform.vliw
    limits = {"sm": platform.dsp.sm_size, "am": platform.dsp.am_size, "gsm": platform.cluster.gsm_size}
    used = {s: 0 for s in MEMORY_SPACES}
    names = set()
    if program.dsps < 1 or program.dsps > platform.cluster.dsps:
        raise LocatedError(f".dsps {program.dsps}: the cluster has {platform.cluster.dsps} DSPs", program.loc)
    for b in program.buffers:
        if b.name in names:
            raise LocatedError(f"buffer {b.name!r} declared twice", b.loc)
        names.add(b.name)
        if b.space not in MEMORY_SPACES:
            raise LocatedError(f"unknown memory space {b.space!r} (use {', '.join(MEMORY_SPACES)})", b.loc)
        if b.dtype not in DTYPES:
            raise LocatedError(f"unknown element type {b.dtype!r} (use {', '.join(DTYPES)})", b.loc)
        if any(d < 1 for d in b.shape):
            raise LocatedError(f"buffer {b.name!r} has an empty dimension", b.loc)
        used[b.space] += b.nbytes
        if b.space in limits and used[b.space] > limits[b.space]:
            raise LocatedError(
                f"buffer {b.name!r} overflows {b.space.upper()}: {used[b.space]} bytes declared, "
                f"capacity {limits[b.space]}", b.loc)
    buffers = {b.name: b for b in program.buffers}
    counts = {"r": vl.scalar_registers, "q": vl.quad_registers, "v": vl.vector_registers}
    _check_body(program.body, buffers, counts, vl.vmac_rows, enclosing=None)


def _check_body(body, buffers, counts, rows, enclosing):
    labels_seen = set()
    for pos, item in enumerate(body):
        if isinstance(item, Loop):
            if item.count < 1:
                raise LocatedError(f"loop {item.label!r} has count {item.count}; it must be at least 1", item.loc)
            if item.label in labels_seen:
                raise LocatedError(f"label {item.label!r} used twice", item.loc)
            labels_seen.add(item.label)
            if not item.body or isinstance(item.body[-1], Loop):
                raise LocatedError(f"loop {item.label!r} must end with a bundle holding 'sbr {item.label}'",
                                   item.loc)
            _check_body(item.body, buffers, counts, rows, enclosing=item)
            continue
        last = enclosing is not None and pos == len(body) - 1
        _check_bundle(item, buffers, counts, rows, enclosing if last else None)


def _check_bundle(bundle: Bundle, buffers, counts, rows, closing: Loop | None):
    written: dict[Reg, Instr] = {}
    has_sbr = False
    for ins in bundle.instrs:
        spec = OPS.get(ins.op)
        if spec is None:
            raise LocatedError(f"unknown instruction {ins.op!r}", ins.loc)
        _check_operands(ins, spec, buffers, counts, rows)
        if ins.op in ("divi", "remi") and ins.operands[2] == 0:
            raise LocatedError(f"'{ins}': division by zero", ins.loc)
        if ins.op == "sbr":
            if closing is None or ins.operands[0].name != closing.label:
                raise LocatedError(f"'{ins}' must be the back-branch in the last bundle of loop "
                                   f"{ins.operands[0].name!r}", ins.loc)
            has_sbr = True
        for r in ins.regs_written(rows):
            if r in written:
                raise LocatedError(f"{r} is written twice in one bundle", ins.loc)
            written[r] = ins
    if closing is not None and not has_sbr:
        raise LocatedError(f"the last bundle of loop {closing.label!r} must hold 'sbr {closing.label}'",
                           bundle.loc or closing.loc)


def _check_operands(ins: Instr, spec, buffers, counts, rows):
    kinds = spec.operands
    ops = ins.operands
    if kinds.endswith("f") and not (ops and isinstance(ops[-1], Flags)):
        kinds = kinds[:-1]  # the flags operand is optional
    if len(ops) != len(kinds):
        want = len(spec.operands.rstrip("f"))
        raise LocatedError(f"'{ins.op}' takes {want} operands ({spec.doc}), got {len(ops)}", ins.loc)
    for kind, op in zip(kinds, ops):
        if kind in "rqv":
            if not isinstance(op, Reg) or op.file != kind:
                raise LocatedError(f"'{ins.op}': expected a {kind} register, got '{op}'", ins.loc)
            top = op.index + (rows if kind == "v" and ins.op in ("vmac", "vmacz") and op is ops[0] else 1)
            if top > counts[kind]:
                raise LocatedError(f"'{ins.op}': register {op} out of range ({kind}0..{kind}{counts[kind] - 1})",
                                   ins.loc)
        elif kind == "i":
            if not isinstance(op, int):
                raise LocatedError(f"'{ins.op}': expected an integer, got '{op}'", ins.loc)
        elif kind == "m":
            if not isinstance(op, Mem):
                raise LocatedError(f"'{ins.op}': expected a memory operand BUF[reg+offset], got '{op}'", ins.loc)
            if op.buffer not in buffers:
                raise LocatedError(f"'{ins.op}': unknown buffer {op.buffer!r}", ins.loc)
            if any(r.file != "r" or r.index >= counts["r"] for r in op.regs()):
                raise LocatedError(f"'{ins.op}': address register must be r0..r{counts['r'] - 1}", ins.loc)
            if op.is_2d and (ins.op != "dma" or len(buffers[op.buffer].shape) != 2):
                raise LocatedError(f"'{ins.op}': a [row, col] operand needs a dma and a 2-D buffer "
                                   f"({op.buffer} is {list(buffers[op.buffer].shape)})", ins.loc)
        elif kind == "L":
            if not isinstance(op, Label):
                raise LocatedError(f"'{ins.op}': expected a loop label, got '{op}'", ins.loc)
        elif kind == "f":
            bad = [f for f in op.names if f not in DMA_FLAGS]
            if bad:
                raise LocatedError(f"unknown DMA flag {bad[0]!r} (use {', '.join(DMA_FLAGS)})", ins.loc)
    local = {"sldq": "sm", "vld": "am", "vbc": "am", "vst": "am"}.get(ins.op)
    if local and buffers[ins.operands[1].buffer].space != local:
        raise LocatedError(f"'{ins.op}' accesses {local.upper()} only; {ins.operands[1].buffer} is in "
                           f"{buffers[ins.operands[1].buffer].space.upper()} (move data with dma)", ins.loc)
    if ins.op == "dma":
        if ins.operands[0] < 0 or any(v < 1 for v in ins.operands[3:5]) or any(v < 0 for v in ins.operands[5:7]):
            raise LocatedError("'dma': channel >= 0, rows and cols >= 1, strides >= 0 required", ins.loc)
        src, dst = buffers[ins.operands[2].buffer], buffers[ins.operands[1].buffer]
        if src.space == dst.space and src.space in ("sm", "am"):
            raise LocatedError("'dma': source and destination are in the same local memory", ins.loc)
        for mem, buf, stride in ((ins.operands[1], dst, ins.operands[5]), (ins.operands[2], src, ins.operands[6])):
            if mem.is_2d and stride != buf.shape[1]:
                raise LocatedError(f"'dma': {buf.name}[row, col] needs row stride {buf.shape[1]}, got {stride}",
                                   ins.loc)
        flags = ins.operands[7].names if len(ins.operands) > 7 else ()
        if "clip" in flags and not (ins.operands[1].is_2d or ins.operands[2].is_2d):
            raise LocatedError("'dma': 'clip' needs a [row, col] operand", ins.loc)

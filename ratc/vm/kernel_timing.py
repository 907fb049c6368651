"""Cycle model of one DSP running a kernel, and the fast timing mode built on it.

Both execution modes issue every bundle through `issue_time` and `retire`, so they count
cycles identically. The timing mode skips numerics and, for a loop whose timing state as
its body sees it (ready times of the body's registers, its DMA channels and engines,
relative to the current cycle) repeats between two iterations, jumps over the remaining
steady-state iterations: each of them would take exactly the same number of cycles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ratc.codegen.isa import OPS, SLOTS
from ratc.codegen.program import Bundle, KernelProgram, Loop, iter_bundles

ENGINES = ("ddr", "gsm", "local")


@dataclass(frozen=True)
class TimedBundle:
    """A bundle reduced to what the cycle model needs."""

    addr: int
    bundle: Bundle
    reads: tuple[int, ...]          # registers that must be ready (RAW, and WAW for writes)
    writes: tuple[tuple[int, int], ...]  # (register, latency)
    waits: tuple[int, ...]          # DMA channels to wait for
    dmas: tuple[tuple[int, int, int, int], ...]  # (channel, engine, latency, duration) in cycles
    barrier: bool


@dataclass(frozen=True)
class TimedLoop:
    """A loop over timed items, with the timing state its body can see or change."""

    loop: Loop
    count: int
    body: tuple
    regs: tuple[int, ...]
    chans: tuple[int, ...]
    engines: tuple[int, ...]


class MachineModel:
    """The platform numbers the cycle model needs, in cycles and bytes."""

    def __init__(self, platform, dsps: int):
        vl, dma, clock = platform.vliw, platform.dma, platform.dsp.clock
        self.platform = platform
        self.rows, self.lanes = vl.vmac_rows, vl.vector_lanes
        self.nregs = {"r": vl.scalar_registers, "q": vl.quad_registers, "v": vl.vector_registers}
        self.base = {"r": 0, "q": vl.scalar_registers, "v": vl.scalar_registers + vl.quad_registers}
        self.total_regs = sum(self.nregs.values())
        self.latency = {"vmac": vl.vmac_latency, "alu": vl.alu_latency, "sldst": vl.sld_latency,
                        "vldst": vl.vld_latency}
        self.branch_penalty = vl.branch_penalty
        self.barrier_latency = vl.barrier_latency
        # Fair share: every DSP's DDR engine gets an equal part of the cluster's DDR bandwidth.
        self.engine_bw = {"ddr": platform.cluster.ddr_bandwidth / dsps / clock,
                          "gsm": dma.gsm_bandwidth / clock, "local": dma.local_bandwidth / clock}
        self.engine_lat = {"ddr": math.ceil(dma.ddr_latency * clock), "gsm": math.ceil(dma.gsm_latency * clock),
                           "local": math.ceil(dma.local_latency * clock)}

    def reg_id(self, reg) -> int:
        return self.base[reg.file] + reg.index


def dma_engine(src_space: str, dst_space: str) -> str:
    """The engine a transfer between two memory spaces uses."""
    if "ddr" in (src_space, dst_space):
        return "ddr"
    if "gsm" in (src_space, dst_space):
        return "gsm"
    return "local"


def dma_bytes(ins, buffers) -> int:
    """Bytes a DMA moves over its engine (the DDR side's element size when DDR is involved).

    An accumulating ('add') transfer also reads its destination, so it moves twice the bytes.
    """
    dst, src = buffers[ins.operands[1].buffer], buffers[ins.operands[2].buffer]
    rows, cols = ins.operands[3], ins.operands[4]
    if src.space == "ddr":
        item = src.itemsize
    elif dst.space == "ddr":
        item = dst.itemsize
    else:
        item = max(src.itemsize, dst.itemsize)
    flags = ins.operands[7].names if len(ins.operands) > 7 else ()
    return rows * cols * item * (2 if "add" in flags else 1)


def compile_timing(program: KernelProgram, model: MachineModel):
    """Timed items for a program body, bundles numbered in program order."""
    buffers = {b.name: b for b in program.buffers}
    counter = [0]

    def bundle(b: Bundle) -> TimedBundle:
        reads, writes, waits, dmas, barrier = set(), [], [], [], False
        for ins in b.instrs:
            unit = OPS[ins.op].unit
            for r in ins.regs_read(model.rows):
                reads.add(model.reg_id(r))
            for r in ins.regs_written(model.rows):
                rid = model.reg_id(r)
                reads.add(rid)
                writes.append((rid, model.latency[unit]))
            if ins.op == "wait":
                waits.append(ins.operands[0])
            elif ins.op == "barrier":
                barrier = True
            elif ins.op == "dma":
                eng = dma_engine(buffers[ins.operands[2].buffer].space, buffers[ins.operands[1].buffer].space)
                nbytes = dma_bytes(ins, buffers)
                dmas.append((ins.operands[0], ENGINES.index(eng), model.engine_lat[eng],
                             math.ceil(nbytes / model.engine_bw[eng])))
        addr = counter[0]
        counter[0] += 1
        return TimedBundle(addr, b, tuple(sorted(reads)), tuple(writes), tuple(waits), tuple(dmas), barrier)

    def items(body) -> tuple:
        out = []
        for it in body:
            if isinstance(it, Loop):
                inner = items(it.body)
                regs, chans, engines = _footprint(inner)
                out.append(TimedLoop(it, it.count, inner, tuple(sorted(regs)), tuple(sorted(chans)),
                                     tuple(sorted(engines))))
            else:
                out.append(bundle(it))
        return tuple(out)

    return items(program.body)


def _footprint(items) -> tuple[set, set, set]:
    """Registers, DMA channels and engines that timed items read or write."""
    regs, chans, engines = set(), set(), set()
    for it in items:
        if type(it) is TimedLoop:
            regs.update(it.regs)
            chans.update(it.chans)
            engines.update(it.engines)
        else:
            regs.update(it.reads)
            chans.update(it.waits)
            for ch, eng, _, _ in it.dmas:
                chans.add(ch)
                engines.add(eng)
    return regs, chans, engines


class DSPTimer:
    """Timing state of one DSP: last issue cycle, register ready times, DMA channels and engines."""

    def __init__(self, model: MachineModel):
        self.model = model
        self.t = -1
        self.penalty = 0
        self.ready = [0] * model.total_regs
        self.chan: dict[int, int] = {}
        self.engine = [0] * len(ENGINES)

    def issue_time(self, tb: TimedBundle) -> int:
        """Earliest cycle the bundle can issue (before any barrier)."""
        t = self.t + 1 + self.penalty
        ready = self.ready
        for r in tb.reads:
            if ready[r] > t:
                t = ready[r]
        for ch in tb.waits:
            c = self.chan.get(ch, 0)
            if c > t:
                t = c
        return t

    def retire(self, tb: TimedBundle, t: int) -> None:
        """Issue the bundle at cycle t: set result ready times and start its DMAs."""
        self.t = t
        self.penalty = 0
        ready = self.ready
        for r, lat in tb.writes:
            ready[r] = t + lat
        for ch, eng, lat, dur in tb.dmas:
            start = t if t > self.engine[eng] else self.engine[eng]
            self.engine[eng] = start + dur
            done = start + lat + dur
            if done > self.chan.get(ch, 0):
                self.chan[ch] = done

    def end_cycle(self) -> int:
        """Cycle count when every issued operation and DMA has completed."""
        return max([self.t + 1, *self.ready, *self.chan.values()])

    def relative(self, loop: TimedLoop) -> tuple:
        """The state a loop body sees, relative to the current cycle; equal states time equally."""
        t, ready, chan, engine = self.t, self.ready, self.chan, self.engine
        return (self.penalty,
                tuple(ready[r] - t if ready[r] > t else 0 for r in loop.regs),
                tuple(chan.get(c, 0) - t if chan.get(c, 0) > t else 0 for c in loop.chans),
                tuple(engine[e] - t if engine[e] > t else 0 for e in loop.engines))

    def shift(self, loop: TimedLoop, cycles: int) -> None:
        """Advance as if `cycles` more steady-state cycles of the loop had run (other state is untouched)."""
        t = self.t
        now = t + cycles
        ready, chan, engine = self.ready, self.chan, self.engine
        for r in loop.regs:
            ready[r] = ready[r] + cycles if ready[r] > t else now
        for c in loop.chans:
            chan[c] = chan[c] + cycles if chan.get(c, 0) > t else now
        for e in loop.engines:
            engine[e] = engine[e] + cycles if engine[e] > t else now
        self.t = now


def run_timing(program: KernelProgram, platform) -> int:
    """Cycle count of a kernel without numerics (the fast timing mode)."""
    model = MachineModel(platform, program.dsps)
    items = compile_timing(program, model)
    timer = DSPTimer(model)
    _time_body(timer, items)
    return timer.end_cycle()


def _time_body(timer: DSPTimer, items) -> None:
    barrier_latency = timer.model.barrier_latency
    for it in items:
        if type(it) is TimedLoop:
            _time_loop(timer, it)
        else:
            t = timer.issue_time(it)
            if it.barrier:
                t += barrier_latency
            timer.retire(it, t)


def _time_loop(timer: DSPTimer, loop: TimedLoop) -> None:
    n = loop.count
    penalty = timer.model.branch_penalty
    prev = None
    i = 0
    while i < n:
        _time_body(timer, loop.body)
        i += 1
        if i == n:
            break
        timer.penalty = penalty
        state = (timer.t, timer.relative(loop))
        if prev is not None and prev[1] == state[1] and i < n - 1:
            # Iterations i+1 .. n-1 repeat iteration i exactly; the last one (no taken branch) is run.
            timer.shift(loop, (state[0] - prev[0]) * (n - 1 - i))
            i = n - 1
            prev = None
            continue
        prev = state


def static_counts(program: KernelProgram, platform) -> dict:
    """Counts that do not depend on timing: per-DSP bundles and slot issues; cluster MACs and DMA bytes."""
    rows_lanes = platform.vliw.vmac_rows * platform.vliw.vector_lanes
    buffers = {b.name: b for b in program.buffers}
    slots = dict.fromkeys(SLOTS, 0)
    counts = {"bundles": 0, "instructions": 0, "macs": 0, "ddr_bytes": 0, "gsm_bytes": 0, "local_bytes": 0}
    for b, n in iter_bundles(program.body):
        counts["bundles"] += n
        counts["instructions"] += n * len(b.instrs)
        for slot, ins in zip(b.slots, b.instrs):
            slots[slot] += n
            if ins.op in ("vmac", "vmacz"):
                counts["macs"] += n * rows_lanes
            elif ins.op == "dma":
                eng = dma_engine(buffers[ins.operands[2].buffer].space, buffers[ins.operands[1].buffer].space)
                counts[f"{eng}_bytes"] += n * dma_bytes(ins, buffers)
    for key in ("macs", "ddr_bytes", "gsm_bytes", "local_bytes"):
        counts[key] *= program.dsps
    counts["slots"] = slots
    return counts

"""The kernel VM: runs a kernel on every DSP of a modeled cluster with real numerics.

Each DSP has private SM and AM buffers, registers r (integers), q (vmac_rows FP16
values widened to FP32) and v (vector_lanes FP32 lanes); GSM and DDR buffers are shared.
Every access is bounds-checked against its buffer. A DMA reads its source when it starts
and lands in its destination when a `wait` on its channel (or the kernel's end) observes
it, so a missing wait shows up as wrong numbers, not as optimistic timing.
DSPs run one after another between barriers: within a barrier interval the programs
touch disjoint shared data, so the order does not change results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratc.codegen.assembler import format_bundle
from ratc.codegen.isa import OPS
from ratc.codegen.program import KernelProgram, iter_bundles
from ratc.errors import RatcError
from ratc.vm.kernel_races import Access, find_race
from ratc.vm.kernel_timing import DSPTimer, MachineModel, TimedLoop, compile_timing, run_timing, static_counts

NP_DTYPES = {"f16": np.float16, "f32": np.float32}
SHARED = ("gsm", "ddr")

# Readers of a register file run before its writers inside one bundle (ALU ops last, two-phase).
_READ_ORDER = {"vst": 0, "dma": 1, "wait": 1, "barrier": 1, "vmac": 2, "vmacz": 2, "vsub": 2, "vmul": 2, "vmax": 2,
               "sldq": 3, "vld": 3, "vbc": 3}

_LANE_WISE = {"vsub": np.subtract, "vmul": np.multiply, "vmax": np.maximum}


class VMFault(RatcError):
    """A kernel did something the machine cannot: an out-of-bounds access or a bad DMA."""


@dataclass
class RunResult:
    """Outcome of running a kernel: cycles, static counts, and the DDR buffers afterwards."""

    cycles: int
    counts: dict
    ddr: dict


def make_ddr(program: KernelProgram, inputs: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """DDR buffers of a program, zero-initialized, with `inputs` copied in (shapes must match)."""
    ddr = {}
    inputs = inputs or {}
    for b in program.buffers:
        if b.space != "ddr":
            continue
        arr = np.zeros(b.size, dtype=NP_DTYPES[b.dtype])
        if b.name in inputs:
            src = np.asarray(inputs[b.name])
            if src.size != b.size:
                raise RatcError(f"input {b.name!r} has {src.size} elements, the kernel's buffer {b.size}")
            arr[:] = src.reshape(-1)
        ddr[b.name] = arr
    unknown = sorted(set(inputs) - set(ddr))
    if unknown:
        raise RatcError(f"kernel {program.name} has no DDR buffer {unknown[0]!r}")
    return ddr


def check_full_run(program: KernelProgram) -> None:
    """Refuse, before any allocation, a full run whose shared buffers or executed bundles
    exceed $RATC_MAX_KERNEL_BYTES or $RATC_MAX_KERNEL_STEPS."""
    from ratc.limits import MAX_KERNEL_BYTES, MAX_KERNEL_STEPS

    subject, hint = f"kernel {program.name} in full mode", "; --mode timing counts cycles without values"
    MAX_KERNEL_BYTES.check(sum(b.nbytes for b in program.buffers if b.space in SHARED), subject, hint)
    MAX_KERNEL_STEPS.check(sum(n for _, n in iter_bundles(program.body)) * program.dsps, subject, hint)


def run_full(program: KernelProgram, platform, inputs: dict[str, np.ndarray] | None = None) -> RunResult:
    """Execute the kernel on all its DSPs with numerics; returns cycles and the DDR buffers."""
    check_full_run(program)
    model = MachineModel(platform, program.dsps)
    items = compile_timing(program, model)
    ddr = make_ddr(program, inputs)
    gsm = {b.name: np.zeros(b.size, NP_DTYPES[b.dtype]) for b in program.buffers if b.space == "gsm"}
    dsps = [_DSP(program, model, items, dsp, ddr, gsm) for dsp in range(program.dsps)]
    gens = [d.run() for d in dsps]
    arrivals = [_advance(g, None) for g in gens]
    while any(a is not None for a in arrivals):
        if any(a is None for a in arrivals):
            raise VMFault("barrier deadlock: some DSPs finished while others wait at a barrier")
        _check_races(dsps)
        release = max(arrivals) + model.barrier_latency
        arrivals = [_advance(g, release) for g in gens]
    cycles = max(d.timer.end_cycle() for d in dsps)
    for d in dsps:
        d.commit_all()
    _check_races(dsps)
    return RunResult(cycles, static_counts(program, platform), dict(ddr))


def _check_races(dsps) -> None:
    """Fault if two DSPs touched the same shared data since the last barrier (one writing)."""
    race = find_race([a for d in dsps for a in d.accesses])
    for d in dsps:
        d.accesses.clear()
    if race:
        w, other = race
        raise VMFault(f"race on {w.buffer}: DSP {w.dsp} {_KIND[w.kind]} {w.rows}x{w.cols} at element {w.offset} "
                      f"({w.where}) while DSP {other.dsp} {_KIND[other.kind]} {other.rows}x{other.cols} at "
                      f"element {other.offset} ({other.where}) with no barrier in between")


_KIND = {"r": "reads", "w": "writes", "a": "accumulates into"}


def _advance(gen, value):
    """Resume a DSP until its next barrier; None once it has finished."""
    try:
        return gen.send(value)
    except StopIteration:
        return None


class _DSP:
    """One DSP: registers, private memories, pending DMAs and its timer."""

    def __init__(self, program, model, items, dsp_id, ddr, gsm):
        self.program, self.model, self.items = program, model, items
        self.buffers = {b.name: b for b in program.buffers}
        self.mem = dict(ddr)
        self.mem.update(gsm)
        for b in program.buffers:
            if b.space in ("sm", "am"):
                self.mem[b.name] = np.zeros(b.size, NP_DTYPES[b.dtype])
        self.R = [0] * model.nregs["r"]
        self.R[0] = dsp_id
        self.Q = np.zeros((model.nregs["q"], model.rows), np.float32)
        self.V = np.zeros((model.nregs["v"], model.lanes), np.float32)
        self.timer = DSPTimer(model)
        self.dsp_id = dsp_id
        self.accesses: list[Access] = []  # shared-memory blocks touched since the last barrier
        self.pending: dict[int, list] = {}
        self.compiled = {}

    # -- execution -------------------------------------------------------------------------

    def run(self):
        """Generator: runs the program, yielding the arrival cycle at each barrier."""
        yield from self._body(self.items)

    def _body(self, items):
        timer = self.timer
        compiled = self.compiled
        for it in items:
            if type(it) is TimedLoop:
                n = it.count
                for i in range(n):
                    yield from self._body(it.body)
                    if i < n - 1:
                        timer.penalty = self.model.branch_penalty
                continue
            t = timer.issue_time(it)
            if it.barrier:
                t = yield t
            timer.retire(it, t)
            fns = compiled.get(it.addr)
            if fns is None:
                fns = compiled[it.addr] = self._compile_bundle(it)
            for fn in fns:
                fn()

    def commit_all(self) -> None:
        for ch in sorted(self.pending):
            self._commit(ch)

    def _commit(self, ch: int) -> None:
        for land in self.pending.pop(ch, []):
            land()

    # -- instruction semantics -------------------------------------------------------------

    def _fault(self, tb, ins, message: str):
        where = f" ({ins.loc!r})" if ins.loc is not None else ""
        raise VMFault(f"bundle @{tb.addr}{where} '{format_bundle(tb.bundle)}': {message}")

    def _addr(self, tb, ins, mem, n: int):
        """A bounds-checked element address function for memory operand `mem` covering n elements."""
        arr = self.mem[mem.buffer]
        size, R, off = arr.size, self.R, mem.offset
        reg = mem.reg.index if mem.reg is not None else None
        buf = self.buffers[mem.buffer]

        def addr() -> int:
            o = (R[reg] if reg is not None else 0) + off
            if o < 0 or o + n > size:
                self._fault(tb, ins, f"{buf.name}[{o}:{o + n}] is outside buffer {buf.name} "
                                     f"({buf.space}, {size} {buf.dtype} elements)")
            return o
        return arr, addr

    def _compile_bundle(self, tb) -> list:
        """Closures in an order where every instruction reads the values from before the bundle."""
        instrs = sorted(tb.bundle.instrs, key=lambda i: _READ_ORDER.get(i.op, 4))
        fns = [self._compile(ins, tb) for ins in instrs if OPS[ins.op].unit != "alu"]
        alu = [self._compile_alu(ins) for ins in instrs if OPS[ins.op].unit == "alu"]
        if len(alu) == 1:
            def one(f=alu[0]):
                value, store = f()
                store(value)
            fns.append(one)
        elif alu:
            def alus():
                results = [f() for f in alu]
                for value, store in results:
                    store(value)
            fns.append(alus)
        return fns

    def _compile(self, ins, tb):
        op, ops = ins.op, ins.operands
        Q, V, rows, lanes = self.Q, self.V, self.model.rows, self.model.lanes
        if op in ("vmac", "vmacz"):
            acc, qv, vb = V[ops[0].index:ops[0].index + rows], Q[ops[1].index][:, None], V[ops[2].index]
            if op == "vmac":
                return lambda: acc.__iadd__(qv * vb)
            return lambda: np.multiply(qv, vb, out=acc)
        if op in _LANE_WISE:
            d, a, b = V[ops[0].index], V[ops[1].index], V[ops[2].index]
            ufunc = _LANE_WISE[op]
            return lambda: ufunc(a, b, out=d)
        if op == "sldq":
            arr, addr = self._addr(tb, ins, ops[1], rows)
            qd = Q[ops[0].index]

            def sldq():
                o = addr()
                qd[:] = arr[o:o + rows]
            return sldq
        if op == "vld":
            arr, addr = self._addr(tb, ins, ops[1], lanes)
            vd = V[ops[0].index]

            def vld():
                o = addr()
                vd[:] = arr[o:o + lanes]
            return vld
        if op == "vbc":
            arr, addr = self._addr(tb, ins, ops[1], 1)
            vd = V[ops[0].index]

            def vbc():
                vd[:] = arr[addr()]
            return vbc
        if op == "vst":
            arr, addr = self._addr(tb, ins, ops[1], lanes)
            vs = V[ops[0].index]

            def vst():
                o = addr()
                arr[o:o + lanes] = vs
            return vst
        if op == "dma":
            return self._compile_dma(ins, tb)
        if op == "wait":
            ch = ops[0]
            return lambda: self._commit(ch) if ch in self.pending else None
        if op in ("barrier", "sbr"):
            return lambda: None
        return self._compile_alu(ins)

    def _compile_alu(self, ins):
        """A function returning (value, store) so a bundle's ALU ops all read before any writes."""
        R = self.R
        d = ins.operands[0].index
        a = ins.operands[1]

        def store(value):
            R[d] = value
        if ins.op == "li":
            return lambda: (a, store)
        if ins.op == "mov":
            return lambda: (R[a.index], store)
        if ins.op in ("add", "sub"):
            b = ins.operands[2].index
            sign = 1 if ins.op == "add" else -1
            return lambda: (R[a.index] + sign * R[b], store)
        imm = ins.operands[2]
        if ins.op in ("divi", "remi") and imm == 0:
            raise VMFault(f"'{ins}': division by zero")
        ai = a.index
        if ins.op == "addi":
            return lambda: (R[ai] + imm, store)
        if ins.op == "muli":
            return lambda: (R[ai] * imm, store)
        if ins.op == "divi":
            return lambda: (R[ai] // imm, store)
        return lambda: (R[ai] % imm, store)

    def _compile_dma(self, ins, tb):
        ch, dst_m, src_m, rows, cols, dstride, sstride, *flags = ins.operands
        flags = flags[0].names if flags else ()
        transpose, clip, add = "t" in flags, "clip" in flags, "add" in flags
        src_buf, dst_buf = self.buffers[src_m.buffer], self.buffers[dst_m.buffer]
        src, dst = self.mem[src_m.buffer], self.mem[dst_m.buffer]
        R = self.R
        drows, dcols = (cols, rows) if transpose else (rows, cols)

        def window(buf, arr, m, nr, nc, stride):
            """(view, valid rows, valid cols) of the nr x nc block an operand addresses."""
            if m.is_2d:
                R_, C_ = buf.shape
                r0 = (R[m.reg.index] if m.reg is not None else 0) + m.offset
                c0 = (R[m.col_reg.index] if m.col_reg is not None else 0) + m.col_offset
                vr, vc = max(0, min(nr, R_ - r0)), max(0, min(nc, C_ - c0))
                if r0 < 0 or c0 < 0 or (not clip and (vr, vc) != (nr, nc)):
                    self._fault(tb, ins, f"{nr}x{nc} block at {buf.name}[{r0}, {c0}] is outside buffer "
                                         f"{buf.name} {list(buf.shape)} ({buf.space})")
                return arr.reshape(R_, C_)[r0:r0 + vr, c0:c0 + vc], vr, vc, (r0 * C_ + c0, C_)
            o = (R[m.reg.index] if m.reg is not None else 0) + m.offset
            last = o + (nr - 1) * stride + nc
            if o < 0 or last > arr.size or (nr > 1 and nc > stride):
                self._fault(tb, ins, f"{nr}x{nc} block at {buf.name}[{o}] (row stride {stride}) is outside "
                                     f"buffer {buf.name} ({buf.space}, {arr.size} {buf.dtype} elements)")
            view = np.lib.stride_tricks.as_strided(arr[o:], shape=(nr, nc),
                                                   strides=(stride * arr.itemsize, arr.itemsize))
            return view, nr, nc, (o, stride)

        shared_src, shared_dst = src_buf.space in SHARED, dst_buf.space in SHARED
        where = f"bundle @{tb.addr}" + (f" ({ins.loc!r})" if ins.loc is not None else "")

        def start():
            sview, vr, vc, (so, ss) = window(src_buf, src, src_m, rows, cols, sstride)
            block = np.zeros((rows, cols), np.float32)
            block[:vr, :vc] = sview
            if transpose:
                block = block.T
            dview, wr, wc, (do, ds) = window(dst_buf, dst, dst_m, drows, dcols, dstride)
            part = block[:wr, :wc]
            if shared_src and vr and vc:
                self.accesses.append(Access("r", src_buf.name, so, ss, vr, vc, self.dsp_id, where))
            write = Access("a" if add else "w", dst_buf.name, do, ds, wr, wc, self.dsp_id, where)
            if shared_dst and wr and wc:
                self.accesses.append(write)

            def land():
                # The write happens some time between start and wait: it belongs to both intervals.
                if shared_dst and wr and wc and (not self.accesses or self.accesses[-1] is not write):
                    self.accesses.append(write)
                if add:
                    dview[...] = dview + part
                else:
                    dview[...] = part
            self.pending.setdefault(ch, []).append(land)
        return start


def run_program(program: KernelProgram, platform, inputs=None, mode: str = "full") -> RunResult:
    """Run a kernel in 'full' (numerics, all DSPs) or 'timing' mode."""
    if mode == "timing":
        return RunResult(run_timing(program, platform), static_counts(program, platform), {})
    if mode != "full":
        raise RatcError(f"unknown kernel VM mode {mode!r} (use full or timing)")
    return run_full(program, platform, inputs)

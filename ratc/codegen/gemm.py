"""GEMM code generator: C[m,n] = A[m,k] B[k,n], FP16 in, FP32 accumulate, FP16 out.

Dataflow (the review's Fig. 3): per K step, the DSPs cooperatively DMA the A panel
(transposed) and the B panel from DDR into a triple-buffered GSM slot, then meet at a
barrier; each DSP copies its B columns GSM -> AM (double-buffered) and, one row group
at a time, its A rows GSM -> SM (double-buffered). The VMAC micro-kernel multiplies
SM quads by AM vectors into FP32 accumulators that live in AM (Cs) across K steps; the
last K step stores FP16 results to Os, which leaves for DDR in chunks during the next
block's first steps (the final block writes each finished row group right away).
K steps form one stream across C blocks: the panels two steps ahead load while the
current step computes, including the first steps of the next block.
"""

from __future__ import annotations

import math

from ratc.codegen.kernel import Emitter, Kernel, check_kernel_size
from ratc.codegen.microkernel import Operand, micro_tile
from ratc.codegen.tile_choice import choose_gemm_tiles
from ratc.codegen.tiling import GemmTiles

# DMA channels: DDR->GSM panels, GSM->AM B, GSM->SM A, AM->DDR results.
CH_DDR, CH_BS, CH_AS, CH_OUT = 0, 1, 2, 3


def gemm_name(m: int, n: int, k: int) -> str:
    """Kernel symbol of a GEMM shape."""
    return f"gemm_{m}x{n}x{k}_f16"


def generate_gemm(platform, m: int, n: int, k: int, **tile_options) -> Kernel:
    """A GEMM kernel for one cluster; tile options (see GemmTiles) override the chooser."""
    check_kernel_size(f"gemm {m}x{n}x{k}", m * n * k)
    tiles, cycles = choose_gemm_tiles(platform, m, n, k, **tile_options)
    kernel = Kernel(gemm_name(m, n, k), generate_program(platform, m, n, k, tiles), platform, m * n * k,
                    2 * (m * k + k * n + m * n), dict(vars(tiles)))
    if cycles is not None:      # the chooser timed this very program: no need to time it again
        kernel.cycles = cycles
    return kernel


def generate_program(platform, m: int, n: int, k: int, tiles: GemmTiles):
    """The validated GEMM program of one tiling."""
    return _GemmGen(platform, m, n, k, tiles).emit()


class _GemmGen:
    """Emits the GEMM program. Register roles:

    r0 DSP id; r1, r2 this DSP's K offsets into its A and B slices; r3, r4 slice
    destinations inside a GSM slot; r5 = ri*md; r6 = B column offset inside a slot;
    r7-r9 GSM slots of steps s, s+1, s+2; r10, r11 next A column / B row to load;
    r12, r13 AM B buffers (current, next); r14, r15 row/column of the block being loaded;
    r16, r17, r30 write-back position (C row, Os offset, C column); r18 block being
    loaded; r19, r20 scratch; r21-r24, r26-r28 micro-kernel and A-row-group pointers;
    r25 block being computed; r29, r31 its C row and column.
    """

    def __init__(self, platform, m, n, k, t: GemmTiles):
        vl = platform.vliw
        self.platform, self.m, self.n, self.k, self.t = platform, m, n, k, t
        self.rows, self.lanes = vl.vmac_rows, vl.vector_lanes
        self.mr = self.rows * t.groups
        self.Mc, self.Nc = t.gm * t.md, t.gn * t.nd
        self.kta, self.ktb = t.kt // t.gn, t.kt // t.gm
        self.slot = t.kt * (self.Mc + self.Nc)
        self.bm, self.bn = math.ceil(m / self.Mc), math.ceil(n / self.Nc)
        self.blocks = self.bm * self.bn
        self.ns = math.ceil(k / t.kt)
        self.total = self.blocks * self.ns
        groups = t.md // self.mr
        self.chunks = max(d for d in range(1, groups + 1) if groups % d == 0 and d <= max(1, self.ns - 1))
        self.chunk_rows = t.md // self.chunks
        self.e = Emitter()

    def emit(self):
        t, e = self.t, self.e
        self.setup()
        self.block_coords()
        self.slices("r7")
        e.bundle(f"wait {CH_DDR}")
        e.bundle("barrier", "add r19, r7, r6")
        e.bundle(f"dma {CH_BS}, Bs[r12], Pg[r19], {t.kt}, {t.nd}, {t.nd}, {self.Nc}")
        if self.total > 1:
            self.issue(1, "r8")
        # Blocks differ only in whether a later block's panels are prefetched near their end.
        for steps, count in self.block_runs():
            label = e.open_loop("blk", count) if count > 1 else None
            for step_sig, n_steps in steps:
                inner = e.open_loop("ks", n_steps) if n_steps > 1 else None
                self.step(*step_sig)
                if inner:
                    e.close_loop(inner)
            if label:
                e.close_loop(label)
        e.bundle(f"wait {CH_OUT}")
        buffers = [
            ("ddr", "A", "f16", (self.m, self.k)),
            ("ddr", "B", "f16", (self.k, self.n)),
            ("ddr", "C", "f16", (self.m, self.n)),
            ("gsm", "Pg", "f16", (3, self.slot)),
            ("sm", "As", "f16", (2, t.kt, self.mr)),
            ("am", "Bs", "f16", (2, t.kt, t.nd)),
            ("am", "Cs", "f32", (t.md, t.nd)),
            ("am", "Os", "f16", (t.md, t.nd)),
        ]
        return e.program(gemm_name(self.m, self.n, self.k), t.dsps, buffers, self.platform)

    def setup(self):
        """Per-DSP constants: grid position (ri, rj) and the offsets of this DSP's slices."""
        t, e, Mc, Nc = self.t, self.e, self.Mc, self.Nc
        e.bundle(f"divi r19, r0, {t.gn}", f"remi r20, r0, {t.gn}")
        e.bundle(f"muli r1, r20, {self.kta}", f"muli r2, r19, {self.ktb}", f"muli r5, r19, {t.md}")
        e.bundle(f"muli r3, r20, {self.kta * Mc}", f"muli r4, r19, {self.ktb * Nc}", f"muli r6, r20, {t.nd}")
        e.bundle("add r3, r3, r5", f"addi r6, r6, {t.kt * Mc}", "li r18, 0")
        e.bundle("add r4, r4, r6", "li r7, 0", f"li r8, {self.slot}")
        e.bundle(f"li r9, {2 * self.slot}", "li r12, 0", f"li r13, {t.kt * t.nd}")
        e.bundle("li r25, 0")

    def block_coords(self):
        """r14, r15 = first row and column of this DSP's part of issue block r18; reset K."""
        t, e = self.t, self.e
        e.bundle(f"divi r19, r18, {self.bn}", f"remi r20, r18, {self.bn}")
        e.bundle(f"muli r19, r19, {self.Mc}", f"muli r20, r20, {self.Nc}")
        e.bundle("add r14, r19, r5", "add r15, r20, r6")
        e.bundle(f"addi r15, r15, {-t.kt * self.Mc}", "mov r10, r1", "mov r11, r2")

    def issue(self, gq: int, slot_reg: str):
        """Start the panels of global K step gq (moving to the next block when it starts one)."""
        if gq % self.ns == 0:
            self.e.bundle("addi r18, r18, 1")
            self.block_coords()
        self.slices(slot_reg)

    def slices(self, slot_reg: str):
        """Start this DSP's share of a K step's A and B panels, DDR -> GSM slot."""
        t, e = self.t, self.e
        e.bundle(f"add r19, {slot_reg}, r3", f"add r20, {slot_reg}, r4")
        e.bundle(f"dma {CH_DDR}, Pg[r19], A[r14, r10], {t.md}, {self.kta}, {self.Mc}, {self.k}, t clip")
        e.bundle(f"dma {CH_DDR}, Pg[r20], B[r11, r15], {self.ktb}, {t.nd}, {self.Nc}, {self.n}, clip",
                 f"addi r10, r10, {t.kt}", f"addi r11, r11, {t.kt}")

    def step_sig(self, b: int, s: int) -> tuple:
        """Signature of K step s of block b; equal signatures emit equal code (and form loops)."""
        ns, q = self.ns, b * self.ns + s
        if ns == 1:
            kind = "only"
        else:
            final = b == self.blocks - 1
            kind = "first" if s == 0 else ("final" if final else "last") if s == ns - 1 else "mid"
        chunk = ns > 1 and b > 0 and s < self.chunks
        return (kind, s == 0, q + 1 < self.total, q + 2 < self.total, (q + 2) % ns == 0, chunk)

    def block_steps(self, b: int) -> tuple:
        """Block b's step signatures as (signature, repeats) runs."""
        # A signature changes only after the first step, where chunking ends, and in the
        # last two steps (prefetch of the next block, the last step's kind).
        return _runs(lambda s: self.step_sig(b, s), self.ns, (1, self.chunks, self.ns - 2, self.ns - 1))

    def block_runs(self) -> list:
        """The blocks as (step runs, repeats) runs, in order."""
        # Block 0 writes nothing back; the last two blocks stop prefetching; all between are alike.
        return _runs(self.block_steps, self.blocks, (1, self.blocks - 2, self.blocks - 1))

    def step(self, kind: str, block_start: bool, next1: bool, next2: bool, advance: bool, chunk: bool):
        """One K step: sync on the next panels, start later loads, compute, rotate buffers."""
        t, e = self.t, self.e
        if block_start:
            # Keep the previous block's C position for its write-back, then locate this block.
            e.bundle(f"divi r19, r25, {self.bn}", f"remi r20, r25, {self.bn}", "mov r16, r29")
            e.bundle(f"muli r19, r19, {self.Mc}", f"muli r20, r20, {self.Nc}", "mov r30, r31")
            e.bundle("add r29, r19, r5", "add r31, r20, r6", "li r17, 0")
            e.bundle(f"addi r31, r31, {-t.kt * self.Mc}")
        if next1:
            e.bundle(f"wait {CH_DDR}")
            e.bundle("barrier")
        e.bundle(f"wait {CH_BS}")
        if next1:
            e.bundle("add r19, r8, r6")
            e.bundle(f"dma {CH_BS}, Bs[r13], Pg[r19], {t.kt}, {t.nd}, {t.nd}, {self.Nc}")
        if next2:
            self.issue(self.ns if advance else 1, "r9")
        if chunk:
            # The previous block's results leave in chunks, spread over this block's first steps.
            e.bundle(f"dma {CH_OUT}, C[r16, r30], Os[r17], {self.chunk_rows}, {t.nd}, {self.n}, {t.nd}, clip",
                     f"addi r16, r16, {self.chunk_rows}", f"addi r17, r17, {self.chunk_rows * t.nd}")
        if kind == "last":
            e.bundle(f"wait {CH_OUT}")
        elif kind in ("final", "only"):
            e.bundle(f"wait {CH_OUT}", "mov r16, r29", "mov r30, r31")
            e.bundle("li r17, 0")
        self.compute(kind)
        e.bundle("mov r7, r8", "mov r8, r9", "mov r9, r7")
        e.bundle("mov r12, r13", "mov r13, r12", "addi r25, r25, 1" if kind in ("last", "final", "only") else "")

    def compute(self, kind: str):
        """All micro-tiles of this DSP's block for one K step, A row groups double-buffered in SM."""
        t, e, mr = self.t, self.e, self.mr
        e.bundle("add r28, r7, r5", "li r26, 0", f"li r27, {t.kt * mr}")
        e.bundle(f"dma {CH_AS}, As[r26], Pg[r28], {t.kt}, {mr}, {mr}, {self.Mc}", "li r24, 0")
        groups = t.md // mr
        if groups > 1:
            label = e.open_loop("rg", groups - 1)
            e.bundle(f"wait {CH_AS}", f"addi r28, r28, {mr}")
            e.bundle(f"dma {CH_AS}, As[r27], Pg[r28], {t.kt}, {mr}, {mr}, {self.Mc}")
            self.row_group(kind)
            e.bundle("mov r26, r27", "mov r27, r26", f"addi r24, r24, {(mr - 1) * t.nd}")
            e.close_loop(label)
        e.bundle(f"wait {CH_AS}")
        self.row_group(kind)

    def row_group(self, kind: str):
        """The micro-tiles of one row group; the last K step then writes its rows back to DDR."""
        t, e = self.t, self.e
        e.bundle("mov r23, r12")
        tiles = t.nd // self.lanes
        label = e.open_loop("ct", tiles) if tiles > 1 else None
        self.micro(kind)
        if label:
            e.close_loop(label)
        if kind in ("final", "only"):
            e.bundle(f"dma {CH_OUT}, C[r16, r30], Os[r17], {self.mr}, {t.nd}, {self.n}, {t.nd}, clip",
                     f"addi r16, r16, {self.mr}", f"addi r17, r17, {self.mr * t.nd}")

    def micro(self, kind: str):
        """One micro-tile over the K step; accumulators live in Cs, the last step stores FP16 to Os."""
        t, nd = self.t, self.t.nd
        load_acc = kind in ("mid", "last", "final")
        out = "Os" if kind in ("last", "final", "only") else "Cs"
        micro_tile(self.e, rows=self.rows, lanes=self.lanes, groups=t.groups, unroll=t.unroll, k=t.kt,
                   left=Operand("As", "r26", self.mr), right=Operand("Bs", "r23", nd),
                   acc_in=Operand("Cs", "r24", nd) if load_acc else None, acc_out=Operand(out, "r24", nd),
                   ptrs=("r21", "r22"))


def _runs(f, n: int, change_points) -> list:
    """[(f(i), repeats)] over range(n), merged when equal; f may change only at change_points."""
    starts = sorted({0, *(c for c in change_points if 0 < c < n)})
    out: list = []
    for start, end in zip(starts, starts[1:] + [n]):
        value = f(start)
        if out and out[-1][0] == value:
            out[-1] = (value, out[-1][1] + end - start)
        else:
            out.append((value, end - start))
    return out

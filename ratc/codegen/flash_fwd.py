"""Fused (FlashAttention-style) attention forward: O = softmax(scale Q K^T) V, S never leaves chip.

Dao et al. 2022, Algorithm 1 (online softmax), laid out for the VMAC: every DSP owns whole
query tiles (Br rows) and streams its head's K_j, V_j tiles from DDR into SM itself,
double-buffered (no barriers; Br is chosen large enough that the K/V stream hides behind
compute). It computes the transposed scores S_ij^T = K_j Q_i^T (keys x queries), so a query
row's statistics are one vector lane: the running max m is a lane-wise `vmax` over key rows,
the rescale factor exp(m_old - m_new) and the row sum l are vectors, P_ij^T = exp(scale S^T - m)
is stored FP16 in AM as the right operand of O_i^T += V_j^T P_ij^T, and O_i^T is rescaled
lane-wise. At the end O = O^T r with r = 1/l by Newton's iteration x <- x (2 - l x) from
x0 = 1/seq (l is in [1, seq]: the max's term is exp(0) = 1), which converges quadratically
once x l <= 1: ceil(log2 seq) + 5 steps reach FP32 rounding from the worst start (l = 1).

Inputs in DDR: Q [heads*seq, d], K, V [kv_heads*seq, d] (FP16); the softmax scale Sc [1, 1]
and Ex = flash_forward_constants(seq) (FP32). Outputs: O [heads*seq, d] (FP16) and MR
[heads*seq, 2] (FP32): each row's max m of scale q.k and r = 1 / sum_j exp(scale q.k_j - m),
what the fused backward (ratc.codegen.flash) recomputes P = exp(scale S - m) r from.
exp is the backward's (ratc.codegen.flash.exp_steps); exp(m_old - m_new) has its argument
clamped at -N with vmax, so a running max that jumps by any amount still rescales to 0.
"""

from __future__ import annotations

import math

from ratc.codegen.flash import EXP_BASE, exp_steps
from ratc.codegen.kernel import Emitter, Kernel, check_kernel_size, peeled_loop, repeated
from ratc.codegen.microkernel import gemm_tile
from ratc.codegen.op_kernels import attention_tile_rows
from ratc.errors import RatcError

CH_Q, CH_KV, CH_O = 0, 1, 2
UNROLL = 2
# Registers: v0-v33 the micro-kernel's; v34-v35 m_old/alpha, v36-v39 exp temporaries and max
# chains, v44-v47 the negated row-sum partials, v48 m_new / N, v49 m_new, v52-v55 exp chains,
# v56-v63 constants (scale / N, 1 / N, -1, 1/2, -2, 1 / seq, -N, scale).
CONSTANTS = 6


def flash_forward_name(heads, seq, head_dim, kv_heads) -> str:
    """Kernel symbol of a fused attention-forward shape."""
    return f"flash_fwd_h{heads}_s{seq}_d{head_dim}_kv{kv_heads}_f16"


def flash_forward_constants(seq: int) -> list[list[float]]:
    """The Ex input: [1 / N, -1, 1/2, -2, 1 / seq, -N] (exp, Newton and clamp constants)."""
    return [[1 / EXP_BASE, -1.0, 0.5, -2.0, 1 / seq, -float(EXP_BASE)]]


def newton_steps(seq: int) -> int:
    """Newton steps for 1/l, l in [1, seq], from 1/seq to FP32 rounding (error e -> e^2)."""
    return math.ceil(math.log2(seq)) + 5


def flash_forward_footprint(br: int, bc: int, d: int) -> dict[str, int]:
    """Bytes per DSP (SM, AM): two K_j^T and V_j slots; two Q_i^T, S^T, P^T, O^T, its FP16 copy, row terms."""
    sm = 2 * 2 * (2 * d * bc)
    am = 2 * 2 * d * br + 4 * bc * br + 2 * bc * br + 4 * d * br + 2 * d * br + 4 * 4 * br + 4 * (CONSTANTS + 1)
    return {"sm": sm, "am": am}


def generate_flash_forward(platform, heads: int, seq: int, head_dim: int, kv_heads: int | None = None,
                           br: int | None = None, bc: int | None = None) -> Kernel:
    """O, m and r of one sequence's attention on one cluster, the s x s scores kept on chip."""
    kv_heads = heads if kv_heads is None else kv_heads
    check_kernel_size(f"fused attention forward, {heads} heads, sequence {seq}, head dim {head_dim}",
                      2 * heads * seq * seq * head_dim)
    return _FlashFwdGen(platform, heads, seq, head_dim, kv_heads, br, bc).kernel()


class _FlashFwdGen:
    """Emits the fused forward. Scalar registers: r0 DSP id; r3 this DSP's tile (head-major);
    r4 its first Q row (past every head when the tile does not exist: loads zeros, stores
    nothing); r5 the next K/V row; r6/r7 the current/other K^T slot, r8/r9 the V slots;
    r13-r17 GEMM pointers; r18-r23 vector-loop pointers and scratch; r24/r25 the current/next
    Q^T buffer; r26 the next tile's first Q row, r27 its index."""

    def __init__(self, platform, heads, seq, d, kv_heads, br, bc):
        vl = platform.vliw
        self.platform, self.H, self.S, self.d, self.Hkv = platform, heads, seq, d, kv_heads
        self.rows, self.lanes, self.mr = vl.vmac_rows, vl.vector_lanes, attention_tile_rows(vl)
        self.ndsp = platform.cluster.dsps
        where = f"fused attention forward h={heads} s={seq} d={d} kv={kv_heads}"
        problems = [f"{name}={value} must be a positive integer" for name, value in (("br", br), ("bc", bc))
                    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1)]
        if min(heads, seq, d, kv_heads) < 1 or heads % kv_heads:
            problems.append("heads must be a positive multiple of kv_heads")
        align = math.lcm(self.lanes, self.mr)
        if d % align:
            problems.append(f"head_dim must be a multiple of {align}")
        if problems:
            raise RatcError(f"{where}: " + "; ".join(problems))
        self.bc = bc if bc is not None else next((c for c in (2 * self.mr, self.mr) if seq % c == 0 and
                                                  flash_forward_footprint(align, c, d)["sm"] <= platform.dsp.sm_size),
                                                 self.mr)
        if self.bc % self.mr or seq % self.bc:
            problems.append(f"bc={self.bc} must divide seq and be a multiple of {self.mr}")
        self.br = None if problems else br if br is not None else self._choose()
        if not problems and (self.br is None or self.br % self.lanes or seq % self.br):
            problems.append(f"br={br} must divide seq, be a multiple of {self.lanes}, and fit AM")
        if problems:
            raise RatcError(f"{where}: " + "; ".join(problems))
        fp = flash_forward_footprint(self.br, self.bc, d)
        if fp["sm"] > platform.dsp.sm_size or fp["am"] > platform.dsp.am_size:
            raise RatcError(f"{where}: tiles br={self.br} bc={self.bc} need {fp['sm']} B of SM and {fp['am']} B "
                            f"of AM (capacities {platform.dsp.sm_size}, {platform.dsp.am_size})")
        self.nq, self.nk = seq // self.br, seq // self.bc
        self.ndsp = min(self.ndsp, heads * self.nq)     # a DSP without a query tile would stream K, V for nothing
        self.waves = math.ceil(heads * self.nq / self.ndsp)
        self.e = Emitter()

    def _choose(self) -> int | None:
        """Br with the lowest estimate of waves x max(K/V stream, VMAC time) per query tile.

        Each query tile streams its head's K and V once on its DSP's share of DDR, so small
        tiles are DDR-bound; large ones leave DSPs idle in the last wave.
        """
        S, d, bc, p = self.S, self.d, self.bc, self.platform
        best = None
        for br in (self.lanes * k for k in (1, 2, 4, 8)):
            fp = flash_forward_footprint(br, bc, d)
            if S % br or fp["am"] > p.dsp.am_size:     # (SM holds K, V tiles only: checked by the caller)
                continue
            waves = math.ceil(self.H * (S // br) / self.ndsp)
            # ~1.15x the GEMMs' MACs, ~18 VMAC ops per probability vector (exp, max, row sum)
            vmac = (2.3 * br * S * d / (self.rows * self.lanes) + 18 * br * S / self.lanes) / p.dsp.clock
            ddr = 4 * S * d / (p.cluster.ddr_bandwidth / self.ndsp)
            key = (waves * max(vmac, ddr), -br)
            if best is None or key < best[0]:
                best = (key, br)
        return best[1] if best else None

    def kernel(self) -> Kernel:
        """Useful MACs: the two GEMMs'; compulsory DDR bytes: Q, K, V, constants in, O and MR out."""
        h, s, d, hk = self.H, self.S, self.d, self.Hkv
        min_bytes = 2 * (2 * h * s * d + 2 * hk * s * d) + 8 * h * s + 4 * (CONSTANTS + 1)
        return Kernel(flash_forward_name(h, s, d, hk), self.emit(), self.platform, 2 * h * s * s * d, min_bytes,
                      {"br": self.br, "bc": self.bc, "dsps": self.ndsp})

    def buffers(self) -> list[tuple]:
        H, S, d, Hkv, br, bc = self.H, self.S, self.d, self.Hkv, self.br, self.bc
        return [("ddr", "Q", "f16", (H * S, d)), ("ddr", "K", "f16", (Hkv * S, d)), ("ddr", "V", "f16", (Hkv * S, d)),
                ("ddr", "Sc", "f32", (1, 1)), ("ddr", "Ex", "f32", (1, CONSTANTS)),
                ("ddr", "O", "f16", (H * S, d)), ("ddr", "MR", "f32", (H * S, 2)),
                ("sm", "Kt", "f16", (2, d, bc)), ("sm", "Vs", "f16", (2, bc, d)),
                ("am", "Qt", "f16", (2, d, br)), ("am", "ST", "f32", (bc, br)), ("am", "PT", "f16", (bc, br)),
                ("am", "OT", "f32", (d, br)), ("am", "Oh", "f16", (d, br)),
                ("am", "Ma", "f32", (br,)), ("am", "NLa", "f32", (br,)), ("am", "Ra", "f32", (br,)),
                ("am", "Mo", "f32", (br,)),
                ("am", "Exa", "f32", (1, CONSTANTS + 1))]

    def emit(self):
        e = self.e
        e.bundle(f"dma {CH_Q}, Exa[0, 0], Ex[0, 0], 1, {CONSTANTS}, {CONSTANTS + 1}, {CONSTANTS}")
        e.bundle(f"dma {CH_Q}, Exa[0, {CONSTANTS}], Sc[0, 0], 1, 1, {CONSTANTS + 1}, 1", "mov r3, r0")
        e.bundle(f"wait {CH_Q}")
        for i in range(CONSTANTS + 1):
            e.bundle(f"vbc v{57 + i}, Exa[{i}]")
        e.bundle("vmul v56, v63, v57", "li r6, 0", f"li r7, {self.d * self.bc}")   # scale / N; K, V slots
        e.bundle("li r8, 0", f"li r9, {self.bc * self.d}", "li r24, 0")
        e.bundle(f"li r25, {self.d * self.br}", "mov r27, r3")
        self.prefetch_tile("r24", "r6", "r8")
        e.bundle("mov r4, r26")
        repeated(e, "qt", self.waves, self.query_tile)
        e.bundle(f"wait {CH_O}")
        return e.program(flash_forward_name(self.H, self.S, self.d, self.Hkv), self.ndsp, self.buffers(),
                         self.platform)

    def query_tile(self):
        """One query tile (its Q_i^T and first K, V tiles already on the way): every key tile,
        the last one prefetching the next query tile's, then O, m, r out."""
        e = self.e
        e.bundle(f"wait {CH_Q}")
        peeled_loop(e, "kt", self.nk, self.key_tile)
        self.finish()
        e.bundle("mov r4, r26", "mov r24, r25", "mov r25, r24")

    def prefetch_tile(self, qslot: str, kslot: str, vslot: str):
        """Start loading tile r27's Q^T (into Qt at qslot) and first K_j^T, V_j; r26 = its first Q row,
        r5 its K/V row (a tile past the last is past every head: zeros, as a clipped DMA reads)."""
        e, S, d, br = self.e, self.S, self.d, self.br
        e.bundle(f"divi r22, r27, {self.nq}", f"remi r23, r27, {self.nq}")
        e.bundle(f"muli r26, r22, {S}", f"muli r23, r23, {br}", f"divi r22, r22, {self.H // self.Hkv}")
        e.bundle("add r26, r26, r23", f"muli r5, r22, {S}")
        e.bundle(f"dma {CH_Q}, Qt[{qslot}], Q[r26, 0], {br}, {d}, {br}, {d}, t clip")
        self.kv_load(kslot, vslot)

    def kv_load(self, kslot: str, vslot: str):
        """K_j^T and V_j of the KV head, DDR -> SM slots (r5 the key row, advanced)."""
        d, bc = self.d, self.bc
        self.e.bundle(f"dma {CH_KV}, Kt[{kslot}], K[r5, 0], {bc}, {d}, {bc}, {d}, t clip")
        self.e.bundle(f"dma {CH_KV}, Vs[{vslot}], V[r5, 0], {bc}, {d}, {d}, {d}, clip", f"addi r5, r5, {bc}")

    def gemm(self, m, n, k, left, right, out, accumulate):
        """A local GEMM on resident tiles (see microkernel.gemm_tile)."""
        gemm_tile(self.e, rows=self.rows, lanes=self.lanes, groups=self.mr // self.rows, unroll=UNROLL, m=m, n=n,
                  k=k, left=left, right=right, out=out, accumulate=accumulate,
                  regs=("r13", "r14", "r15", "r16", "r17"))

    def key_tile(self, first: bool, last: bool):
        """S^T = K_j Q_i^T; the online softmax per query vector; O^T (+)= V_j^T P^T."""
        e, d, br, bc = self.e, self.d, self.br, self.bc
        e.bundle(f"wait {CH_KV}")
        if not last:
            self.kv_load("r7", "r9")
        else:
            e.bundle(f"addi r27, r3, {self.ndsp}")
            self.prefetch_tile("r25", "r7", "r9")
        self.gemm(bc, br, d, ("Kt", "r6", bc), ("Qt", "r24", br), ("ST", 0, br), False)
        e.bundle("li r18, 0")
        label = e.open_loop("qv", br // self.lanes) if br > self.lanes else None
        self.softmax_step(first)
        e.bundle(f"addi r18, r18, {self.lanes}")
        if label:
            e.close_loop(label)
        self.gemm(d, br, bc, ("Vs", "r8", d), ("PT", 0, br), ("OT", 0, br), not first)
        e.bundle("mov r6, r7", "mov r7, r6")
        e.bundle("mov r8, r9", "mov r9, r8")

    def softmax_step(self, first: bool):
        """For the query vector at lane offset r18: m_new, alpha, P^T column block, l, O^T rescale."""
        e, br, bc = self.e, self.br, self.bc
        self.row_max()
        e.bundle("vmul v49, v36, v63")                       # this tile's max of scale S
        if not first:
            e.bundle("vld v34, Ma[r18]", "vld v44, NLa[r18]")
            e.bundle("vmax v49, v49, v34")
            e.bundle("vsub v34, v34, v49")                   # m_old - m_new <= 0
            e.bundle("vmax v34, v34, v62")                   # clamped at -N: exp -> 0, not p(y < -1)^N
            e.bundle("vmul v34, v34, v57")
            for step in exp_steps()[2:]:
                e.bundle(step.format(y="v34", t="v35"))
            e.bundle("vmul v44, v44, v34")
        else:
            e.bundle("vsub v44, v44, v44")
        e.bundle("vst v49, Ma[r18]", "vmul v48, v49, v57")
        for r in range(1, 4):
            e.bundle(f"vsub v{44 + r}, v{44 + r}, v{44 + r}")
        self.probabilities()
        # -l = nl0 + nl1 + nl2 + nl3, with a + b = a - (-1) b (the ISA has no vadd)
        e.bundle("vmul v45, v45, v58")
        e.bundle("vmul v47, v47, v58")
        e.bundle("vsub v44, v44, v45")
        e.bundle("vsub v46, v46, v47")
        e.bundle("vmul v46, v46, v58")
        e.bundle("vsub v44, v44, v46")
        e.bundle("vst v44, NLa[r18]")
        if not first:
            self.scale_rows("OT", "OT", "v34")

    def row_max(self):
        """v36 = lane-wise max over the bc key rows of S^T (four chains, then combined)."""
        e, br, bc = self.e, self.br, self.bc
        e.bundle("mov r19, r18")
        e.bundle("vld v36, ST[r19]", f"vld v37, ST[r19+{br}]")
        e.bundle(f"vld v38, ST[r19+{2 * br}]", f"vld v39, ST[r19+{3 * br}]", f"addi r19, r19, {4 * br}")
        if bc > 4:
            label = e.open_loop("mx", bc // 4 - 1)
            e.bundle("vld v52, ST[r19]", f"vld v53, ST[r19+{br}]")
            e.bundle(f"vld v54, ST[r19+{2 * br}]", f"vld v55, ST[r19+{3 * br}]", f"addi r19, r19, {4 * br}")
            for r in range(4):
                e.bundle(f"vmax v{36 + r}, v{36 + r}, v{52 + r}")
            e.close_loop(label)
        e.bundle("vmax v36, v36, v37")
        e.bundle("vmax v38, v38, v39")
        e.bundle("vmax v36, v36, v38")

    def probabilities(self):
        """P^T = exp(scale S^T - m_new), four key rows at a time into PT; v44-v47 -= P."""
        e, br, bc = self.e, self.br, self.bc
        e.bundle("mov r19, r18")
        label = e.open_loop("ex", bc // 4)
        e.bundle("vld v52, ST[r19]", f"vld v53, ST[r19+{br}]")
        e.bundle(f"vld v54, ST[r19+{2 * br}]", f"vld v55, ST[r19+{3 * br}]")
        for step in exp_steps():
            for r in range(4):
                e.bundle(step.format(y=f"v{52 + r}", t=f"v{36 + r}", off="v48"))
        for r in range(4):
            e.bundle(f"vsub v{44 + r}, v{44 + r}, v{52 + r}")
        e.bundle("vst v52, PT[r19]", f"vst v53, PT[r19+{br}]")
        e.bundle(f"vst v54, PT[r19+{2 * br}]", f"vst v55, PT[r19+{3 * br}]", f"addi r19, r19, {4 * br}")
        e.close_loop(label)

    def scale_rows(self, src: str, dst: str, factor: str):
        """dst[:, r18 lanes] = src[:, r18 lanes] * factor over the d rows of O^T, four at a time."""
        e, br = self.e, self.br
        e.bundle("mov r19, r18")
        label = e.open_loop("sc", self.d // 4)
        e.bundle(f"vld v52, {src}[r19]", f"vld v53, {src}[r19+{br}]")
        e.bundle(f"vld v54, {src}[r19+{2 * br}]", f"vld v55, {src}[r19+{3 * br}]")
        for r in range(4):
            e.bundle(f"vmul v{52 + r}, v{52 + r}, {factor}")
        e.bundle(f"vst v52, {dst}[r19]", f"vst v53, {dst}[r19+{br}]")
        e.bundle(f"vst v54, {dst}[r19+{2 * br}]", f"vst v55, {dst}[r19+{3 * br}]", f"addi r19, r19, {4 * br}")
        e.close_loop(label)

    def finish(self):
        """r = 1/l by Newton, O = O^T r (FP16), then O, m, r to DDR and the next tile."""
        e, d, br = self.e, self.d, self.br
        e.bundle(f"wait {CH_O}", "li r18, 0")     # the previous tile's Oh and Ra have left
        label = e.open_loop("nr", br // self.lanes) if br > self.lanes else None
        e.bundle("vld v44, NLa[r18]", "vmul v35, v58, v58")
        e.bundle("vmul v35, v35, v61")                       # x0 = 1 / seq
        for _ in range(newton_steps(self.S)):
            e.bundle("vmul v36, v44, v35")                   # -l x
            e.bundle("vsub v36, v36, v60")                   # 2 - l x
            e.bundle("vmul v35, v35, v36")
        e.bundle("vst v35, Ra[r18]", "vld v49, Ma[r18]")
        e.bundle("vst v49, Mo[r18]")          # the next tile rewrites Ma while this tile's m leaves
        self.scale_rows("OT", "Oh", "v35")
        e.bundle(f"addi r18, r18, {self.lanes}")
        if label:
            e.close_loop(label)
        e.bundle(f"dma {CH_O}, O[r4, 0], Oh[0], {d}, {br}, {d}, {br}, t clip")
        e.bundle(f"dma {CH_O}, MR[r4, 0], Mo[0], {br}, 1, 2, 1, clip")
        e.bundle(f"dma {CH_O}, MR[r4, 1], Ra[0], {br}, 1, 2, 1, clip", f"addi r3, r3, {self.ndsp}")

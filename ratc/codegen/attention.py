"""Attention-backward code generator (the review's Algorithm 1) and a DDR-staged baseline.

Inputs in DDR: Q, dO [heads*seq, d]; K, V [kv_heads*seq, d] (FP16); the forward pass's
probabilities P [heads*seq, seq] (FP16); D = rowsum(dO * O) [heads*seq, 1] and the
softmax scale Sc [1, 1] (FP32). Outputs (FP16, accumulated in FP32): dQ [heads*seq, d],
dK and dV [kv_heads, seq*d]. With S = scale * Q K^T:

    dP = dO V^T,  dS = scale * P * (dP - D),  dV = P^T dO,  dQ = dS K,  dK = dS^T Q.

Schedule: query-outer, key-inner. Each DSP owns one query tile (Br rows) per wave and
keeps Q_i, dO_i (AM), dO_i^T (SM), D_i and the dQ_i accumulator resident. For each key
tile j the DSPs load K_j, V_j cooperatively into GSM (double-buffered) and copy them to
AM (V transposed), load P_ij from DDR, compute dP, dS in AM, stage P, dS, dS^T in SM as
left operands, and reduce their dV_j, dK_j partials into FP32 accumulators in GSM with
accumulating DMAs (issued during the next tile, from double-buffered partials); GSM holds
dK, dV of the whole key/value head until it is written back. The DDR-staged baseline runs the same schedule but, as separate kernels would,
writes dP and dS to DDR and reads them back before their consumers.
"""

from __future__ import annotations

import math

from ratc.codegen.kernel import Emitter, Kernel, check_kernel_size, peeled_loop
from ratc.codegen.microkernel import gemm_tile
from ratc.codegen.op_kernels import attention_tile_rows
from ratc.errors import RatcError

CH_Q, CH_P, CH_KV, CH_G, CH_L, CH_R, CH_O, CH_Z, CH_X = range(9)
ZERO_CHUNK = 1024  # FP32 elements zeroed or written back per DMA (4 KiB of AM)
UNROLL = 2


def attention_name(heads, seq, head_dim, kv_heads, ddr_staged=False) -> str:
    """Kernel symbol of an attention-backward shape."""
    return f"attn_bwd_h{heads}_s{seq}_d{head_dim}_kv{kv_heads}_f16" + ("_ddr" if ddr_staged else "")


def generate_attention_backward(platform, heads: int, seq: int, head_dim: int, kv_heads: int | None = None,
                                ddr_staged: bool = False, br: int | None = None, bc: int | None = None) -> Kernel:
    """dQ, dK, dV of one sequence's attention on one cluster (memory-resident, or the DDR-staged baseline)."""
    kv_heads = heads if kv_heads is None else kv_heads
    check_kernel_size(f"attention backward, {heads} heads, sequence {seq}, head dim {head_dim}",
                      4 * heads * seq * seq * head_dim)
    return _AttnGen(platform, heads, seq, head_dim, kv_heads, ddr_staged, br, bc).kernel()


def eq1_footprint(br: int, bc: int, d: int) -> dict[str, int]:
    """Bytes per DSP (SM, AM) of the kernel's tiles, the review's Eq. 1 made concrete."""
    sm = 2 * (d * br + 3 * br * bc)
    am = 2 * (2 * br * d + bc * d + d * bc + 2 * br * bc + br * bc) + 4 * (br + 2 * br * d + br * bc + 4 * bc * d
                                                                         + ZERO_CHUNK + 1)
    return {"sm": sm, "am": am}


class _AttnGen:
    """Emits the attention-backward program. Register roles:

    r0 DSP id; r1 first K/V row of the KV head; r2 first Q row of the head; r3 this DSP's
    query tile; r4 its first row (pushed past every head when the tile does not exist);
    r5 next K/V slice row; r6 next P column; r7, r8 GSM K/V slots; r9 this DSP's slice rows;
    r10, r11 P buffers; r12 the key tile's offset in the dK/dV accumulators, r31 the previous
    one; r13-r17 GEMM pointers; r18-r21 softmax-backward pointers; r22, r23 scratch;
    r24, r26 partial-sum buffers; r25 this DSP's dP/dS staging rows; r27 its share of the
    accumulators; r28 KV head; r29, r30 dQ accumulators (current, other).
    """

    P_COLS, GEMMS = 1, 4  # P read per query row (columns per key), GEMMs per tile: for ranking tiles

    def footprint(self, br: int, bc: int, d: int) -> dict[str, int]:
        """SM and AM bytes per DSP of (br, bc) tiles."""
        return eq1_footprint(br, bc, d)

    def __init__(self, platform, heads, seq, d, kv_heads, staged, br, bc):
        vl = platform.vliw
        self.platform, self.H, self.S, self.d, self.Hkv, self.staged = platform, heads, seq, d, kv_heads, staged
        self.rows, self.lanes = vl.vmac_rows, vl.vector_lanes
        self.mr = attention_tile_rows(vl)
        self.groups = self.mr // self.rows
        problems = [f"{name}={value} must be a positive integer" for name, value in (("br", br), ("bc", bc))
                    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1)]
        if problems:
            raise RatcError(f"attention backward h={heads} s={seq} d={d} kv={kv_heads}: " + "; ".join(problems))
        if min(heads, seq, d, kv_heads) < 1 or heads % kv_heads:
            problems.append("heads must be a positive multiple of kv_heads")
        if d % self.lanes or d % self.mr:
            problems.append(f"head_dim must be a multiple of {math.lcm(self.lanes, self.mr)}")
        self.bc = self.lanes if bc is None else bc
        if self.bc % self.lanes or self.bc % self.mr or seq % self.bc:
            problems.append(f"bc={self.bc} must divide seq and be a multiple of {math.lcm(self.lanes, self.mr)}")
        chosen = None if problems else self._choose(br)
        if chosen is None and not problems:
            problems.append(f"br={br} must divide seq, be a multiple of {self.mr}, and fit SM and AM")
        elif chosen is not None:
            self.br, self.ndsp = chosen
        if problems:
            raise RatcError(f"attention backward h={heads} s={seq} d={d} kv={kv_heads}: " + "; ".join(problems))
        fp = self.footprint(self.br, self.bc, d)
        if fp["sm"] > platform.dsp.sm_size or fp["am"] > platform.dsp.am_size:
            raise RatcError(f"attention tiles br={self.br} bc={self.bc} d={d} need {fp['sm']} B of SM and "
                            f"{fp['am']} B of AM (capacities {platform.dsp.sm_size}, {platform.dsp.am_size})")
        self.nq, self.nk = seq // self.br, seq // self.bc
        self.waves = math.ceil(self.nq / self.ndsp)
        self.lrows = math.ceil(self.bc / self.ndsp)
        self.lr = self.lrows * self.ndsp
        self.zl = ZERO_CHUNK * math.ceil(seq * d / self.ndsp / ZERO_CHUNK)
        self.big = (heads + 1) * seq  # a query row past every head: idle DSPs load zeros, store nothing
        gsm = 2 * 2 * self.lr * d * 2 + 2 * seq * d * 4
        if gsm > platform.cluster.gsm_size:
            raise RatcError(f"attention backward s={seq} d={d} needs {gsm} B of GSM (dK, dV of a head stay "
                            f"resident), capacity {platform.cluster.gsm_size}")
        self.e = Emitter()

    def _choose(self, br_fixed: int | None) -> tuple[int, int] | None:
        """(Br, DSPs used) with the lowest estimate of max(DDR time, VMAC time).

        Query tiles beyond the last real one still move (zero-filled) bytes, so on this
        DDR-bound kernel fewer DSPs that divide the tile count can beat all of them.
        """
        S, d, bc, p = self.S, self.d, self.bc, self.platform
        macs_per_cycle = self.rows * self.lanes
        best = None
        for br in ([br_fixed] if br_fixed is not None else (self.mr, 2 * self.mr, 4 * self.mr)):
            if S % br or br % self.mr:
                continue
            fp = self.footprint(br, bc, d)
            if br_fixed is None and (fp["sm"] > p.dsp.sm_size or fp["am"] > p.dsp.am_size):
                continue  # a fixed br that does not fit is reported with its footprint below
            nq = S // br
            for ndsp in sorted({n for n in range(1, p.cluster.dsps + 1) if nq % n == 0} | {p.cluster.dsps}):
                if ndsp > nq:
                    continue
                waves = math.ceil(nq / ndsp)
                slots = waves * ndsp
                kv_rows = waves * (S // bc) * ndsp * math.ceil(bc / ndsp)
                ddr = 2 * slots * br * (self.P_COLS * S + 3 * d) + 4 * slots * br + 4 * kv_rows * d + 4 * S * d
                # ~1.6x: micro-kernel prologues, softmax backward and exposed K/V copies per key
                # tile (measured on the timing mode, docs/kernels.md); only used to rank choices.
                vmac = 1.6 * waves * self.GEMMS * br * S * d / macs_per_cycle
                est = max(ddr / p.cluster.ddr_bandwidth, vmac / p.dsp.clock)
                key = (est, -ndsp, -br)
                if best is None or key < best[0]:
                    best = (key, br, ndsp)
        return best[1:] if best else None

    def kernel(self) -> Kernel:
        """The generated kernel: useful MACs are the GEMMs', compulsory DDR bytes every input
        (P, or the fused kernel's m, r) read and every output written once."""
        h, s, d, hk = self.H, self.S, self.d, self.Hkv
        rows = 2 * s * s if self.P_COLS else 8 * s     # a head's P (FP16), or its m, r (FP32)
        min_bytes = 2 * (2 * h * s * d + 2 * hk * s * d) + h * rows + 4 * h * s + 2 * (h * s * d + 2 * hk * s * d)
        return Kernel(self.name(), self.emit(), self.platform, self.GEMMS * h * s * s * d, min_bytes, self.options())

    def options(self) -> dict:
        return {"br": self.br, "bc": self.bc, "dsps": self.ndsp, "ddr_staged": self.staged}

    def emit(self):
        e, S, d, br, bc = self.e, self.S, self.d, self.br, self.bc
        H, Hkv = self.H, self.Hkv
        e.bundle(f"muli r9, r0, {self.lrows}", f"muli r27, r0, {self.zl}", f"muli r25, r0, {br}")
        e.bundle("li r1, 0", "li r28, 0", "li r29, 0")
        e.bundle(f"li r30, {br * d}", "li r7, 0", f"li r8, {self.lr}")
        # Buffer pairs rotate across waves and heads too: a new wave's first K/V slices must not
        # land in the GSM slot other DSPs may still copy from (the previous tile's).
        e.bundle("li r10, 0", f"li r11, {br * bc}", "li r24, 0")
        e.bundle(f"li r26, {bc * d}")
        e.bundle("vsub v0, v0, v0", "li r22, 0")
        label = e.open_loop("zf", ZERO_CHUNK // self.lanes)
        e.bundle("vst v0, Zero[r22]", f"addi r22, r22, {self.lanes}")
        e.close_loop(label)
        e.bundle(f"dma {CH_X}, Sca[0, 0], Sc[0, 0], 1, 1, 1, 1")
        e.bundle(f"wait {CH_X}", "li r2, 0")
        e.bundle("vbc v63, Sca[0]")
        kv = e.open_loop("kvh", Hkv) if Hkv > 1 else None
        self.share_loop(lambda col: [f"dma {CH_Z}, dKg[0, {col}], Zero[0], 1, {ZERO_CHUNK}, {S * d}, {ZERO_CHUNK}, clip",
                                     f"dma {CH_Z}, dVg[0, {col}], Zero[0], 1, {ZERO_CHUNK}, {S * d}, {ZERO_CHUNK}, clip"])
        e.bundle(f"wait {CH_Z}")
        e.bundle("barrier")
        group = H // Hkv
        hl = e.open_loop("head", group) if group > 1 else None
        e.bundle("mov r3, r0")
        wl = e.open_loop("wave", self.waves) if self.waves > 1 else None
        self.wave()
        if wl:
            e.close_loop(wl)
        e.bundle(f"addi r2, r2, {S}")
        if hl:
            e.close_loop(hl)
        e.bundle(f"wait {CH_R}")
        e.bundle("barrier")
        self.share_loop(lambda col: [f"dma {CH_Z}, dK[r28, {col}], dKg[0, {col}], 1, {ZERO_CHUNK}, {S * d}, "
                                     f"{S * d}, clip",
                                     f"dma {CH_Z}, dV[r28, {col}], dVg[0, {col}], 1, {ZERO_CHUNK}, {S * d}, "
                                     f"{S * d}, clip"])
        e.bundle(f"wait {CH_Z}")
        e.bundle("barrier")
        e.bundle(f"wait {CH_O}", f"addi r1, r1, {S}", "addi r28, r28, 1")
        if kv:
            e.close_loop(kv)
        return e.program(self.name(), self.ndsp, self.buffers(), self.platform)

    def share_loop(self, dmas) -> None:
        """This DSP's share of a head's seq*d accumulator, ZERO_CHUNK elements per step."""
        e = self.e
        e.bundle("mov r22, r27")
        label = e.open_loop("sh", self.zl // ZERO_CHUNK) if self.zl > ZERO_CHUNK else None
        first, second = dmas("r22")
        e.bundle(first)
        e.bundle(second, f"addi r22, r22, {ZERO_CHUNK}")
        if label:
            e.close_loop(label)

    def buffers(self) -> list[tuple]:
        H, S, d, Hkv, br, bc = self.H, self.S, self.d, self.Hkv, self.br, self.bc
        out = [
            ("ddr", "Q", "f16", (H * S, d)), ("ddr", "dO", "f16", (H * S, d)),
            ("ddr", "K", "f16", (Hkv * S, d)), ("ddr", "V", "f16", (Hkv * S, d)),
            ("ddr", "P", "f16", (H * S, S)), ("ddr", "D", "f32", (H * S, 1)), ("ddr", "Sc", "f32", (1, 1)),
            ("ddr", "dQ", "f16", (H * S, d)), ("ddr", "dK", "f16", (Hkv, S * d)), ("ddr", "dV", "f16", (Hkv, S * d)),
        ]
        if self.staged:
            out += [("ddr", "dPx", "f16", (self.ndsp * br, bc)), ("ddr", "dSx", "f16", (self.ndsp * br, bc))]
        out += [("gsm", "Kg", "f16", (2 * self.lr, d)), ("gsm", "Vg", "f16", (2 * self.lr, d)),
                ("gsm", "dKg", "f32", (1, S * d)), ("gsm", "dVg", "f32", (1, S * d))]
        out += [
            ("sm", "dOt", "f16", (d, br)), ("sm", "Ps", "f16", (br, bc)), ("sm", "dSs", "f16", (br, bc)),
            ("sm", "dSt", "f16", (bc, br)),
            ("am", "Qa", "f16", (br, d)), ("am", "dOa", "f16", (br, d)), ("am", "Da", "f32", (br, 1)),
            ("am", "dQa", "f32", (2, br, d)), ("am", "Ka", "f16", (bc, d)), ("am", "Va", "f16", (d, bc)),
            ("am", "Pa", "f16", (2, br, bc)), ("am", "Pd", "f32", (br, bc)), ("am", "dSa", "f16", (br, bc)),
            ("am", "Part", "f32", (2, bc, d)), ("am", "Part2", "f32", (2, bc, d)), ("am", "Zero", "f32", (ZERO_CHUNK,)),
            ("am", "Sca", "f32", (1, 1)),
        ]
        return out

    def wave(self):
        """One query tile per DSP: resident loads, then every key tile, then dQ write-back."""
        e, S, d, br, bc = self.e, self.S, self.d, self.br, self.bc
        e.bundle(f"divi r22, r3, {self.nq}", f"muli r23, r3, {br}")
        e.bundle(f"muli r22, r22, {self.big}", "add r23, r23, r2")
        e.bundle("add r4, r23, r22", "li r6, 0")
        e.bundle(f"dma {CH_Q}, Qa[0], Q[r4, 0], {br}, {d}, {d}, {d}, clip")
        e.bundle(f"dma {CH_Q}, dOa[0], dO[r4, 0], {br}, {d}, {d}, {d}, clip", "add r5, r1, r9")
        e.bundle(f"dma {CH_Q}, Da[0], D[r4, 0], {br}, 1, 1, 1, clip", "add r22, r7, r9", "li r12, 0")
        self.first_probs()
        self.kv_slices()
        e.bundle(f"wait {CH_Q}")
        self.resident_copies()
        e.bundle(f"wait {CH_L}")
        peeled_loop(e, "kt", self.nk, self.key_tile)
        self.reduce()
        # dQ_i leaves while the next wave computes into the other accumulator.
        e.bundle(f"wait {CH_O}")
        e.bundle(f"dma {CH_O}, dQ[r4, 0], dQa[r29], {br}, {d}, {d}, {d}, clip", f"addi r3, r3, {self.ndsp}")
        e.bundle("mov r29, r30", "mov r30, r29")

    def name(self) -> str:
        return attention_name(self.H, self.S, self.d, self.Hkv, self.staged)

    def first_probs(self):
        """Start loading the wave's first P_ij (into slot r10)."""
        self.next_probs("r10")

    def next_probs(self, slot: str = "r11"):
        """Start loading the next key tile's P_ij from DDR into a Pa slot (P columns advance in r6)."""
        self.e.bundle(f"dma {CH_P}, Pa[{slot}], P[r4, r6], {self.br}, {self.bc}, {self.bc}, {self.S}, clip",
                      f"addi r6, r6, {self.bc}")

    def resident_copies(self):
        """On-chip copies of the wave's resident tiles: dO_i^T into SM as a left operand."""
        self.e.bundle(f"dma {CH_L}, dOt[0], dOa[0], {self.br}, {self.d}, {self.br}, {self.d}, t")

    def kv_copies(self):
        """K_j and V_j^T from the GSM slot into AM."""
        e, d, bc = self.e, self.d, self.bc
        e.bundle(f"dma {CH_G}, Ka[0], Kg[r7, 0], {bc}, {d}, {d}, {d}")
        e.bundle(f"dma {CH_G}, Va[0], Vg[r7, 0], {bc}, {d}, {bc}, {d}, t")

    def probs_ready(self):
        """Wait for P_ij (in AM) and stage it into SM as the dV GEMM's left operand."""
        self.e.bundle(f"wait {CH_P}")
        self.stage_probs()

    def stage_probs(self):
        """Copy P_ij from AM (slot r10) into SM."""
        self.e.bundle(f"dma {CH_L}, Ps[0], Pa[r10], {self.br}, {self.bc}, {self.bc}, {self.bc}")

    def probs_computed(self):
        """Before K_j, V_j are waited for: nothing here, P_ij came from DDR."""

    def kv_slices(self):
        """This DSP's rows of the next K and V tiles, DDR -> GSM slot (r22 = slot row + my rows)."""
        e, d = self.e, self.d
        e.bundle(f"dma {CH_KV}, Kg[r22, 0], K[r5, 0], {self.lrows}, {d}, {d}, {d}, clip")
        e.bundle(f"dma {CH_KV}, Vg[r22, 0], V[r5, 0], {self.lrows}, {d}, {d}, {d}, clip", f"addi r5, r5, {self.bc}")

    def gemm(self, m, n, k, left, right, out, accumulate):
        """A local GEMM on resident tiles (see microkernel.gemm_tile)."""
        gemm_tile(self.e, rows=self.rows, lanes=self.lanes, groups=self.groups, unroll=UNROLL, m=m, n=n, k=k,
                  left=left, right=right, out=out, accumulate=accumulate, regs=("r13", "r14", "r15", "r16", "r17"))

    def key_tile(self, first: bool, last: bool):
        e, S, d, br, bc = self.e, self.S, self.d, self.br, self.bc
        e.bundle(f"wait {CH_KV}")
        e.bundle("barrier")
        self.kv_copies()
        if not first:
            # The previous tile's partials queue behind this tile's K/V copy on the GSM port.
            self.reduce()
        # A wait covers every transfer on its channel: wait for P_ij before starting P_i,j+1.
        self.probs_ready()
        if not last:
            e.bundle("add r22, r8, r9")
            self.kv_slices()
            self.next_probs()
        self.probs_computed()
        e.bundle(f"wait {CH_G}")
        # dP = dO_i V_j^T
        self.gemm(br, bc, d, ("dOt", 0, br), ("Va", 0, bc), ("Pd", 0, bc), False)
        if self.staged:
            e.bundle(f"dma {CH_X}, dPx[r25, 0], Pd[0], {br}, {bc}, {bc}, {bc}")
            e.bundle(f"wait {CH_X}")
            e.bundle(f"dma {CH_X}, Pd[0], dPx[r25, 0], {br}, {bc}, {bc}, {bc}")
            e.bundle(f"wait {CH_X}")
        self.softmax_backward()
        if self.staged:
            e.bundle(f"dma {CH_X}, dSx[r25, 0], dSa[0], {br}, {bc}, {bc}, {bc}")
            e.bundle(f"wait {CH_X}")
            src = "dSx[r25, 0]"
        else:
            src = "dSa[0]"
        e.bundle(f"dma {CH_L}, dSs[0], {src}, {br}, {bc}, {bc}, {bc}")
        e.bundle(f"dma {CH_L}, dSt[0], {src}, {br}, {bc}, {br}, {bc}, t")
        e.bundle(f"wait {CH_L}")
        # dV_j partial = P_ij^T dO_i (reduced across DSPs during the next tile)
        self.gemm(bc, d, br, ("Ps", 0, bc), ("dOa", 0, d), ("Part", "r24", d), False)
        # dQ_i += dS_ij K_j
        self.gemm(br, d, bc, ("dSt", 0, br), ("Ka", 0, d), ("dQa", "r29", d), not first)
        # dK_j partial = dS_ij^T Q_i
        self.gemm(bc, d, br, ("dSs", 0, bc), ("Qa", 0, d), ("Part2", "r24", d), False)
        e.bundle("mov r7, r8", "mov r8, r7", "mov r31, r12")
        e.bundle("mov r10, r11", "mov r11, r10", f"addi r12, r12, {bc * d}")
        e.bundle("mov r24, r26", "mov r26, r24")

    def reduce(self):
        """ReduceAddGSM of the previous key tile's dV and dK partials (rows r31, buffers at r26)."""
        e, bc, d = self.e, self.bc, self.d
        e.bundle(f"wait {CH_R}")
        e.bundle(f"dma {CH_R}, dVg[r31], Part[r26], {bc}, {d}, {d}, {d}, add")
        e.bundle(f"dma {CH_R}, dKg[r31], Part2[r26], {bc}, {d}, {d}, {d}, add")

    def softmax_backward(self):
        """dS = scale * P * (dP - D) over the tile, four rows at a time, in AM."""
        e, br, bc, lanes = self.e, self.br, self.bc, self.lanes
        e.bundle("mov r18, r10", "li r19, 0", "li r20, 0")
        e.bundle("li r21, 0")
        rows_label = e.open_loop("sr", br // 4)
        cols_label = e.open_loop("sc", bc // lanes) if bc > lanes else None
        loads = []
        for r in range(4):
            loads += [f"vld v{40 + r}, Pa[r18+{r * bc}]", f"vld v{44 + r}, Pd[r19+{r * bc}]", f"vbc v{48 + r}, Da[r20+{r}]"]
        for b in range(0, len(loads), 2):
            e.bundle(*loads[b:b + 2])
        for r in range(4):
            e.bundle(f"vsub v{44 + r}, v{44 + r}, v{48 + r}")
        for r in range(4):
            e.bundle(f"vmul v{44 + r}, v{44 + r}, v{40 + r}")
        for r in range(4):
            e.bundle(f"vmul v{44 + r}, v{44 + r}, v63")
        e.bundle("vst v44, dSa[r21]", f"vst v45, dSa[r21+{bc}]")
        e.bundle(f"vst v46, dSa[r21+{2 * bc}]", f"vst v47, dSa[r21+{3 * bc}]", f"addi r18, r18, {lanes}",
                 f"addi r19, r19, {lanes}", f"addi r21, r21, {lanes}")
        if cols_label:
            e.close_loop(cols_label)
        e.bundle(f"addi r18, r18, {4 * bc - bc}", f"addi r19, r19, {4 * bc - bc}", "addi r20, r20, 4")
        e.bundle(f"addi r21, r21, {4 * bc - bc}")
        e.close_loop(rows_label)

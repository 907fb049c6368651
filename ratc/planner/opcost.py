"""Per-layer costs for one sequence on one TP rank: op rooflines, parameters, activations."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ratc.errors import RatcError
from ratc.frontend.profile import LayerProfile, ModelProfile, OpProfile
from ratc.ir.types import DTYPE_BYTES
from ratc.planner.corun import corun_within, least_headroom, merged_runs, phases
from ratc.step.rules import attention_kept, kept_bytes, recomputes, recompute, recoverable, weight_gradient_share


# Ops Megatron-style tensor parallelism splits across the T ranks (by heads or by the FFN
# dimension); the rest (norms, residual adds on the hidden stream) run replicated.
_TP_SPLIT_KINDS = frozenset({"matmul", "attention", "rope", "softmax"})

@dataclass(frozen=True)
class UnitCost:
    """One layer (embedding, decoder layer or head) for ONE sequence on one TP rank."""

    name: str
    decoder: bool           # a decoder layer (pre/post: the embedding, the head)
    fwd: float              # forward seconds (sum of per-op rooflines)
    fwd_compute: float      # seconds the compute units are busy in forward
    fwd_ddr: float          # seconds DDR is busy in forward
    bwd: float
    bwd_compute: float
    bwd_ddr: float
    params: float           # parameters held by this rank
    trainable: float        # of them, those with gradients and optimizer state (not frozen)
    saved_bytes: float      # full-save activations kept for backward
    ckpt_bytes: float       # the layer input (the checkpoint under ckpt / FSR)
    workspace: float        # the largest non-attention op output: operator scratch in DDR
    kernels: "UnitKernels | None" = None   # the generated kernels it runs (ratc.codegen.op_kernels)
    fwd_phases: tuple = ()  # forward's ((compute s, DDR s), ...) in execution order (ratc.planner.corun)
    bwd_phases: tuple = ()  # backward's, ops in reverse order
    # For a memory-capped co-run (corun_within): the forward's phases with the saved bytes
    # each starts to make, the backward's with those each frees when it ends.
    fwd_ops: tuple = ()     # ((compute s, DDR s, bytes made), ...)
    bwd_ops: tuple = ()     # ((compute s, DDR s, bytes freed), ...)
    stream: float = 0.0     # FSR: headroom over one layer when its Backward hosts a decoder Recover
    backward: bool = True   # some op needs a gradient (behind frozen inputs, with frozen weights, none does)
    tied: float = 0.0       # of the trainable parameters, those tied to another unit's (summed before the update)
    # Selective recomputation: of saved_bytes, the attention core's s x s tensors (its
    # probabilities), and the core's forward, which a selective Recover re-runs to rebuild them.
    core_bytes: float = 0.0
    core_fwd: float = 0.0
    core_compute: float = 0.0
    core_ddr: float = 0.0
    core_phases: tuple = ()  # ((compute s, DDR s), ...) of that re-run
    core_ops: tuple = ()     # ... with the bytes each starts to make (ratc.planner.corun)
    # Of bwd, the seconds of its weight gradients (a zero-bubble W task;
    # ratc.step.rules.weight_gradient_share): the dW GEMMs.
    bwd_weight: float = 0.0
    # ... and what those W tasks read (ratc.step.rules.held_for_w), kept from the
    # input-gradient task (I) until W runs: the output gradients of the GEMMs with weights,
    wgrad_bytes: float = 0.0
    # ... and those GEMMs' saved inputs X (dW = X^T dY reads nothing else of the Forward)
    wx_bytes: float = 0.0

    @property
    def recovers(self) -> bool:
        """Whether checkpointing and FSR keep only its input and recompute it before its Backward.

        Decoder layers do, unless they save nothing for backward: behind frozen inputs with
        frozen weights a layer has no backward (autograd builds no graph), so there is
        nothing to recover and no checkpoint to keep."""
        return recoverable(self.decoder, self.saved_bytes)

    @property
    def selective(self) -> bool:
        """Whether selective recomputation applies: a recovered layer with an attention core."""
        return self.recovers and self.core_bytes > 0

    def kept(self, choice: str) -> float:
        """Bytes its Forward keeps for its Backward per sequence under a save choice."""
        return float(kept_bytes(choice, self.saved_bytes, self.ckpt_bytes, self.core_bytes))

    def recompute_seconds(self, choice: str) -> float:
        """Seconds its Recover re-runs per sequence under a save choice."""
        return float(recompute(choice, self.fwd, self.core_fwd))


@dataclass(frozen=True)
class UnitKernels:
    """A unit's kernel calls per sequence and the seconds of the work no kernel runs.

    fwd / bwd: sorted ((kind, shape), calls) pairs; *_other: roofline seconds of the ops
    without a kernel plus the DDR streams around attention. With a kernel-running
    execution profile a unit's time is exactly sum(calls x kernel seconds) + other.
    """

    fwd: tuple
    bwd: tuple
    fwd_other: float
    bwd_other: float
    core: tuple = ()          # the attention core's forward kernels (a selective Recover's)
    core_other: float = 0.0   # ... and its seconds no kernel runs
    wgrad: tuple = ()         # of bwd, the weight-gradient kernels (a zero-bubble W task's)


def elem_bytes(dtype: str) -> int:
    """Bytes per element of a profile dtype name."""
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise RatcError(f"unknown dtype {dtype!r} in model profile (known: {', '.join(DTYPE_BYTES)})") from None


def op_split(op: OpProfile, hidden: int) -> bool:
    """Whether tensor parallelism divides this op's work across ranks."""
    if op.kind in _TP_SPLIT_KINDS:
        return True
    return op.kind == "elementwise" and bool(op.out_shape) and op.out_shape[-1] != hidden


def op_times(op: OpProfile, exec_profile, platform, tp: int, split: bool, dtype_bytes: int, attn: str = "paper"):
    """(fwd compute, fwd ddr, bwd compute, bwd ddr) seconds of one op for one sequence.

    GEMMs run at the execution profile's sustained rate; every other op at the peak
    vector rate (2 FLOPs per MAC). DDR time is bytes / bandwidth. Backward re-reads each
    forward input and writes its gradient, and reads the output gradient once:
    2 * bytes_read + bytes_written; an op whose output needs no gradient has none. Fused
    attention's backward reads the rows' (m, r) instead of the probabilities and
    computes S = Q K^T again.
    """
    div = tp if split else 1
    if exec_profile.prices_ops:
        return exec_profile.op_times(op, div, dtype_bytes)
    peak = platform.cluster.peak_mac_rate
    ddr = platform.cluster.ddr_bandwidth
    fwd_macs = op.fwd_flops / 2 / div
    bwd_macs = (op.bwd_input_flops + op.bwd_weight_flops) / 2 / div
    if op.gemm is not None:
        m, n, k = op.gemm
        eff = exec_profile.gemm_efficiency(m, max(1, n // div), k)
        rate = peak * eff
    else:
        rate = peak
    read, written = op.bytes_read / div, op.bytes_written / div
    fwd_ddr_bytes = read + written
    bwd_ddr_bytes = 2 * read + written if op.grad else 0.0
    if op.kind == "attention" and op.attention is not None:
        # The paper's attention backward (Alg. 1, line 5) reloads the saved probability
        # tiles P_ij from DDR, so the forward writes heads x s x s of them once (the fused
        # forward writes only each row's m, r).
        heads, _, seq, head_dim = op.attention
        fwd_ddr_bytes += attention_kept(heads / div, seq, dtype_bytes, attn)
        bwd_ddr_bytes += attention_kept(heads / div, seq, dtype_bytes, attn) if op.grad else 0.0
        if attn == "fused" and op.grad:
            bwd_macs += heads * seq * seq * head_dim / div
    return fwd_macs / rate, fwd_ddr_bytes / ddr, bwd_macs / rate, bwd_ddr_bytes / ddr


def core_bytes(op: OpProfile, dtype_bytes: int) -> float:
    """Bytes of an attention op's s x s probabilities for one sequence (heads x s x s), which
    its forward writes and its backward reloads (0 for any other op)."""
    if op.kind != "attention" or op.attention is None:
        return 0.0
    heads, _, seq, _ = op.attention
    return float(heads * seq * seq * dtype_bytes)


def saved_by(op: OpProfile, dtype_bytes: int, attn: str) -> float:
    """Bytes one op saves for its backward for one sequence (all TP ranks): fused attention
    keeps the rows' (m, r) in place of its probabilities (ratc.step.rules.attention_kept)."""
    if attn == "paper" or not core_bytes(op, dtype_bytes):
        return op.saved_bytes
    heads, _, seq, _ = op.attention
    return op.saved_bytes - core_bytes(op, dtype_bytes) + attention_kept(heads, seq, dtype_bytes, attn)


def unit_cost(layer: LayerProfile, model: ModelProfile, exec_profile, platform, tp: int,
              decoder: bool, attn: str = "paper") -> UnitCost:
    """Costs of one layer for one sequence at tensor-parallel degree tp, with the attention
    kernels `attn` (ratc.step.config.ATTENTION)."""
    from ratc.codegen.op_kernels import attention_alignment, merge, op_kernels

    eb = elem_bytes(model.dtype)
    # a host runs torch operators: no VLIW kernels are generated for it, and every op is costed alone
    kernels = platform.has_kernels
    align = attention_alignment(platform.vliw) if kernels else None
    ddr = platform.cluster.ddr_bandwidth
    runs_kernels = exec_profile.runs_kernels
    f = fc = fd = b = bc = bd = bw = wg = wx = 0.0
    saved = workspace = 0.0
    kf, kb, kw, other_f, other_b = [], [], [], 0.0, 0.0
    ph_f, ph_b = [], []     # per op: [(compute, DDR)] of its kernels and its stream / roofline
    op_saved, op_written = [], []
    core = _Core()
    for op in layer.ops:
        split = op_split(op, model.hidden)
        div = tp if split else 1
        ks = op_kernels(op, div, eb, align, attn) if kernels else None
        before = (f, fc, fd, len(kf), other_f)
        if ks is not None:
            kf += ks.fwd
            kb += ks.bwd
            kw += ks.wgrad
            s1, s2 = ks.fwd_stream_bytes / ddr, ks.bwd_stream_bytes / ddr
            other_f += s1
            other_b += s2
        if ks is not None and runs_kernels:
            # The op's time is its kernels' measured time (which includes their own DDR
            # traffic) plus the streams between them; no max() against a DDR roofline.
            c1, d1 = _kernel_time(exec_profile, ks.fwd, ddr)
            c2, d2 = _kernel_time(exec_profile, ks.bwd, ddr)
            f += c1 + s1
            fc += c1
            fd += d1 + s1
            b += c2 + s2
            bc += c2
            bd += d2 + s2
            # a kernel keeps the DSPs busy for its whole run and DDR for its own traffic
            ph_f.append([(c1, d1), (0.0, s1)])
            ph_b.append([(c2, d2), (0.0, s2)])
        else:
            c1, d1, c2, d2 = op_times(op, exec_profile, platform, tp, split, eb, attn)
            f += max(c1, d1)
            fc += c1
            fd += d1
            b += max(c2, d2)
            bc += c2
            bd += d2
            ph_f.append([(c1, d1)])
            ph_b.append([(c2, d2)])
            if ks is None:
                other_f += max(c1, d1)
                other_b += max(c2, d2)
        w_s, w_b, w_x = _weight_part(op, ks, ph_b[-1], div, exec_profile, ddr, runs_kernels)
        bw, wg, wx = bw + w_s, wg + w_b, wx + w_x
        if op.grad and core_bytes(op, eb) and attn == "paper":    # (fused: no core to recompute)
            core.add(core_bytes(op, eb) / div, (f, fc, fd, other_f), before, kf, ph_f[-1])
        kept = saved_by(op, eb, attn) / div
        saved += kept
        op_saved.append(kept)
        op_written.append(op.bytes_written / div)
        if op.kind != "attention":
            # The attention backward keeps its score-gradient tiles in AM/SM (paper Alg. 1),
            # so only other ops need DDR scratch of their output size.
            workspace = max(workspace, op.bytes_written / div)
    over_f, over_b = exec_profile.unit_overhead(layer, saved, eb)
    f, fc, b, bc = f + over_f, fc + over_f, b + over_b, bc + over_b
    # (a host's per-task cost runs in its compute stream, after the ops)
    tail_f, tail_b = ([(over_f, 0.0)], [(over_b, 0.0)]) if over_f or over_b else ([], [])
    kernels = UnitKernels(merge(kf), merge(kb), other_f, other_b, merge(core.kernels), core.other + over_f, merge(kw))
    return UnitCost(name=layer.name, decoder=decoder, fwd=f, fwd_compute=fc, fwd_ddr=fd,
                    bwd=b, bwd_compute=bc, bwd_ddr=bd, params=layer.param_count / tp,
                    trainable=layer.trainable_count / tp, tied=layer.tied_count(trainable=True) / tp,
                    bwd_weight=bw, wgrad_bytes=wg, wx_bytes=wx, saved_bytes=saved, ckpt_bytes=float(layer.input_bytes),
                    workspace=workspace, kernels=kernels, backward=any(op.grad for op in layer.ops),
                    fwd_phases=phases([x for op in ph_f for x in op] + tail_f),
                    bwd_phases=phases([x for op in reversed(ph_b) for x in op] + tail_b),
                    **_stream_ops(layer, ph_f, ph_b, op_saved, op_written), **core.costs(over_f, tail_f))


def _weight_part(op, ks, bwd_phases, div: int, exec_profile, ddr: float, runs_kernels: bool) -> tuple:
    """(seconds, gradient bytes, input bytes) of one op's backward that a zero-bubble W runs
    and reads: its dW GEMM kernels' own time when kernels price it, else the dW FLOPs' share
    of its roofline backward (ratc.step.rules.weight_gradient_share); the output gradient and
    the saved input of a GEMM with one (opcosts: a weighted matmul saves its activation
    input; a tensor saved twice counts in the first op saving it, as in saved_bytes)."""
    share = weight_gradient_share(op.gemm is not None, op.bwd_input_flops, op.bwd_weight_flops)
    if ks is not None and runs_kernels:
        seconds = _kernel_time(exec_profile, ks.wgrad, ddr)[0]
    else:
        seconds = max(bwd_phases[0]) * share
    if share <= 0:
        return seconds, 0.0, 0.0
    return seconds, op.bytes_written / div, op.saved_bytes / div


class _Core:
    """The attention core of a unit as its ops are costed: what selective recomputation drops
    from the Forward's saved bytes and re-runs (the attention ops' forward) before the Backward."""

    def __init__(self):
        self.bytes = self.fwd = self.compute = self.ddr = self.other = 0.0
        self.kernels: list = []
        self.phases: list = []

    def add(self, nbytes: float, after: tuple, before: tuple, kf: list, phases: list) -> None:
        """One attention op: its probabilities' bytes, and its forward as the running sums
        (seconds, compute, DDR, other) and kernel list were before and after it."""
        self.bytes += nbytes
        self.fwd += after[0] - before[0]
        self.compute += after[1] - before[1]
        self.ddr += after[2] - before[2]
        self.other += after[3] - before[4]
        self.kernels += kf[before[3]:]
        self.phases += phases

    def costs(self, over: float, tail: list) -> dict:
        """The UnitCost fields (a Recover is a task: a host's per-task cost runs after it too)."""
        if not self.bytes:
            return {}
        made = [(c, d, self.bytes if k == 0 else 0.0) for k, (c, d) in enumerate(self.phases)]
        return {"core_bytes": self.bytes, "core_fwd": self.fwd + over, "core_compute": self.compute + over,
                "core_ddr": self.ddr, "core_phases": phases(self.phases + tail),
                "core_ops": merged_runs(iter(made + [(c, d, 0.0) for c, d in tail]))}


def _stream_ops(layer: LayerProfile, ph_f: list, ph_b: list, saved: list, written: list) -> dict:
    """fwd_ops / bwd_ops of a unit: what a Recover makes when, what a Backward frees when.

    An op's saved activations are freed when its backward ends. A recovery makes what the op
    saves of its inputs when their producer starts, the rest when the op itself starts."""
    index = {op.name: i for i, op in enumerate(layer.ops)}
    made = [0.0] * len(layer.ops)
    for i, op in enumerate(layer.ops):
        inputs = [index[x] for x in op.inputs if x in index]
        early = min(saved[i], sum(written[j] for j in inputs))
        made[min(inputs + [i])] += early
        made[i] += saved[i] - early
    fwd = ((c, d, made[i] if q == 0 else 0.0) for i, ph in enumerate(ph_f) for q, (c, d) in enumerate(ph))
    bwd = ((c, d, saved[i] if q == len(ph_b[i]) - 1 else 0.0)
           for i in reversed(range(len(ph_b))) for q, (c, d) in enumerate(ph_b[i]))
    # merged as the timing model's phases are, so the capped co-run runs on its grid
    return {"fwd_ops": merged_runs(fwd), "bwd_ops": merged_runs(bwd)}


def _stream_pair(host: UnitCost, guest: UnitCost) -> tuple:
    """corun_within's (host phases, guest phases, host frees, guest allocations) for a Recover
    of `guest` co-running with the Backward of `host`."""
    return ([op[:2] for op in host.bwd_ops], [op[:2] for op in guest.fwd_ops],
            [op[2] for op in host.bwd_ops], [op[2] for op in guest.fwd_ops])


def stream_headroom(host: UnitCost, guest: UnitCost) -> float:
    """Bytes over the host's saved activations at which a Recover of `guest`, streaming into
    what the host's Backward frees, co-runs as fast as with a buffer of its own (0.1 %)."""
    if not host.bwd_ops or not guest.fwd_ops:
        return 0.0
    return least_headroom(*_stream_pair(host, guest))


def stream_corun(host: UnitCost, guest: UnitCost, headroom: float) -> float:
    """Seconds of that pair with `headroom` bytes over the host's (inf: a buffer of its own)."""
    h, g, frees, made = _stream_pair(host, guest)
    return corun_within(h, g, frees, made, sum(frees) + headroom)


def _kernel_time(exec_profile, calls, ddr: float) -> tuple[float, float]:
    """(seconds, DDR-busy seconds) of ((kind, shape), calls) kernel runs."""
    seconds = busy = 0.0
    for (kind, shape), n in calls:
        k = exec_profile.kernel(kind, shape)
        seconds += n * k["seconds"]
        busy += n * k["ddr_bytes"] / ddr
    return seconds, busy


def model_units(model: ModelProfile, exec_profile, platform, tp: int, attn: str = "paper") -> list[UnitCost]:
    """The model as a list of unit costs in forward order: pre, decoder layers, post."""
    pre = unit_cost(model.pre, model, exec_profile, platform, tp, decoder=False, attn=attn)
    post = unit_cost(model.post, model, exec_profile, platform, tp, decoder=False, attn=attn)
    templates = {id(t): unit_cost(t, model, exec_profile, platform, tp, decoder=True, attn=attn)
                 for t in model.layers}
    # a decoder Backward may host the Recover of any decoder layer (the one below, or in the
    # cool-down its stage's last): the headroom it needs for the hungriest
    templates = {k: replace(u, stream=max(stream_headroom(u, g) for g in templates.values()))
                 for k, u in templates.items()}
    return [pre] + [templates[id(t)] for t in model.decoder_layers()] + [post]

"""The rules of a training step, each written once for the planner (numpy arrays over
candidates and units), the lowering and the verifier (plain scalars) alike.

ZeRO (Rajbhandari et al. 2020): stage 1 shards the optimizer state over the D replicas,
stage 2 the gradients too, stage 3 the parameters too. Under ZeRO 0 gradients are
all-reduced and every replica updates every parameter; from stage 1 on they are
reduce-scattered and each replica updates its 1/D shard, which stages 1 and 2 then
all-gather (PrefetchW) and stage 3 gathers before each use.
"""

from __future__ import annotations

import numpy as np

from ratc.step.config import ACT_POLICIES, SAVE_CHOICES

_FULL = ACT_POLICIES.index("full")

# The ZeRO stage from which each part of the training state is sharded over the replicas.
SHARDED_FROM = {"optimizer": 1, "grad": 2, "param": 3}


def recomputes(act):
    """Whether an activation policy recomputes layers before their Backward (checkpointing
    and FSR do, full-save does not); `act` a policy name, or policy indices (numpy)."""
    if isinstance(act, str):
        return act != "full"
    return np.asarray(act) != _FULL


def recoverable(decoder, saved_bytes):
    """Whether a unit is recomputed under a recomputing policy: a decoder layer that saves
    something for its backward (behind frozen inputs with frozen weights a layer has no
    backward, so nothing to recover and no checkpoint to keep)."""
    if isinstance(decoder, (bool, np.bool_)):
        return bool(decoder) and saved_bytes > 0
    return np.asarray(decoder, dtype=bool) & (np.asarray(saved_bytes) > 0)


def recovered(act, decoder, saved_bytes):
    """Whether a unit keeps only its input (a checkpoint) and is recomputed before its Backward."""
    if isinstance(act, str) and isinstance(decoder, (bool, np.bool_)):
        return recomputes(act) and recoverable(decoder, saved_bytes)
    return recomputes(act) & recoverable(decoder, saved_bytes)


# What a recovered unit keeps from its Forward for its Backward, per layer (issue 31):
# 'full' everything; 'selective' everything but the attention core's s x s tensors (the
# probabilities; Korthikanti et al. 2022, Megatron's --recompute-granularity selective),
# which a Recover re-runs the attention forward for; 'layer' only its input (a checkpoint),
# the whole layer re-run by a Recover.
_SELECTIVE, _LAYER = SAVE_CHOICES.index("selective"), SAVE_CHOICES.index("layer")


def save_choice(act: str, decoder: bool, saved_bytes, keep: str | None = None) -> str:
    """What a unit saves for its Backward: nothing is recomputed under full-save or in a unit
    that is not recoverable; a recoverable one keeps what its plan chose (`keep`, default
    'layer': today's whole-layer recovery)."""
    if not recovered(act, decoder, saved_bytes):
        return "full"
    return keep or "layer"


def unit_save_choice(act: str, unit_attrs: dict) -> str:
    """save_choice of a plan's life.unit (its attributes) under an activation policy."""
    return save_choice(act, unit_attrs.get("decoder") is True, int(unit_attrs.get("saved", 0)), unit_attrs.get("keep"))


def kept_bytes(choice, saved, checkpoint, core):
    """Bytes a unit holds from its Forward to its Backward under a save choice (a name, or
    SAVE_CHOICES indices as numpy): all it saves, all but the attention core's, or its input."""
    if isinstance(choice, str):
        return {"full": saved, "selective": saved - core, "layer": checkpoint}[choice]
    choice = np.asarray(choice)
    return np.where(choice == _LAYER, checkpoint, np.where(choice == _SELECTIVE, saved - core, saved))


def recompute(choice, layer, core):
    """What a unit's Recover re-runs under a save choice (name or indices): nothing, the
    attention core's forward, or the layer's; `layer` and `core` are that quantity (seconds,
    bytes rebuilt, ...) for the whole layer and for the core."""
    if isinstance(choice, str):
        return {"full": 0 * layer, "selective": core, "layer": layer}[choice]
    choice = np.asarray(choice)
    return np.where(choice == _LAYER, layer, np.where(choice == _SELECTIVE, core, 0 * layer))


# Fused attention keeps two FP32 numbers per query row where the paper's kernels keep the
# probabilities: the row's max m and r = 1 / sum exp(. - m) (FlashAttention keeps L = m + log(1/r),
# torch's flash SDPA the same `logsumexp`; the ISA has no log, so ratc.codegen.flash_fwd keeps both).
ROW_STATS_BYTES = 8


def attention_kept(heads: float, seq: int, dtype_bytes: int, attn: str) -> float:
    """Bytes one sequence's attention core keeps for its Backward beyond Q, K, V (and O, its
    output projection's input): the s x s probabilities the paper's backward reloads, or
    under fused attention (ratc.codegen.flash) the rows' (m, r) it recomputes them from."""
    return heads * seq * (ROW_STATS_BYTES if attn == "fused" else seq * dtype_bytes)


def shards(Z, D, state: str):
    """Over how many replicas a part of the training state ('optimizer', 'grad', 'param') is
    split under ZeRO stage Z: D once Z reaches the stage that shards it, else 1."""
    if isinstance(Z, (int, np.integer)) and isinstance(D, (int, np.integer)):
        return D if Z >= SHARDED_FROM[state] else 1
    return np.where(np.asarray(Z) >= SHARDED_FROM[state], D, 1)


def syncs_by_reduce_scatter(Z):
    """Whether GradSync reduce-scatters (ZeRO >= 1: each replica updates a shard) rather than
    all-reduces (ZeRO 0)."""
    return Z >= 1


def prefetches(Z):
    """Whether updated parameter shards are all-gathered after the update (PrefetchW): ZeRO 1
    and 2. ZeRO 3 gathers before each use instead; ZeRO 0 updates every parameter locally."""
    return (Z == 1) | (Z == 2) if not isinstance(Z, (int, np.integer)) else Z in (1, 2)


def gathers(Z):
    """Whether each use of a unit's parameters gathers them first (ZeRO 3)."""
    return Z >= 3


# ZeRO >= 2 reduces gradients out of this many bucket buffers per stage (DeepSpeed's two
# `ipg_buffer`s with overlap_comm): a Backward waits until its buffer's last bucket is reduced.
BUCKET_BUFFERS = 2


def reduces_per_micro_batch(Z):
    """Whether each micro-batch's gradient is reduce-scattered into a sharded accumulator as
    backward produces it (ZeRO >= 2: the bucket is freed after it), not accumulated locally."""
    return Z >= 2


def holds_bucket(Z, frozen: bool) -> bool:
    """Whether a unit's Backward writes its gradient into a bucket buffer (ZeRO >= 2; a
    frozen unit has no gradient)."""
    return reduces_per_micro_batch(Z) and not frozen


def bucket_reused(k: int):
    """Of a stage's bucket-holding Backwards in issue order, the one whose buffer the k-th
    takes over (it waits for that bucket's collective to release it), or None."""
    return k - BUCKET_BUFFERS if k >= BUCKET_BUFFERS else None


def bucket_chain(before, work, reduce, holds, start=0.0, ring=None) -> tuple:
    """The planner's form of bucket_reused: a run of Backwards (arrays [..., K], issue order)
    on one stage, unit k after `before[k]` seconds of compute that waits for no bucket (a
    checkpointed layer's Recover), then its Backward `work[k]`, which, if it `holds` a bucket,
    waits until the bucket BUCKET_BUFFERS holders back is reduced; each holder's reduce
    (`reduce[k]`) follows its Backward on the link, one at a time in release order.

    `ring` [..., BUCKET_BUFFERS]: the reduce ends of the last holders before the run, oldest
    first (-inf: none). Returns (each unit's Backward end [..., K], the ring after the run)."""
    holds = np.asarray(holds, dtype=bool)
    shape = np.broadcast_shapes(np.shape(before), np.shape(work), np.shape(reduce), holds.shape)
    before, work, reduce, holds = (x if np.shape(x) == shape else np.broadcast_to(x, shape)
                                   for x in (before, work, reduce, holds))
    t = np.broadcast_to(np.asarray(start, dtype=float), shape[:-1])
    # the ring as a list of its buffers' arrays, oldest first (taking one over shifts it)
    ring = ([np.full(shape[:-1], -np.inf)] * BUCKET_BUFFERS if ring is None else
            [np.asarray(ring, dtype=float)[..., i] for i in range(BUCKET_BUFFERS)])
    ends = np.empty(shape)
    for k in range(shape[-1]):
        h = holds[..., k]
        t = np.where(h, np.maximum(t + before[..., k], ring[0]), t + before[..., k]) + work[..., k]
        ends[..., k] = t
        done = np.maximum(t, ring[-1]) + reduce[..., k]
        ring = [np.where(h, new, old) for old, new in zip(ring, ring[1:] + [done])]
    return ends, np.stack(ring, axis=-1)


def first_reach(fwd):
    """[..., P] how long after the first stage's first Forward starts a step's first
    micro-batch reaches each stage: the Forwards (with their sends) of the stages before it."""
    return np.cumsum(fwd, axis=-1) - fwd


def next_step_start(ends, reach):
    """[...] when the next step's first Forward starts on the first rank, from this step's start:
    once each rank r, whose last task ends at ends[..., r], is free by the time that micro-batch
    reaches it (reach[..., r] later: first_reach). A rank that ends late but is reached late
    overlaps its tail with the next step's first Forwards (zero bubble's trailing Ws)."""
    return np.max(np.asarray(ends) - reach, axis=-1)


def recover_reads_weights(choice: str) -> bool:
    """Whether a unit's Recover needs its parameters: a whole-layer one does; the attention
    core re-runs on the saved Q, K, V alone."""
    return choice == "layer"


def gather_ahead(corun):
    """How many compute tasks before the task reading a ZeRO-3 view its gather is issued (it
    runs beside the task it is issued before): one; for a Recover co-running with its host
    (FSR), two, the host and the task before it, as the Recover starts with its host.
    `corun` a bool or a numpy array of them."""
    return 1 + np.asarray(corun, dtype=int) if not isinstance(corun, bool) else 1 + int(corun)


def backward_view(recovered: bool) -> str:
    """The phase of the ZeRO-3 view a Backward reads: a recovered layer's Backward reuses the
    view its Recover gathered ('rec'), any other gathers its own ('bwd')."""
    return "rec" if recovered else "bwd"


# Megatron tensor parallelism (Shoeybi et al. 2019, Sec. 3): one all-reduce of the hidden
# stream after attention and one after the MLP in forward, two more in backward; the
# vocab-parallel embedding all-reduces its output (forward), the column-parallel LM head its
# input gradient (backward).
TP_ALLREDUCES_PER_LAYER = 2
_TP_ALLREDUCES = {"decoder": (TP_ALLREDUCES_PER_LAYER, TP_ALLREDUCES_PER_LAYER), "embedding": (1, 0), "head": (0, 1)}


def tp_allreduces(role: str, backward: bool = True) -> tuple[int, int]:
    """(forward, backward) tensor-parallel all-reduces of one micro-batch through a unit of a
    role ('embedding', 'decoder', 'head'); a unit with no backward (behind frozen inputs, with
    frozen weights) has none in backward."""
    fwd, bwd = _TP_ALLREDUCES[role]
    return fwd, bwd if backward else 0


def streamed_seconds(rows: tuple, nbytes):
    """Seconds of memory-bound work moving `nbytes` (a number or an array), from measured
    (bytes, seconds) rows in increasing bytes (in cache first, from memory last): linear in
    bytes between neighbouring rows, at the nearest end row's rate outside them."""
    xs = np.array([r[0] for r in rows], dtype=float)
    ts = np.array([r[1] for r in rows], dtype=float)
    x = np.asarray(nbytes, dtype=float)
    out = np.where(x <= xs[0], x * ts[0] / xs[0],
                   np.where(x >= xs[-1], x * ts[-1] / xs[-1], np.interp(x, xs, ts)))
    return float(out) if out.ndim == 0 else out


def weight_gradient_share(gemm: bool, input_flops: float, weight_flops: float) -> float:
    """Of one op's backward, the share a zero-bubble W task runs: a GEMM's weight gradient
    (dW) by its FLOPs; everything else -- the dX GEMMs, the attention core, norms and
    elementwise ops -- is on the input-gradient (I) path the previous stage waits for."""
    total = input_flops + weight_flops
    return weight_flops / total if gemm and total > 0 else 0.0


def held_for_w(w_grads, w_inputs):
    """Bytes a zero-bubble I keeps for its W (the layer's other saved activations and its
    output gradient die with the I): each weighted GEMM's output gradient dY and saved input
    X, as dW = X^T dY reads nothing else."""
    return w_grads + w_inputs


def backward_parts(u: dict) -> dict:
    """A unit's Backward split into its zero-bubble tasks: {"I": (dur, compute, ddr), "W":
    (...)}. W is the unit's `bwd_w` seconds (its dW GEMMs, weight_gradient_share), its
    compute and DDR seconds in that proportion; I the rest, TP all-reduces included."""
    bwd = float(u["bwd"])
    w = min(float(u.get("bwd_w", 0.0)), bwd)
    f = w / bwd if bwd > 0 else 0.0
    compute, ddr = float(u["bwd_compute"]), float(u["bwd_ddr"])
    return {"I": (bwd - w, compute * (1 - f), ddr * (1 - f)), "W": (w, compute * f, ddr * f)}

"""Per-stage peak memory (paper Eq. 5, 6, 9, 10) for a batch of candidates."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ratc.planner.config import CandidateBatch
from ratc.step.rules import gathers, recomputes, reduces_per_micro_batch, shards
from ratc.step.config import ACT_POLICIES, RECIPE
from ratc.step.schedules import chunk_in_flight, pending_weight_grads, rank_columns, virtual_stage
from ratc.planner.stages import StageCosts

FSR = ACT_POLICIES.index("fsr")


@dataclass(frozen=True)
class StageMemory:
    """Bytes per stage, shape [C, P]: the three terms of Eq. 9 and their detail.

    The transient terms (recovery buffer, gradient bucket, workspace) are those of the
    Backward at which the stage peaks (`at_edge`: its embedding / head, else a decoder layer).
    """

    params: np.ndarray
    grads: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    boundary: np.ndarray      # a Backward's incoming and outgoing activation gradient
    grad_bucket: np.ndarray   # two consecutive Backwards' full gradients (ZeRO >= 2 double buffering)
    param_view: np.ndarray    # ZeRO-3: gathered parameters of the current and next unit
    workspace: np.ndarray
    at_edge: np.ndarray       # bool: the peak is the embedding's / head's Backward

    @property
    def state(self) -> np.ndarray:
        return self.params + self.grads + self.optimizer

    @property
    def buffers(self) -> np.ndarray:
        return self.boundary + self.grad_bucket + self.param_view + self.workspace

    @property
    def total(self) -> np.ndarray:
        return self.state + self.activations + self.buffers


def n_in_flight(P: int, M, v: int = 1, sched: str = "1f1b") -> np.ndarray:
    """N_act(s): micro-batches whose activations virtual stage s holds (0-indexed; chunk
    s // P of rank s % P): under 1F1B min(P - s, M); interleaved, counted from its order
    (that of `sched`)."""
    if v == 1:
        return np.minimum(P - np.arange(P), M)
    M = np.broadcast_to(np.asarray(M), np.shape(M) or (1, 1))
    out = np.zeros(M.shape[:-1] + (P * v,))
    for m in np.unique(M):
        out[M[..., 0] == m] = chunk_in_flight(P, v, int(m), sched)
    return out


def stage_memory(sc: StageCosts, c: CandidateBatch, boundary_bytes: float, recipe=RECIPE) -> StageMemory:
    """Eq. 9 per stage: state (ZeRO-sharded over D), activations (Eq. 5 / 6) and buffers."""
    D, Z, b = c.D, c.Z, c.b
    params, grads, optimizer = _state_bytes(sc, c, recipe)
    n = n_in_flight(c.P, c.M, c.v, c.sched)
    recovers = recomputes(c.act)
    held = np.where(recovers, n * b * sc.ckpt, n * b * sc.saved_full)
    zero = np.zeros_like(held)
    # A Backward reads its output's gradient and writes its input's: two hidden-stream
    # tensors, received from and sent to the neighbour stages at a boundary (also at P = 1).
    boundary = zero + 2 * b * boundary_bytes
    # ZeRO-3 views: the current unit's and the next one's (gathered a task ahead); a recovered
    # decoder layer is gathered for its Recover and again for its Backward, which follows it.
    views = np.maximum(sc.view_pair, np.where(recovers, 2 * sc.max_rec_params, 0.0))
    param_view = np.where(gathers(Z), views * recipe.param_bytes, 0.0) + zero
    pair = _bucket_pair(sc, c, recipe) + zero

    # Recovery buffer and workspace belong to one Backward and die with it, so they peak
    # together (with the bucket pair) at a decoder layer's Backward or at the embedding's /
    # head's. Checkpointing recovers each layer right before its Backward: one buffer, never
    # at an edge (the head's Backward comes before its stage's first Recover, the
    # embedding's after the last). FSR co-runs a layer's Recover with the Backward before it
    # (ratc.planner.corun), which still reads its own: the Recover streams into what that
    # Backward frees, so a decoder layer's moment holds one buffer plus the headroom the
    # stream needs (stream_buf); one buffer beside the head's Backward, which hosts the last
    # layer's, and the embedding's, which hosts the next micro-batch's first in the cool-down
    # (and their workspaces together).
    # The head's saved activations die at its Backward too; the last stage holds one
    # micro-batch, so at a decoder layer's Backward they are gone.
    head = b * sc.head_saved
    fsr = c.act == FSR
    # (a decoder layer's Backward hosts the Recover of the layer below if that is one too, and
    # a middle stage's first layer the next micro-batch's first in the cool-down)
    stage = np.arange(sc.P)
    middle = (stage > 0) & (stage < sc.P - 1) & (c.M > 1)
    two = np.where(fsr & ((sc.n_rec >= 2) | middle), 2, 1)
    rec = np.where(recovers, b * (sc.rec_buf + (two - 1) * sc.stream_buf), 0.0)
    rec_edge = np.where(fsr, b * (sc.rec_buf + sc.guest_workspace), 0.0)
    z3 = gathers(Z)
    if np.any(z3):
        z3_rec, z3_edge, z3_alone, z3_fwd = (x + zero for x in _zero3_views_and_buckets(sc, c, recovers, fsr, recipe))
    else:
        z3_rec = z3_edge = z3_alone = z3_fwd = zero
    # ZeRO-3's views and buckets are counted per moment (a decoder layer's Backward or
    # Recover, an edge's Backward, or a Forward holding the last backward's two buckets).
    # An edge's Backward hosts a Recover (the head's always, the embedding's in the
    # cool-down) -- or, the embedding's in the steady state, none, while the next Forward's
    # view of it is gathered: the larger moment counts.
    vb_rec, vb_host, vb_alone = np.where(z3, z3_rec, pair), np.where(z3, z3_edge, pair), np.where(z3, z3_alone, pair)
    alone = vb_alone > rec_edge + vb_host
    vb_edge = np.where(alone, vb_alone, vb_host)
    rec_edge = np.where(alone, 0.0, rec_edge)
    rec_ws = b * (sc.rec_workspace + (two - 1) * sc.guest_workspace)
    at_recovered = rec + rec_ws + vb_rec
    edge = head + rec_edge + b * sc.edge_workspace + vb_edge
    # A Forward's moment: under ZeRO-3 its views, and under FSR, on a stage whose last unit is
    # recovered (every stage but the last, unless frozen layers end it), the next Backward's
    # first Recover it hosts (its buffer and scratch beside the Forward's).
    hosting = fsr & sc.last_rec
    f_rec = np.where(hosting, b * sc.rec_buf, 0.0)
    f_ws = b * sc.workspace + np.where(hosting, b * sc.guest_workspace, 0.0)
    vb_fwd = np.where(z3, z3_fwd, pair)
    fwd = np.where(z3 | hosting, head + f_rec + f_ws + vb_fwd, 0.0)
    at_edge = (edge > at_recovered) & (edge >= fwd)
    at_fwd = (fwd > at_recovered) & (fwd > edge)
    guest = fsr & ~alone       # a Recover co-runs with the edge's Backward
    activations = (held - head + np.where(at_edge | at_fwd, head, rec) + np.where(at_edge & guest, b * sc.rec_buf, 0.0)
                   + np.where(at_fwd, f_rec, 0.0))
    vb = np.where(at_edge, vb_edge, np.where(at_fwd, vb_fwd, vb_rec))
    param_view = np.minimum(param_view, vb)
    grad_bucket = np.where(z3, vb - param_view, pair)
    workspace = np.where(at_edge, b * sc.edge_workspace + np.where(guest, b * sc.guest_workspace, 0.0),
                         np.where(at_fwd, f_ws, rec_ws))
    mem = StageMemory(params=params + zero, grads=grads + zero, optimizer=optimizer + zero,
                      activations=activations, boundary=boundary, grad_bucket=grad_bucket,
                      param_view=param_view, workspace=workspace, at_edge=at_edge)
    return mem if c.v == 1 else _zero_bubble(_per_rank(mem, held, c.P, c.v, c.sched), held, sc, c)


def _zero_bubble(ranked: StageMemory, held, sc: StageCosts, c: CandidateBatch) -> StageMemory:
    """A rank's memory (_per_rank's) under a zero-bubble schedule; as it is under 1F1B."""
    if c.sched == "1f1b":
        return ranked
    recovers, b = recomputes(c.act), c.b
    zero = np.zeros_like(held)
    # zero bubble: what a Forward saved lives until its I ends (a Recover's rebuilt
    # activations too: the transient terms, as under 1F1B), and from its I to its W what
    # that reads (ratc.step.rules.held_for_w, sc.wgrad). Counted over the order, not as
    # chunk peaks.
    kept = np.where(recovers, b * sc.ckpt, b * sc.saved_full) + zero
    for_w = b * sc.wgrad + zero
    rank_held = ranked.activations - held[:, rank_columns(c.P, c.v, c.sched)].reshape(len(held), c.v, c.P).sum(axis=1)
    return dataclasses.replace(ranked, activations=rank_held + _until_w(np.concatenate([kept, for_w], axis=1), c))


def _until_w(per_mb: np.ndarray, c: CandidateBatch) -> np.ndarray:
    """[C, P] the most bytes a rank holds for its Ws to come: over its zero-bubble order, the
    micro-batches in flight per chunk (pending_weight_grads) times that chunk's bytes per
    micro-batch (`per_mb` [C, 2 P*v]: what a Forward keeps, then what an I keeps for its W)."""
    P, v = c.P, c.v
    M = np.broadcast_to(np.asarray(c.M), (per_mb.shape[0], 1))[:, 0].astype(int)
    out = np.zeros((per_mb.shape[0], P))
    for m in np.unique(M):
        rows = M == m
        for r, counts in enumerate(pending_weight_grads(P, v, int(m), c.sched)):
            cols = [k * P * v + virtual_stage(ch, r, P, c.sched) for k in (0, 1) for ch in range(v)]
            out[rows, r] = (per_mb[rows][:, cols] @ np.array(counts, dtype=float).T).max(axis=1)
    return out


def _per_rank(mem: StageMemory, held: np.ndarray, P: int, v: int, sched: str = "1f1b") -> StageMemory:
    """[C, P] per rank from [C, P*v] per virtual stage: a rank holds its chunks' state and
    stored activations together, and the transient terms (a Backward's buffers, recovery,
    workspace) of one chunk's task at a time: those of the chunk where they are largest."""
    cols = rank_columns(P, v, sched)
    fold = lambda a: a[:, cols].reshape(a.shape[0], v, P)  # noqa: E731
    transient = fold(mem.activations - held + mem.buffers)
    worst = transient.argmax(axis=1)[:, None]
    pick = lambda a: np.take_along_axis(fold(a), worst, axis=1)[:, 0]  # noqa: E731
    total = lambda a: fold(a).sum(axis=1)  # noqa: E731
    return StageMemory(params=total(mem.params), grads=total(mem.grads), optimizer=total(mem.optimizer),
                       activations=total(held) + pick(mem.activations - held), boundary=pick(mem.boundary),
                       grad_bucket=pick(mem.grad_bucket), param_view=pick(mem.param_view),
                       workspace=pick(mem.workspace), at_edge=pick(mem.at_edge))



def _state_bytes(sc: StageCosts, c: CandidateBatch, recipe) -> tuple:
    """(parameters, gradients, optimizer state) bytes [C, P] a replica holds after ZeRO
    sharding. Frozen parameters (requires_grad=False) keep their fp16 copy but have no
    gradient and no master weights or Adam moments."""
    D, Z = c.D, c.Z
    return (sc.params * recipe.param_bytes / shards(Z, D, "param"),
            sc.trainable * recipe.grad_bytes / shards(Z, D, "grad"),
            sc.trainable * recipe.optimizer_bytes / shards(Z, D, "optimizer"))


def _bucket_pair(sc: StageCosts, c: CandidateBatch, recipe):
    """[C, P] the gradient buckets a stage holds at once: full fp16 gradients until their
    reduce-scatter (ZeRO >= 2), out of BUCKET_BUFFERS buffers (DeepSpeed's double-buffered
    ipg_buffer). A Backward waits until the bucket two Backwards back is reduce-scattered, so
    a stage holds two consecutive Backwards' buckets, never a third -- also through the next
    forwards (the micro-batch's last two wait for the next backward), so every moment counts
    the stage's largest consecutive pair."""
    pair = np.where(c.M > 1, sc.bucket_pair, sc.bucket_pair1)
    return np.where(reduces_per_micro_batch(c.Z), pair * recipe.grad_bytes, 0.0)


def _zero3_views_and_buckets(sc: StageCosts, c: CandidateBatch, recovers, fsr, recipe) -> tuple:
    """ZeRO-3: views plus buckets live at once at a decoder layer's, an edge's and a Forward's moment.

    At Backward(j) the views are j's and the next task's (gathered a task ahead: j - 1, or
    for the stage's first unit the next micro-batch's first or last) and the buckets are j's
    and its predecessor's in issue order (j + 1, or for the stage's last unit the first unit
    of the previous micro-batch); at Recover(j) (checkpointing) j's view, which its Backward
    reuses, and the previous Backward's buckets; at a Forward(j), j's and j + 1's views and
    the last two buckets of the previous backward. FSR co-runs Recover(j - 1) with
    Backward(j) and gathers its view one task earlier: a Backward's moment adds j - 2's
    view, and a Forward hosting its stage's first Recover holds its own, that layer's and
    the next one's. Each maximized over the stage's decoder layers, and over its embedding
    / head: the embedding's view and bucket are not both paired with it twice. Returns the
    (decoder, edge hosting a Recover, embedding hosting none, Forward) moments: the
    embedding's Backward hosts the next micro-batch's first Recover in the cool-down, where
    the stage's last unit is gathered next, and none in the steady state (M > P), where the
    next Forward gathers the embedding again.
    """
    u = sc.u_params if sc.u_params.ndim == 3 else sc.u_params[None]
    g = sc.u_trainable if sc.u_trainable.ndim == 3 else sc.u_trainable[None]    # bucket sizes
    # (a whole-layer Recover gathers the view its Backward reuses; a selective layer's Backward
    # gathers its own at the same point, ahead of its Recover: the same moments)
    recovered = (sc.u_recovered if sc.u_recovered.ndim == 3 else sc.u_recovered[None]) > 0
    fsr = np.asarray(fsr)[..., None]
    n = (u > 0).sum(axis=-1)
    zero = np.zeros(u.shape[:-1] + (1,))
    left = np.concatenate([zero, u[..., :-1]], axis=-1)
    right = np.concatenate([u[..., 1:], zero], axis=-1)
    first, last_u = u[..., :1], np.take_along_axis(u, (n - 1)[..., None], axis=-1)
    is_last = np.arange(u.shape[-1]) == (n - 1)[..., None]
    many = np.asarray(c.M)[..., None] > 1
    g_right = np.concatenate([g[..., 1:], zero], axis=-1)
    pair = g + np.where(is_last, np.where(many, g[..., :1], 0.0), g_right)
    idx0 = np.arange(u.shape[-1]) == 0
    ahead = np.where(idx0, np.where(many, np.maximum(first, last_u), 0.0), left)
    # an edge's Backward hosting a Recover (at index 0, the embedding's in the cool-down: the
    # next micro-batch's last unit is gathered next), or the embedding's with a Forward next
    # (stage 0's steady state, M > P): that Forward's view of it
    ahead_host = np.where(idx0, np.where(many, last_u, 0.0), left)
    steady = np.asarray(c.M)[..., None] > sc.P
    ahead_alone = np.where(steady, first, 0.0)
    # FSR: the view two tasks ahead (j - 2; at a stage's first two units the next micro-batch's
    # first Recovers', bounded by the stage's largest decoder layer)
    big = np.where(recovered, u, 0.0).max(axis=-1, keepdims=True)
    two_back = np.concatenate([zero, zero, u[..., :-2]], axis=-1)[..., :u.shape[-1]]
    ahead2 = np.where(np.arange(u.shape[-1]) < 2, big, two_back)

    def at_backward(ahead_view):
        return (u + ahead_view + np.where(fsr, ahead2, 0.0)) * recipe.param_bytes + pair * recipe.grad_bytes

    bwd = at_backward(ahead)
    pz = np.zeros(pair.shape[:-1] + (1,))
    prev_pair = np.where(is_last, np.where(many, pair[..., :1], 0.0), np.concatenate([pair[..., 1:], pz], axis=-1))
    rec = np.where(np.asarray(recovers)[..., None] & recovered, u * recipe.param_bytes + prev_pair * recipe.grad_bytes,
                   0.0)
    fwd = (u + right) * recipe.param_bytes + np.where(many, pair[..., :1], 0.0) * recipe.grad_bytes
    host = (u + 2 * big) * recipe.param_bytes + np.where(many, pair[..., :1], 0.0) * recipe.grad_bytes
    fwd = np.where(fsr, np.maximum(fwd, host), fwd)
    real = u > 0
    at_rec = np.where(real & recovered, np.maximum(bwd, rec), 0.0).max(axis=-1)
    at_edge = np.where(real & ~recovered, at_backward(ahead_host), 0.0).max(axis=-1)
    alone = np.where(real & ~recovered & idx0, at_backward(ahead_alone), 0.0).max(axis=-1)
    return at_rec, at_edge, alone, np.where(real, fwd, 0.0).max(axis=-1)

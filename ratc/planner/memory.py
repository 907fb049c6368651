"""Per-stage peak memory (paper Eq. 5, 6, 9, 10) for a batch of candidates."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratc.planner.config import ACT_POLICIES, RECIPE, CandidateBatch
from ratc.planner.stages import StageCosts

FULL = ACT_POLICIES.index("full")


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
    grad_bucket: np.ndarray   # one unit's full gradient awaiting reduce-scatter (ZeRO >= 2)
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


def n_in_flight(P: int, M) -> np.ndarray:
    """N_act(p): micro-batches whose activations stage p holds under 1F1B (0-indexed p)."""
    return np.minimum(P - np.arange(P), M)


def stage_memory(sc: StageCosts, c: CandidateBatch, boundary_bytes: float, recipe=RECIPE) -> StageMemory:
    """Eq. 9 per stage: state (ZeRO-sharded over D), activations (Eq. 5 / 6) and buffers."""
    phi = sc.params
    D, Z, b = c.D, c.Z, c.b
    params = phi * recipe.param_bytes / np.where(Z >= 3, D, 1)
    grads = phi * recipe.grad_bytes / np.where(Z >= 2, D, 1)
    optimizer = phi * recipe.optimizer_bytes / np.where(Z >= 1, D, 1)
    n = n_in_flight(sc.P, c.M)
    recovers = c.act != FULL
    held = np.where(recovers, n * b * sc.ckpt, n * b * sc.saved_full)
    zero = np.zeros_like(held)
    # A Backward reads its output's gradient and writes its input's: two hidden-stream
    # tensors, received from and sent to the neighbour stages at a boundary (also at P = 1).
    boundary = zero + 2 * b * boundary_bytes
    # ZeRO-3 views: the current unit's and the next one's (gathered a task ahead); a recovered
    # decoder layer is gathered for its Recover and again for its Backward, which follows it.
    views = np.maximum(sc.view_pair, np.where(recovers, 2 * sc.max_dec_params, 0.0))
    param_view = np.where(Z >= 3, views * recipe.param_bytes, 0.0) + zero

    def bucket(unit_params):   # a Backward's full fp16 gradient until its reduce-scatter (ZeRO >= 2)
        return np.where(Z >= 2, unit_params * recipe.grad_bytes, 0.0) + zero

    # Recovery buffer, bucket and workspace belong to one Backward and die with it, so they
    # peak together at a decoder layer's Backward or at the embedding's / head's -- never
    # across the two: the head's Backward comes before its stage's first Recover and the
    # embedding's after the stage's decoder layers' (the fsr pass moves a Recover only to
    # just after the task before its Backward, and the planner models one recovery buffer).
    # The head's saved activations die at its Backward too; the last stage holds one
    # micro-batch, so at a decoder layer's Backward they are gone.
    head = b * sc.head_saved
    dec = np.where(recovers, b * sc.rec_buf, 0.0) + bucket(sc.max_dec_params) + b * sc.dec_workspace
    edge = head + bucket(sc.edge_params) + b * sc.edge_workspace
    at_edge = edge > dec
    activations = held - head + np.where(at_edge, head, np.where(recovers, b * sc.rec_buf, 0.0))
    grad_bucket = np.where(at_edge, bucket(sc.edge_params), bucket(sc.max_dec_params))
    workspace = b * np.where(at_edge, sc.edge_workspace, sc.dec_workspace)
    return StageMemory(params=params + zero, grads=grads + zero, optimizer=optimizer + zero,
                       activations=activations, boundary=boundary, grad_bucket=grad_bucket,
                       param_view=param_view, workspace=workspace, at_edge=at_edge)

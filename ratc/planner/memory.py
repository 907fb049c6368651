"""Per-stage peak memory (paper Eq. 5, 6, 9, 10) for a batch of candidates."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratc.planner.config import ACT_POLICIES, RECIPE, CandidateBatch
from ratc.planner.stages import StageCosts

FULL = ACT_POLICIES.index("full")


@dataclass(frozen=True)
class StageMemory:
    """Bytes per stage, shape [C, P]: the three terms of Eq. 9 and their detail."""

    params: np.ndarray
    grads: np.ndarray
    optimizer: np.ndarray
    activations: np.ndarray
    boundary: np.ndarray      # stage-boundary activation / gradient buffers
    grad_bucket: np.ndarray   # one layer's full gradient awaiting reduce-scatter (ZeRO >= 2)
    param_view: np.ndarray    # ZeRO-3: gathered parameters of the current and next unit
    workspace: np.ndarray

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
    full = n * b * sc.saved_full
    ckpt = n * b * sc.ckpt + b * sc.rec_buf
    activations = np.where(c.act == FULL, full, ckpt)
    zero = np.zeros_like(activations)
    boundary = zero + (2 * b * boundary_bytes if sc.P > 1 else 0.0)
    grad_bucket = np.where(Z >= 2, sc.max_layer_params * recipe.grad_bytes, 0.0) + zero
    # ZeRO-3 views: the current unit's and the next one's (gathered a task ahead); a recovered
    # decoder layer is gathered for its Recover and again for its Backward, which follows it.
    views = np.maximum(sc.view_pair, np.where(c.act != FULL, 2 * sc.max_dec_params, 0.0))
    param_view = np.where(Z >= 3, views * recipe.param_bytes, 0.0) + zero
    workspace = b * sc.workspace + zero
    return StageMemory(params=params + zero, grads=grads + zero, optimizer=optimizer + zero,
                       activations=activations, boundary=boundary, grad_bucket=grad_bucket,
                       param_view=param_view, workspace=workspace)

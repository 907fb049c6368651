"""What each recomputed layer keeps, chosen per stage under the memory slack (issue 31).

Under ckpt / FSR a decoder layer may keep everything (`full`: no recomputation), all but its
attention core's s x s tensors (`selective`: the core's forward re-runs) or only its input
(`layer`: the whole layer re-runs). Under 1F1B stage p holds min(P - p, M) micro-batches in
flight, so each layer's choice costs in-flight x b x the bytes it keeps beyond its input. Per
stage this is a multiple-choice knapsack: choose one option per layer minimising the
recomputed seconds within the stage's slack (the budget less its peak with every layer
recomputed whole). The layers of a stage that share a template are identical, so with one
template the optimum is exact by enumerating how many keep everything (the rest go
selective while they fit); a stage mixing templates is solved as a 0-1 program (scipy's milp).
"""

from __future__ import annotations

import numpy as np

from ratc.step.config import SAVE_CHOICES, keep_text, parse_keep

def stage_options(units, ranges) -> list:
    """Per stage: (the unit indices of its layers that may choose, their (extra bytes, saved
    seconds) per sequence of 'selective' and of 'full' over 'layer')."""
    out = []
    for s, e in ranges:
        idx = [i for i in range(s, e) if units[i].recovers]
        opts = [((u.kept("selective") - u.kept("layer"), u.fwd - u.core_fwd) if u.selective else None,
                 (u.kept("full") - u.kept("layer"), u.fwd)) for u in (units[i] for i in idx)]
        out.append((idx, opts))
    return out


def choose(units, ranges, slack: np.ndarray, in_flight: np.ndarray, b: np.ndarray) -> list:
    """The `keep` text of each candidate: per stage the choices that save the most recompute
    seconds with in_flight x b x extra bytes within `slack` ([C, P] arrays; b [C, 1])."""
    C = slack.shape[0]
    options = stage_options(units, ranges)
    per_stage = []           # per stage: each candidate's choices for the stage's layers (a tuple)
    for p, (idx, opts) in enumerate(options):
        if not idx:
            per_stage.append([()] * C)
            continue
        room = slack[:, p] / (in_flight[:, p] * b[:, 0])
        if len(set(opts)) == 1:
            n_full, n_sel = _uniform(len(idx), opts[0], room)
            per_stage.append([(int(nf), int(ns)) for nf, ns in zip(n_full, n_sel)])
        else:
            per_stage.append([tuple(_milp(opts, r)) for r in room])
    texts, memo = [], {}
    for c in range(C):
        key = tuple(stage[c] for stage in per_stage)
        if key not in memo:
            memo[key] = _text(units, options, key)
        texts.append(memo[key])
    return texts


def _text(units, options, picks) -> str:
    """The keep text of per-stage picks: (full, selective) counts, or each layer's choice."""
    choice = ["layer" if u.recovers else "full" for u in units]
    for (idx, _), pick in zip(options, picks):
        if pick and isinstance(pick[0], int):
            # identical layers in forward order: those keeping everything first, then the
            # selective ones, then those recomputed whole (under FSR the planner then tries
            # another choice last in each stage: stage_orders)
            nf, ns = pick
            pick = ("full",) * nf + ("selective",) * ns + ("layer",) * (len(idx) - nf - ns)
        for i, x in zip(idx, pick):
            choice[i] = x
    picked = [choice[i] if units[i].recovers else "layer" for i, u in enumerate(units) if u.decoder]
    return keep_text(picked) if any(x != "layer" for x in picked) else ""


def _uniform(n: int, opt: tuple, room: np.ndarray) -> tuple:
    """(full, selective) counts of n identical layers maximising saved seconds with
    full x bytes_f + selective x bytes_s <= room (per sequence in flight), vectorised over room."""
    sel, (bytes_f, secs_f) = opt
    k_full = np.arange(n + 1)[None, :]                       # [1, n+1]
    left = room[:, None] - k_full * bytes_f
    if sel is None:
        k_sel = np.zeros_like(left)
        secs_s = bytes_s = 0.0
    else:
        bytes_s, secs_s = sel
        k_sel = np.clip(np.floor(left / bytes_s) if bytes_s > 0 else n, 0, n - k_full)
    value = np.where(left >= 0, k_full * secs_f + k_sel * secs_s, -np.inf)
    # ties: the fewer bytes (the leaner plan keeps headroom)
    used = k_full * bytes_f + k_sel * bytes_s
    best = _argbest(value, used)
    rows = np.arange(len(room))
    return k_full[0, best].astype(int), k_sel[rows, best].astype(int)


def _argbest(value: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Per row the column of the largest value, the least used among equals."""
    top = value.max(axis=1, keepdims=True)
    return np.where(value >= top - 1e-15 * np.abs(top), -used, -np.inf).argmax(axis=1)


def _milp(opts: list, room: float) -> list:
    """Each layer's choice where a stage's layers differ: the 0-1 multiple-choice knapsack
    solved exactly by scipy's milp."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    n = len(opts)
    # variables: per layer x_full, x_sel (x_layer = 1 - both)
    value = np.array([v for sel, (bf, sf) in opts for v in (sf, sel[1] if sel else 0.0)])
    bytes_ = np.array([v for sel, (bf, sf) in opts for v in (bf, sel[0] if sel else 0.0)])
    one = np.zeros((n, 2 * n))
    for i in range(n):
        one[i, 2 * i:2 * i + 2] = 1.0
    upper = np.array([u for sel, _ in opts for u in (1.0, 1.0 if sel else 0.0)])
    res = milp(-value, integrality=np.ones(2 * n), bounds=Bounds(0, upper),
               constraints=[LinearConstraint(bytes_[None], -np.inf, room), LinearConstraint(one, 0, 1)])
    if res.x is None:       # (no room at all: every layer keeps its input)
        return ["layer"] * n
    x = np.round(res.x).reshape(n, 2)
    return ["full" if f else "selective" if s else "layer" for f, s in x]


def stage_orders(units, ranges, keep: str) -> list[tuple[int, dict]]:
    """Per stage, the reorders of its layers' save choices that may change its time: one layer
    of a choice other than the stage's last moved last, as (stage, {decoder layer: choice}).

    Under FSR a stage's last layer's Recover rides on a Forward (the cool-down's on a
    Backward) and every other one on the Backward of the layer after it, so with identical
    layers only which choice comes last changes the step; the planner costs each."""
    choices = parse_keep(keep)
    layer_of = {i: n for n, i in enumerate(i for i, u in enumerate(units) if u.decoder)}
    out = []
    for p, (s, e) in enumerate(ranges):
        ks = [layer_of[i] for i in range(s, e) if units[i].recovers]
        here = [choices[k] for k in ks]
        for last in SAVE_CHOICES:
            if last in here and here[-1] != last:
                j = len(here) - 1 - here[::-1].index(last)      # the stage's latest of that choice
                out.append((p, dict(zip(ks, here[:j] + here[j + 1:] + [last]))))
    return out


def with_changes(keep: str, changes: dict) -> str:
    """A keep text with some decoder layers' choices replaced ({layer: choice})."""
    choices = list(parse_keep(keep))
    for k, x in changes.items():
        choices[k] = x
    return keep_text(choices)


_SAYS = {"full": "keep everything, recompute nothing",
         "selective": "keep all but the attention core's s x s tensors ({core}), recompute the attention core ({secs})",
         "layer": "keep the input ({kept}), recompute the whole layer ({secs})"}


def describe(units, ranges, choices, b: int) -> list[str]:
    """Per run of decoder layers with the same stage and choice: what each saves and
    recomputes per micro-batch of b sequences (`ratc plan --explain`)."""
    from ratc.units import format_bytes, format_time
    stage_of = {i: p for p, (s, e) in enumerate(ranges) for i in range(s, e)}
    runs: list = []
    for i, u in enumerate(units):
        if not u.decoder:
            continue
        key = (stage_of[i], choices[i])
        if runs and runs[-1][0] == key and runs[-1][2] == i - 1:
            runs[-1][2] = i
        else:
            runs.append([key, i, i])
    lines = []
    for (p, choice), first, last in runs:
        u = units[first]
        what = _SAYS[choice].format(core=format_bytes(b * u.core_bytes), kept=format_bytes(b * u.kept(choice)),
                                    secs=format_time(b * u.recompute_seconds(choice)))
        name = f"layer #{first}" if first == last else f"layers #{first}-#{last}"
        lines.append(f"  {name} (stage {p}): {what}; {format_bytes(b * u.kept(choice))} held per micro-batch")
    return lines

"""Pipeline schedules beyond 1F1B: the order each rank runs its tasks in.

A rank holds several model chunks (virtual stages). An action is (global stage, kind,
micro-batch) with kind F (forward), B (whole backward), I (backward to the input: the
activation gradient the previous stage waits for) or W (backward to the weights, which
nothing downstream waits for, so it can fill bubbles).

- Interleaved 1F1B (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters"): chunk c of rank r is stage c*P + r; forwards go depth first, a round
  of micro-batches through one chunk before the next; the warm-up lets the last stage's
  first backward arrive, two hops (its forward and its backward) per rank downstream.
- ZB1P, interleaved zero bubble (Qi et al. 2024, "Zero Bubble Pipeline Parallelism"):
  the same chunk order with the backward split into I and W; the warm-up needs one hop per
  rank (an I is all the upstream rank waits for), and rank r defers its W by r steady-state
  slots, the time its upstream neighbours wait, so the Ws fill that wait.
- ZB-V (Qi et al. 2024, Sec. 6): two chunks per rank laid out in a V (rank r holds stages
  r and 2P-1-r), so the last stage's backward starts on the same rank as its forward.

torch.distributed.pipelining implements the same schedules; its `pipeline_order` is the
oracle of tests/test_schedules.py (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble,
ScheduleZBVZeroBubble).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ratc.errors import RatcError


class Action(NamedTuple):
    """One task of a rank: a global stage's forward or backward part on one micro-batch."""

    stage: int
    kind: str          # "F", "B", "I" or "W"
    mb: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.mb}"


class _Counter:
    """The next micro-batch of each (stage, kind): every stage runs each kind in micro-batch order."""

    def __init__(self):
        self.next: dict = {}

    def __call__(self, stage: int, kind: str) -> Action:
        mb = self.next.get((stage, kind), 0)
        self.next[(stage, kind)] = mb + 1
        return Action(stage, kind, mb)


def whole_rounds(P: int, M: int) -> bool:
    """Whether M micro-batches make whole rounds of at least P (or one round, when M < P)."""
    return M % max(1, M // P) == 0


def _rounds(P: int, M: int, name: str) -> int:
    """Micro-batches per round: as many as ranks, or M when fewer; M must be whole rounds."""
    rounds = max(1, M // P)
    if not whole_rounds(P, M):
        raise RatcError(f"{name}: M = {M} micro-batches must be a multiple of the {rounds} rounds of "
                        f"{M // rounds} (M // P rounds of at least P = {P})")
    return M // rounds


def _check(P: int, v: int, M: int, rank: int) -> None:
    if P < 1 or v < 1 or M < 1:
        raise RatcError(f"a schedule needs P, v and M of at least 1, got P = {P}, v = {v}, M = {M}")
    if not 0 <= rank < P:
        raise RatcError(f"rank {rank} is not one of the P = {P} ranks")


def interleaved_1f1b(P: int, v: int, M: int, rank: int) -> list[Action]:
    """The order of interleaved 1F1B on `rank` of P, with v chunks per rank and M micro-batches."""
    return _interleaved(P, v, M, rank, zero_bubble=False)


def interleaved_zero_bubble(P: int, v: int, M: int, rank: int) -> list[Action]:
    """The order of ZB1P (interleaved, backward split into I and W) on `rank` of P."""
    return _interleaved(P, v, M, rank, zero_bubble=True)


def _interleaved(P: int, v: int, M: int, rank: int, zero_bubble: bool) -> list[Action]:
    _check(P, v, M, rank)
    per_round = _rounds(P, M, "ZB1P" if zero_bubble else "interleaved 1F1B")
    total = v * M                               # forwards (and backwards) of the rank's chunks

    def chunk_stage(k: int, backward: bool) -> int:
        """The global stage of the rank's k-th forward (or backward): per_round micro-batches
        through one chunk, then the next (backwards from the last chunk down)."""
        c = (k // per_round) % v
        return (v - 1 - c if backward else c) * P + rank

    hops = 1 if zero_bubble else 2              # per rank between this one and the last
    warmup = min((v - 1) * per_round + hops * (P - 1 - rank), total)
    take = _Counter()
    order = [take(chunk_stage(k, False), "F") for k in range(warmup)]
    backward_kind = "I" if zero_bubble else "B"
    pending_w: list[int] = []                   # stages of the Is whose W is still to run
    for j in range(total):                      # the j-th backward, after the (warmup + j)-th forward
        if warmup + j < total:
            order.append(take(chunk_stage(warmup + j, False), "F"))
        stage = chunk_stage(j, True)
        order.append(take(stage, backward_kind))
        if zero_bubble:
            pending_w.append(stage)
            if j >= rank:                       # W deferred by `rank` slots
                order.append(take(pending_w.pop(0), "W"))
    order += [take(stage, "W") for stage in pending_w]
    return order


def zbv(P: int, M: int, rank: int) -> list[Action]:
    """The order of ZB-V on `rank` of P: stages `rank` (chunk 0, going down the V) and
    2P-1-rank (chunk 1, coming back up), M micro-batches."""
    _check(P, 2, M, rank)
    down, up = rank, 2 * P - 1 - rank
    # Laid out for at least 2P-1 micro-batches (the V's full warm-up); the missing ones'
    # tasks are then left out.
    n = max(2 * P - 1, M)
    take = _Counter()
    order: list[Action] = []

    def run(*steps: tuple) -> None:
        order.extend(take(stage, kind) for stage, kind in steps)

    for _ in range(2 * (P - rank) - 1):         # down the V until the bottom's turn
        run((down, "F"))
    for _ in range(rank):
        run((up, "F"), (down, "F"))
    for _ in range(P - rank):                   # the bottom of the V: backwards begin here
        run((up, "F"), (up, "I"), (up, "W"))
    while take.next.get((up, "F"), 0) < take.next.get((down, "F"), 0) or take.next.get((down, "F"), 0) < n:
        if take.next.get((down, "F"), 0) < n:
            run((down, "F"))
        run((down, "I"), (down, "W"), (up, "F"), (up, "I"), (up, "W"))
    for _ in range(rank):                       # cool-down: input gradients first
        run((down, "I"), (up, "I"))
    for _ in range(P - rank):
        run((down, "I"), (down, "W"))
    for stage in (up, down):                    # the weight gradients left
        while take.next.get((stage, "W"), 0) < take.next.get((stage, "I"), 0):
            run((stage, "W"))
    return [a for a in order if a.mb < M]


@lru_cache(maxsize=256)     # (interleaved 1F1B's and ZB1P's, per (P, v, M))
def interleaved_orders(P: int, v: int, M: int, sched: str = "1f1b") -> tuple:
    """Every rank's order (interleaved 1F1B, or the plan's `sched`) as (stage, kind, mb)
    tuples (for the planner)."""
    return tuple(tuple(rank_order(P, v, M, rank, sched)) for rank in range(P))


@lru_cache(maxsize=256)
def chunk_in_flight(P: int, v: int, M: int, sched: str = "1f1b") -> tuple[int, ...]:
    """Per virtual stage s (chunk s // P of rank s % P): the most micro-batches whose Forward
    has run and Backward not yet, over its rank's order (zero bubble: whose I has not; what
    its W reads lives on, pending_weight_grads)."""
    peak = [0] * (P * v)
    live = [0] * (P * v)
    for order in interleaved_orders(P, v, M, sched):
        for s, kind, _ in order:
            live[s] += 1 if kind == "F" else -1 if kind in ("B", "I") else 0
            peak[s] = max(peak[s], live[s])
    return tuple(peak)


@lru_cache(maxsize=256)
def pending_weight_grads(P: int, v: int, M: int, sched: str = "zb1p") -> tuple:
    """Per rank, while each of its zero-bubble actions runs: per chunk the micro-batches whose
    Forward has run and I not ended, then per chunk those whose I has begun and W not ended
    (2v counts: what a Forward saved lives until its I ends, what the I keeps for its W
    from the I's start until the W ends, ratc.step.rules.held_for_w)."""
    out = []
    for order in interleaved_orders(P, v, M, sched):
        live, rows = [0] * (2 * v), []
        for s, kind, _ in order:
            c = s // P
            if kind != "W":     # (a Forward's saved values, an I's kept ones, are born as it starts)
                live[c if kind == "F" else v + c] += 1
            rows.append(tuple(live))
            if kind == "I":
                live[c] -= 1
            elif kind == "W":
                live[v + c] -= 1
        out.append(tuple(rows))
    return tuple(out)


def recover_hosts(order, host: str = "prev") -> dict:
    """FSR under a schedule's rank `order` ((stage, kind, mb) actions): {index of a Backward
    (zero bubble: an I): index of the action hosting its first Recover}. 'prev' (the deadline
    placement) is the action right before it; 'w' the latest W before it that follows the
    Forward the Recover rebuilds and hosts no other (zero bubble: the Ws and Recovers compete
    for the same idle slots), else the action right before it."""
    out: dict = {}
    taken, forward = set(), {}
    for i, (stage, kind, mb) in enumerate(order):
        if kind == "F":
            forward[stage, mb] = i
        if kind not in ("B", "I") or i == 0:
            continue
        j = i - 1
        if host == "w":
            j = next((k for k in range(i - 1, forward.get((stage, mb), i), -1)
                      if order[k][1] == "W" and k not in taken), j)
        taken.add(j)
        out[i] = j
    return out


def check_interleaved(P: int, v: int, M: int, sched: str = "1f1b") -> None:
    """Refuse a shape interleaved 1F1B (or ZB1P) cannot run: v > 1 needs P >= 2 and M whole
    rounds (ZBV any M)."""
    if v > 1 and P < 2:
        raise RatcError(f"interleaved 1F1B: v = {v} virtual stages per rank need P >= 2 ranks, got P = {P}")
    if v > 1 and sched != "zbv":
        _rounds(P, M, f"interleaved 1F1B (P = {P}, v = {v})")


def order_name(v: int, sched: str = "1f1b") -> str:
    """What a scheduled pipeline's `schedule` attribute calls its order: 1f1b, interleaved-1f1b
    (v > 1), or the zero-bubble schedule's name (zb1p, zbv)."""
    return sched if sched != "1f1b" else "interleaved-1f1b" if v > 1 else "1f1b"


def rank_order(P: int, v: int, M: int, rank: int, sched: str = "1f1b") -> list[Action]:
    """The order `rank` runs its actions in under a plan's schedule (ratc.step.config.SCHEDULES)
    with v > 1 chunks per rank: interleaved 1F1B, or ZB1P or ZBV with each backward split in I and W."""
    if sched == "zbv":
        return zbv(P, M, rank)
    return interleaved_zero_bubble(P, v, M, rank) if sched == "zb1p" else interleaved_1f1b(P, v, M, rank)


def virtual_stage(chunk: int, rank: int, P: int, sched: str = "1f1b") -> int:
    """The global (virtual) stage of a rank's chunk: chunk * P + rank, except that ZBV lays
    its two chunks out in a V (rank r holds stages r and 2P-1-r)."""
    return 2 * P - 1 - rank if sched == "zbv" and chunk == 1 else chunk * P + rank


def rank_columns(P: int, v: int, sched: str = "1f1b") -> list[int]:
    """The virtual stages chunk by chunk, each chunk's ranks 0..P-1 in order: the column
    order that folds [..., P*v] per virtual stage into [..., v, P] per (chunk, rank)."""
    return [virtual_stage(c, r, P, sched) for c in range(v) for r in range(P)]


def rank_of(stage: int, P: int, sched: str = "1f1b") -> int:
    """The rank holding a virtual stage (virtual_stage's inverse, with stage // P its chunk)."""
    return 2 * P - 1 - stage if sched == "zbv" and stage >= P else stage % P


def chunk_orders(P: int, v: int, M: int, rank: int, sched: str = "1f1b") -> tuple[list, list, list]:
    """(forwards, backwards, weight gradients) of `rank` as (chunk, micro-batch) in the order
    its schedule issues each kind; at v = 1 micro-batches 0..M-1 (every schedule's,
    `_rounds` aside). The backwards are a zero-bubble schedule's Is, the weight gradients its
    Ws (else the backwards again: a Backward makes the layer's gradient)."""
    if v == 1:
        return [(0, m) for m in range(M)], [(0, m) for m in range(M)], [(0, m) for m in range(M)]
    order = rank_order(P, v, M, rank, sched)
    pick = lambda kinds: [(a.stage // P, a.mb) for a in order if a.kind in kinds]  # noqa: E731
    return pick("F"), pick("BI"), pick("BW")


@lru_cache(maxsize=256)
def chunk_lead_ins(P: int, v: int, M: int) -> tuple:
    """Per rank, v x v counts over its interleaved 1F1B order: [k][j] the Forwards of chunk j
    that precede chunk k's first one (the next step reaches chunk k after them)."""
    out = []
    for order in interleaved_orders(P, v, M):
        kinds = [(s // P, kind) for s, kind, _ in order]
        out.append(tuple(tuple(kinds[:kinds.index((k, "F"))].count((j, "F")) for j in range(v)) for k in range(v)))
    return tuple(out)

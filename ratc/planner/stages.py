"""Per-stage cost tables for one (P, T, balance): what memory and timing read per candidate."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ratc.planner.corun import extra, scaled, solo
from ratc.planner.partition import partition
from ratc.step.config import RECIPE, SAVE_CHOICES
from ratc.step.rules import held_for_w, kept_bytes, recompute, tp_allreduces

_SUM_FIELDS = ("fwd", "fwd_compute", "fwd_ddr", "bwd", "bwd_compute", "bwd_ddr", "params", "trainable", "saved_bytes",
               "backward", "bwd_weight", "wgrad_bytes", "wx_bytes")


@dataclass(frozen=True)
class UnitTable:
    """The model's units (pre, decoder layers, post) as numpy columns, for fast stage sums,
    under one save choice per unit (ratc.step.rules.save_choice) for recomputing policies."""

    units: tuple
    cols: dict            # field -> [n_units] array
    decoder: np.ndarray   # bool [n_units]
    recovers: np.ndarray  # bool [n_units]: has a Recover under ckpt / FSR (its choice is not 'full')
    whole: np.ndarray     # bool [n_units]: ... which re-runs the whole layer (the choice 'layer')
    guests: tuple         # per unit: the phases its Recover re-runs (the layer's, or its attention core's)
    # (host phases, guest phases) -> what the co-run adds (FSR). Every partition pairs the
    # same few units; looking them up here skips corun's re-merging of the phases, which
    # was a third of cold planning time for LLaMA-2-70B.
    corun_cache: dict

    @classmethod
    def of(cls, units, choices=None, corun_cache=None) -> "UnitTable":
        """The table of `units` with each unit's choice (default: today's, every recoverable
        decoder layer whole-layer recomputed)."""
        choices = tuple(choices or ("layer" if u.recovers else "full" for u in units))
        cols = {f: np.array([getattr(u, f) for u in units], dtype=float)
                for f in _SUM_FIELDS + ("ckpt_bytes", "workspace", "stream", "tied", "core_bytes")}
        pick = np.array([SAVE_CHOICES.index(x) for x in choices])
        for col, layer, core in (("rec_fwd", "fwd", "core_fwd"), ("rec_c", "fwd_compute", "core_compute"),
                                 ("rec_d", "fwd_ddr", "core_ddr")):
            cols[col] = recompute(pick, cols[layer], np.array([getattr(u, core) for u in units], dtype=float))
        cols["held"] = kept_bytes(pick, cols["saved_bytes"], cols["ckpt_bytes"], cols["core_bytes"])
        cols["rec_bytes"] = recompute(pick, cols["saved_bytes"], cols["core_bytes"])
        # the attention core keeps its scores in the DSPs' memories (no DDR scratch: opcost's
        # workspace leaves attention out), and a core guest streams into no host: its own buffer
        cols["rec_ws"] = recompute(pick, cols["workspace"], 0.0)
        cols["rec_extra"] = recompute(pick, cols["stream"], cols["core_bytes"])
        guests = tuple(recompute(x, u.fwd_phases, u.core_phases) if x != "full" else () for u, x in zip(units, choices))
        return cls(tuple(units), cols, np.array([u.decoder for u in units]), pick != 0, pick == SAVE_CHOICES.index("layer"),
                   guests, {} if corun_cache is None else corun_cache)

    def with_choices(self, choices) -> "UnitTable":
        """The same units under other save choices (sharing the co-run cache)."""
        return UnitTable.of(self.units, choices, self.corun_cache)


@dataclass(frozen=True)
class StageCosts:
    """Stage sums for ONE sequence per micro-batch (shape [P]) and per-unit rows ([P, U])."""

    P: int
    T: int
    balance: str
    ranges: tuple                  # (start, end) unit indices of each stage
    names: tuple                   # unit names per stage
    fwd: np.ndarray                # forward seconds
    fwd_c: np.ndarray              # ... of which compute-busy
    fwd_d: np.ndarray              # ... of which DDR-busy
    bwd: np.ndarray
    bwd_c: np.ndarray
    bwd_d: np.ndarray
    bwd_w: np.ndarray              # ... of which its weight gradients (a zero-bubble W: the dW GEMMs)
    wgrad: np.ndarray              # bytes an I keeps for its W (its GEMMs' output gradients and inputs)
    rec: np.ndarray                # recomputation (forward of the stage's recovered layers)
    rec_c: np.ndarray
    rec_d: np.ndarray
    # FSR: each Recover co-runs with the compute task issued before it (ratc.planner.corun);
    # per sequence, what those pairs add to their hosts:
    co_f: np.ndarray               # a Forward's last unit hosting the next Backward's first Recover
    co_b: np.ndarray               # a Backward's units hosting its own Recovers (unit j hosts j - 1)
    co_c: np.ndarray               # a Backward's first unit hosting the next one's first Recover (cool-down)
    co_bi: np.ndarray              # co_b, zero bubble: each I (its share of the Backward's phases) hosting
    co_i: np.ndarray               # ... zero bubble: its I hosting it (the I's share of its phases)
    co_w: np.ndarray               # ... and its W (the W's share)
    params: np.ndarray             # parameters on the stage (per TP rank)
    trainable: np.ndarray          # ... of which get gradients and optimizer state (not frozen)
    n_dec: np.ndarray              # decoder layers on the stage
    n_dec_bwd: np.ndarray          # ... of which have a backward (TP all-reduces in backward)
    n_rec: np.ndarray              # ... of which have a Recover under ckpt / FSR (choice selective or layer)
    n_rec_tp: np.ndarray           # ... of which re-run the whole layer (its TP all-reduces too)
    last_rec: np.ndarray           # bool: the stage's last unit is recovered (its Recover has no Backward host)
    last_rec_tp: np.ndarray        # bool: ... re-running the whole layer
    view_pair: np.ndarray          # ZeRO-3 views live at once: largest sum of two neighbouring units
    max_rec_params: np.ndarray     # the stage's largest recovered layer (its Recover and Backward views)
    saved_full: np.ndarray         # full-save activation bytes
    ckpt: np.ndarray               # checkpoint bytes: recovered layers' inputs + the other units' activations
    rec_buf: np.ndarray            # one recovery buffer: the largest recovered layer's activations
    stream_buf: np.ndarray         # FSR: headroom of a Recover streaming into its host Backward's (largest)
    workspace: np.ndarray          # largest non-attention op output
    rec_workspace: np.ndarray      # ... of the stage's recovered layers (their Backwards')
    guest_workspace: np.ndarray    # ... of their Recovers (a whole layer's; none for an attention core)
    edge_workspace: np.ndarray     # ... of its other units: embedding / head, layers not recovered (0: none)
    bucket_pair: np.ndarray        # ZeRO >= 2: largest trainable params of two consecutive Backwards (M > 1)
    bucket_pair1: np.ndarray       # ... within one micro-batch (M = 1)
    head_saved: np.ndarray         # the head's saved activations (last stage; 0 elsewhere)
    head_tp_bwd: np.ndarray        # the head's TP all-reduces in backward (last stage; 0 elsewhere)
    u_params: np.ndarray           # [P, U] per unit, forward order, zero padded
    u_trainable: np.ndarray        # [P, U] of which trainable (gradient buckets, syncs, updates)
    u_fwd: np.ndarray
    u_bwd: np.ndarray
    u_bwd_w: np.ndarray            # ... of which its weight gradients (a zero-bubble W, whose reduce frees its bucket)
    u_recovered: np.ndarray        # 1.0 where the unit is recovered (recomputed by Recover)
    u_whole: np.ndarray            # 1.0 where that Recover re-runs the whole layer (its view, its TP all-reduces)
    u_rec: np.ndarray              # [P, U] seconds the unit's Recover re-runs (per sequence)
    u_co: np.ndarray               # what the unit's Backward adds hosting the Recover of the unit before it
    u_tied: np.ndarray             # [P, U] trainable parameters tied to another unit's (tie_sum before the update)


def stage_costs(table: UnitTable, P: int, T: int, balance: str = "time", recipe=RECIPE, ranges=None,
                layout: tuple = ()) -> StageCosts:
    """Aggregate unit costs into P stages (`ranges`: the partition, when known; `layout`: each
    stage's rank when ranks hold several, see ratc.planner.partition)."""
    ranges = ranges or partition(table.units, P, balance, recipe, layout)
    starts = np.array([s for s, _ in ranges])
    n = len(table.units)
    U = max(e - s for s, e in ranges)
    # [P, U] gather of each stage's units, padded with a zero unit
    idx = starts[:, None] + np.arange(U)[None, :]
    valid = idx < np.array([e for _, e in ranges])[:, None]
    idx = np.where(valid, idx, n)
    pad = lambda a: np.append(a, 0.0)[idx]  # noqa: E731
    # `rec` marks the recovered units: everything recovery keeps, recomputes or hosts
    c, rec, whole = table.cols, table.recovers.astype(float), table.whole.astype(float)
    ssum = lambda a: np.add.reduceat(a, starts)  # noqa: E731
    rec_pad, whole_pad = pad(rec) > 0, pad(whole) > 0
    u_fwd = pad(c["fwd"])
    co_f, u_co, co_c, co_i, co_w, co_bi = _corun_extras(table, ranges, P, U)
    u_params = pad(c["params"])
    # The lowering gathers a unit's view one task ahead, within a Forward or Backward: the
    # current and the next unit of the stage (a lone unit has no neighbour: the zero padding).
    nxt = np.concatenate([u_params[:, 1:], np.zeros((P, 1))], axis=1)
    ws = pad(c["workspace"])
    edge = ~rec_pad & valid
    # ZeRO >= 2 keeps two gradient buckets (double buffering): a Backward's and the one before
    # it in issue order -- the next unit's, or for the stage's last unit the first unit's of
    # the previous micro-batch (a lone unit: its own), which only exists when M > 1. A bucket
    # holds gradients, so only trainable parameters count.
    u_trainable = pad(c["trainable"])
    nxt_g = np.concatenate([u_trainable[:, 1:], np.zeros((P, 1))], axis=1)
    nxt_in_stage = np.where(np.arange(U)[None, :] + 1 < valid.sum(axis=1)[:, None], nxt_g, 0.0)
    pair1 = (u_trainable + nxt_in_stage).max(axis=1)
    last = np.where(valid, u_trainable, 0.0)[np.arange(P), valid.sum(axis=1) - 1]
    pair = np.maximum(pair1, u_trainable[:, 0] + last)
    head_saved = np.zeros(P)
    head_saved[-1] = 0.0 if table.decoder[-1] else c["saved_bytes"][-1]
    head_tp_bwd = np.zeros(P)
    head_tp_bwd[-1] = tp_allreduces("head", bool(c["backward"][-1]))[1]
    return StageCosts(
        P=P, T=T, balance=balance, ranges=tuple(ranges),
        names=tuple(tuple(u.name for u in table.units[s:e]) for s, e in ranges),
        fwd=ssum(c["fwd"]), fwd_c=ssum(c["fwd_compute"]), fwd_d=ssum(c["fwd_ddr"]),
        bwd=ssum(c["bwd"]), bwd_c=ssum(c["bwd_compute"]), bwd_d=ssum(c["bwd_ddr"]),
        bwd_w=ssum(c["bwd_weight"]), wgrad=ssum(held_for_w(c["wgrad_bytes"], c["wx_bytes"])),
        rec=ssum(c["rec_fwd"]), rec_c=ssum(c["rec_c"]), rec_d=ssum(c["rec_d"]),
        co_f=co_f, co_b=u_co.sum(axis=1), co_c=co_c, co_i=co_i, co_w=co_w, co_bi=co_bi,
        params=ssum(c["params"]), trainable=ssum(c["trainable"]), n_dec=ssum(table.decoder.astype(float)),
        n_dec_bwd=ssum(table.decoder * c["backward"]),
        n_rec=ssum(rec), n_rec_tp=ssum(whole), last_rec=table.recovers[[e - 1 for _, e in ranges]],
        last_rec_tp=table.whole[[e - 1 for _, e in ranges]],
        view_pair=(u_params + nxt).max(axis=1), max_rec_params=np.where(whole_pad, u_params, 0.0).max(axis=1),
        saved_full=ssum(c["saved_bytes"]), ckpt=ssum(c["held"]),
        rec_buf=np.where(rec_pad, pad(c["rec_bytes"]), 0.0).max(axis=1),
        stream_buf=np.where(rec_pad, pad(c["rec_extra"]), 0.0).max(axis=1),
        workspace=ws.max(axis=1),
        rec_workspace=np.where(rec_pad, ws, 0.0).max(axis=1),
        guest_workspace=np.where(rec_pad, pad(c["rec_ws"]), 0.0).max(axis=1), edge_workspace=np.where(edge, ws, 0.0).max(axis=1),
        head_saved=head_saved, head_tp_bwd=head_tp_bwd, bucket_pair=pair, bucket_pair1=pair1,
        u_params=u_params, u_trainable=u_trainable, u_fwd=u_fwd, u_bwd=pad(c["bwd"]), u_bwd_w=pad(c["bwd_weight"]),
        u_recovered=rec_pad.astype(float),
        u_whole=whole_pad.astype(float), u_rec=pad(c["rec_fwd"]), u_co=u_co, u_tied=pad(c["tied"]))


_ARRAYS = ("fwd", "fwd_c", "fwd_d", "bwd", "bwd_c", "bwd_d", "bwd_w", "wgrad", "rec", "rec_c", "rec_d", "co_f", "co_b", "co_c", "co_i", "co_w", "co_bi", "params", "trainable",
           "n_dec", "n_dec_bwd", "n_rec", "n_rec_tp", "last_rec", "last_rec_tp", "view_pair", "max_rec_params", "saved_full", "ckpt", "rec_buf", "stream_buf",
           "workspace",
           "rec_workspace", "guest_workspace", "edge_workspace", "bucket_pair", "bucket_pair1", "head_saved", "head_tp_bwd")
_UNIT_ARRAYS = ("u_params", "u_trainable", "u_fwd", "u_bwd", "u_bwd_w", "u_recovered", "u_whole", "u_rec", "u_co", "u_tied")


def _corun_extras(table: UnitTable, ranges, P: int, U: int):
    """co_f [P], u_co [P, U] (co_b per unit), co_c, co_i, co_w, co_bi [P] (see StageCosts): the
    fsr pass's hosts.

    A Backward visits its units last to first, and unit j's Backward hosts the Recover of
    unit j - 1 (the head's, on the last stage, the last decoder layer's). The stage's last
    unit has no Backward after it on the stage: when it is recovered, its Recover is issued
    after the stage's previous compute task -- a Forward's last unit in the 1F1B steady
    state, the previous Backward's first unit in the cool-down (zero bubble: its I or W,
    each its share of the Backward's phases, as ratc.lifecycle.placement prices them).
    """
    units, rec, guests = table.units, table.recovers, table.guests
    pairs = table.corun_cache

    def pair(host, guest):
        # keyed by identity (the phase tuples are the units' own, kept with them): hashing the
        # tuples themselves on every look-up was 8 % of a cold selective plan of llama2-70b
        key = (id(host), id(guest))
        hit = pairs.get(key)
        if hit is None or hit[0] is not host or hit[1] is not guest:
            hit = pairs[key] = (host, guest, extra(host, guest))
        return hit[2]

    def parts(unit):
        """_parts(unit), once per unit over the planner's tables (kept with the unit it is of)."""
        key = ("parts", id(unit))
        if key not in pairs or pairs[key][0] is not unit:
            pairs[key] = (unit, _parts(unit))
        return pairs[key][1]

    co_f, u_co, co_c, co_i, co_w, co_bi = (np.zeros(P), np.zeros((P, U)), *np.zeros((4, P)))
    for p, (s, e) in enumerate(ranges):
        for i in range(s + 1, e):
            if rec[i - 1]:
                u_co[p, i - s] = pair(units[i].bwd_phases, guests[i - 1])
                co_bi[p] += pair(parts(units[i])[0], guests[i - 1])
        if rec[e - 1]:
            guest = guests[e - 1]
            co_f[p] = pair(units[e - 1].fwd_phases, guest)
            co_c[p] = pair(units[s].bwd_phases, guest)
            co_i[p], co_w[p] = (pair(ph, guest) for ph in parts(units[s]))
    return co_f, u_co, co_c, co_i, co_w, co_bi


def _parts(unit) -> tuple:
    """(I, W) phases of a unit's zero-bubble Backward: its phases scaled to each part's share
    (the W its dW GEMMs' seconds), as ratc.lifecycle.placement prices an I or W host."""
    ph = unit.bwd_phases
    w = unit.bwd_weight / solo(ph) if solo(ph) > 0 else 0.0
    return scaled(ph, 1 - w), scaled(ph, w)


def stack(tables: list, which) -> StageCosts:
    """Tables of one P stacked per candidate: row i is tables[which[i]] ([C, P] and [C, P, U])."""
    U = max(t.u_params.shape[1] for t in tables)
    arrays = {f: np.stack([getattr(t, f) for t in tables])[which] for f in _ARRAYS}
    for f in _UNIT_ARRAYS:
        padded = np.zeros((len(tables), tables[0].P, U), dtype=np.result_type(*(getattr(t, f) for t in tables)))
        for k, t in enumerate(tables):
            a = getattr(t, f)
            padded[k, :, :a.shape[1]] = a
        arrays[f] = padded[which]
    return StageCosts(P=tables[0].P, T=0, balance="mixed", ranges=(), names=(), **arrays)

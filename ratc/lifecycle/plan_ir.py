"""The lowering's input as IR: a `life.plan` op holding a candidate and its per-unit costs.

Every number comes from the planner's own cost model (ratc.planner): unit times and
bytes from `Planner.units`, the layer-to-stage partition from `Planner.stages`, the
collectives from `ratc.planner.collectives` with the same links and training recipe the
planner's Eq. 9 / Eq. 12 use. So a lowered program and the planner read the same numbers.
"""

from __future__ import annotations

from ratc.errors import RatcError
from ratc.codegen.op_kernels import without
from ratc.ir.attributes import ByteSize
from ratc.ir.core import Block, Module, Operation
from ratc.planner.partition import stage_layout
from ratc.step.schedules import check_interleaved, rank_of
from ratc.step.config import parse_keep, schedule_shape_error
from ratc.step.plan import Plan
from ratc.step.unit_costs import UnitCosts
from ratc.step.rules import gathers, reduces_per_micro_batch, shards, syncs_by_reduce_scatter, tp_allreduces


def plan_op(profile, cand, platform, planner=None) -> Operation:
    """A `life.plan @plan` op for one candidate (a ratc.step.config.Candidate) under the
    planner's memory budget."""
    from ratc.planner.collectives import all_reduce, reduce_scatter
    from ratc.planner.search import Planner, unit_choices
    from ratc.planner.state_chain import gather_time, rank_links, state_costs

    planner = planner or Planner(profile, platform)
    recipe = planner.recipe
    P, D, T, Z, b, M = cand.P, cand.D, cand.T, cand.Z, cand.b, cand.A
    if min(P, D, T, b, M) < 1 or Z not in (0, 1, 2, 3):
        raise RatcError(f"invalid configuration {cand.label()}: P, D, T, b, A must be >= 1 and Z in 0..3")
    units = planner.units(T, P * D * T, b, cand.attn, P).units
    stage_of, chunk_of = _virtual_stages(planner, cand, units)
    choices = unit_choices(units, cand.keep) if cand.keep else None
    # (each decoder layer's letter as the plan writes it: what Plan.from_ir reads back)
    letters = dict(zip([i for i, u in enumerate(units) if u.decoder], parse_keep(cand.keep))) if cand.keep else {}
    elem = planner.elem
    act_bytes = b * profile.seq_len * profile.hidden * elem
    tp_link, dp_link, pp_link = rank_links(platform, D, T, P)
    tp_ar = float(all_reduce(T, act_bytes, tp_link))
    p2p = float(pp_link.send(act_bytes)) if P > 1 else 0.0
    ddr = platform.cluster.ddr_bandwidth
    ties = tie_groups(profile, len(units))
    tied_in = {i for g in ties for i in g}

    ops = []
    for i, u in enumerate(units):
        role = "decoder" if u.decoder else "embedding" if i == 0 else "head" if i == len(units) - 1 else None
        n_fwd, n_bwd = tp_allreduces(role, u.backward) if role else (0, 0)
        fwd_tp, bwd_tp = n_fwd * tp_ar, n_bwd * tp_ar
        grads = u.trainable * recipe.grad_bytes
        views = u.params * recipe.param_bytes
        sends = grads > 0
        group = next((g for g in ties if i in g), [i])
        state = state_costs(D, Z, u.trainable, u.tied, len({stage_of[j] for j in group}), dp_link, pp_link, ddr, recipe)
        attrs = {
            "index": i, "name": u.name, "stage": stage_of[i], "decoder": u.decoder,
            "fwd": b * u.fwd + fwd_tp, "fwd_compute": b * u.fwd_compute, "fwd_ddr": b * u.fwd_ddr,
            "bwd": b * u.bwd + bwd_tp, "bwd_compute": b * u.bwd_compute, "bwd_ddr": b * u.bwd_ddr,
            "input_bytes": _b(b * u.ckpt_bytes), "saved": _b(b * u.saved_bytes), "workspace": _b(b * u.workspace),
            "param": _b(views / shards(Z, D, "param")),
            "opt": _b(u.trainable * recipe.optimizer_bytes / shards(Z, D, "optimizer")),
            "grad": _b(grads / shards(Z, D, "grad")),
            # the shard each replica updates: sharded as the optimizer state is
            "shard": _b(grads / shards(Z, D, "optimizer")),
            "bucket": _b(grads if reduces_per_micro_batch(Z) else 0), "view": _b(views if gathers(Z) else 0),
            "sync": float(state.sync), "sync_kind": "reduce-scatter" if syncs_by_reduce_scatter(Z) else "all-reduce",
            # (the planner prices a stage's per-micro-batch reduce-scatter as one message)
            "reduce": float(reduce_scatter(D, grads, dp_link)) if reduces_per_micro_batch(Z) and sends else 0.0,
            "update": state.update, "prefetch": float(state.prefetch),
            "gather": float(gather_time(D, Z, u.params, dp_link, recipe)),
            # What the codegen pass needs: kernel calls per micro-batch and the seconds no
            # kernel runs (roofline ops, attention's DDR streams, TP all-reduces).
            "fwd_kernels": _calls(u.kernels.fwd, b), "bwd_kernels": _calls(u.kernels.bwd, b),
            "fwd_other": b * u.kernels.fwd_other + fwd_tp, "bwd_other": b * u.kernels.bwd_other + bwd_tp,
            # What the fsr pass co-schedules: per micro-batch, [compute s, DDR s, ...] of the
            # forward's and the backward's phases in execution order (ratc.planner.corun).
            "fwd_phases": _flat(u.fwd_phases, b), "bwd_phases": _flat(u.bwd_phases, b),
            # ... and the headroom a Recover streaming into this unit's Backward needs
            "stream": _b(b * u.stream),
        }
        attrs.update(chunk_of[i])
        attrs.update(_zero_bubble(cand, u, b))
        if choices is not None and u.decoder and letters[i] != "layer":
            attrs.update(_keeps(u, choices[i], b))
        if not sends:
            attrs["frozen"] = True      # nothing trained: no gradient, no state chain
        elif i in tied_in:
            # the tied part of the synchronized gradient (its shard under ZeRO >= 1, aligned
            # across the copies), summed over the copies' stages before the update
            attrs["tied"] = _b(u.tied * recipe.grad_bytes / shards(Z, D, "optimizer"))
            attrs["tie"] = float(state.tie)
        ops.append(Operation("life.unit", attributes=UnitCosts(**{k: _num(v) for k, v in attrs.items()}).attributes()))
    attrs = {"model": profile.name, "platform": platform.name, **Plan(cand, planner.budget).attributes(),
             "seq_len": profile.seq_len, "p2p": p2p}
    if ties:
        attrs["ties"] = ties
    return Operation("life.plan", attributes=attrs, sym_name="plan", region=Block(ops))


def _zero_bubble(cand, u, b: int) -> dict:
    """A unit's attributes under a zero-bubble schedule (none otherwise): its W's seconds and
    what its I keeps for it (its weighted GEMMs' output gradients and inputs), and the
    kernels codegen charges each (W its dW GEMMs, I the rest of the Backward)."""
    if cand.sched == "1f1b":
        return {}
    return {"bwd_w": b * u.bwd_weight, "w_grads": _b(b * u.wgrad_bytes), "w_inputs": _b(b * u.wx_bytes),
            "bwd_i_kernels": _calls(without(u.kernels.bwd, u.kernels.wgrad), b),
            "bwd_w_kernels": _calls(u.kernels.wgrad, b)}


def _virtual_stages(planner, cand, units) -> tuple[list, list]:
    """Per unit, its stage (rank) and {"chunk": c} when interleaved (v > 1; else {}): the
    planner's own partition into P * v virtual stages, virtual stage vs on rank vs % P (ZBV:
    in a V, ratc.step.schedules.rank_of) as chunk vs // P. Refuses an interleaved candidate
    no program can run."""
    P, v = cand.P, cand.v
    decoders = sum(u.decoder for u in units)
    check_interleaved(P, v, cand.A, cand.sched)
    if schedule_shape_error(cand.sched, v):
        raise RatcError(f"{cand.label()}: {schedule_shape_error(cand.sched, v)}")
    if v > 1 and P * v > decoders:
        raise RatcError(f"{cand.label()}: P * v = {P * v} virtual stages need at least as many decoder "
                        f"layers, the model has {decoders}")
    ranges = planner.stages(P * v, cand.T, cand.balance, P * cand.D * cand.T, cand.b, "", cand.attn,
                            stage_layout(P, v, cand.sched)).ranges
    virtual_of = [vs for vs, (s, e) in enumerate(ranges) for _ in range(s, e)]
    return ([rank_of(vs, P, cand.sched) for vs in virtual_of],
            [{"chunk": vs // P} if v > 1 else {} for vs in virtual_of])


def _keeps(u, choice: str, b: int) -> dict:
    """A decoder unit's `keep` (when not its input) and, when selective, its attention core's
    costs per micro-batch (ratc.planner.opcost.UnitCost.core_*)."""
    if choice != "selective":
        return {"keep": choice}
    return {"keep": choice, "core": _b(b * u.core_bytes), "core_fwd": b * u.core_fwd,
            "core_compute": b * u.core_compute, "core_ddr": b * u.core_ddr,
            "core_kernels": _calls(u.kernels.core, b), "core_other": b * u.kernels.core_other,
            "core_phases": _flat(u.core_phases, b)}


def tie_groups(profile, n_units: int) -> list[list[int]]:
    """The plan's tie groups: unit indices of each parameter the profile's embedding and head
    both hold (the frontend ties only those), when it is trained."""
    roles = {profile.pre.name: 0, profile.post.name: n_units - 1}
    frozen = {(lp.name, n) for lp in (profile.pre, profile.post) for n in lp.frozen}
    groups = []
    for holders in profile.ties().values():
        units = sorted({roles[layer] for layer, name in holders if (layer, name) not in frozen})
        if len(units) > 1 and units not in groups:
            groups.append(units)
    return groups


def plan_module(profile, cand, platform, planner=None) -> Module:
    """A module holding only the plan: the input of `lower-to-life`."""
    name = f"{profile.name}_P{cand.P}_D{cand.D}"
    return Module(name, {}, [plan_op(profile, cand, platform, planner)])


def _calls(kernels, b: int) -> list:
    """[[kind, *shape, calls per micro-batch], ...] of a unit's kernels."""
    return [[kind, *shape, b * n] for (kind, shape), n in kernels]


def _flat(phases, b: int) -> list:
    return [float(b * x) for ph in phases for x in ph]


def _b(x) -> ByteSize:
    # Byte counts from per-sequence profiles times b are whole; sharding over D may not be.
    return ByteSize(int(round(float(x))))


def _num(v):
    """Plain Python numbers (the planner's collectives return numpy scalars)."""
    if isinstance(v, (bool, str, ByteSize, int, list)):
        return v
    return float(v)

"""Algorithm 2: enumerate candidates, prune by memory (Eq. 10), rank by step time (Eq. 12/13)."""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter

import numpy as np

from ratc.errors import RatcError
from ratc.io import progress_shown
from ratc.planner.collectives import check_algorithm
from ratc.planner.config import CandidateBatch
from ratc.step.config import PREF_POLICIES, RECIPE, Candidate, parse_keep, schedule_shape_error
from ratc.step.schedules import check_interleaved, whole_rounds
from ratc.planner.exec_profile import load_exec_profile
from ratc.planner.memory import stage_memory
from ratc.planner.opcost import elem_bytes, model_units
from ratc.planner.partition import stage_layout
from ratc.planner.stages import UnitTable, stack, stage_costs
from ratc.planner.strategies import Strategy, get_strategy
from ratc.units import format_bytes

MAX_MICRO_BATCH = 16   # largest micro-batch (sequences) enumerated
INTERLEAVE_ROUNDS = 4  # most rounds (of P micro-batches) the search interleaves (Planner._interleaves)
# A candidate's every dimension but its state policy (costed once for all policies).
_BUT_PREF = attrgetter(*(f.name for f in fields(Candidate) if f.name != "pref"))


@dataclass(frozen=True)
class Evaluated:
    """One candidate with its predicted step time (Eq. 12) and peak stage memory (Eq. 9)."""

    cand: Candidate
    t_step: float
    t_1f1b: float
    e_comm: float
    e_upd: float
    e_pref: float
    e_rec: float
    peak_mem: float
    peak_stage: int
    mem_state: float
    mem_act: float
    mem_buf: float
    feasible: bool

    def as_dict(self) -> dict:
        return {"config": self.cand.as_dict(), "label": self.cand.label(), "feasible": self.feasible,
                "step_time_s": self.t_step, "t_1f1b_s": self.t_1f1b, "e_comm_s": self.e_comm,
                "e_upd_s": self.e_upd, "e_pref_s": self.e_pref, "e_rec_s": self.e_rec,
                "peak_memory_bytes": self.peak_mem, "peak_stage": self.peak_stage,
                "memory_at_peak_stage": {"state": self.mem_state, "activations": self.mem_act,
                                         "buffers": self.mem_buf}}


@dataclass
class PlanResult:
    """The ranked feasible candidates and what was pruned."""

    model: str
    platform: str
    clusters: int
    global_batch: int
    strategy: str
    budget: float
    feasible: list = field(default_factory=list)     # sorted by step time
    infeasible: list = field(default_factory=list)   # sorted by peak memory
    evaluated: int = 0
    seconds: float = 0.0
    pipeline: int | None = None      # P when it was not searched
    pipeline_source: str = "searched"   # searched | fixed (by the caller) | ratrain (held at RATrain's P)
    pipeline_why: str = ""           # why a baseline that holds RATrain's P searched every P instead
    params: int = 0                  # the model's parameters ...
    trainable: int = 0               # ... and those not frozen (requires_grad)

    def pipeline_note(self) -> str:
        """How P was chosen, for reports."""
        if self.pipeline_source == "ratrain":
            return (f"P={self.pipeline}, held at RATrain's pipeline degree for this request "
                    f"(as in the paper's Table 2 baselines; --pipeline any searches every P)")
        if self.pipeline_source == "fixed":
            return f"P={self.pipeline}, fixed by --pipeline"
        return f"searched ({self.pipeline_why})" if self.pipeline_why else "searched"

    @property
    def best(self) -> Evaluated:
        return self.feasible[0]


def _table_key(c: Candidate) -> tuple:
    """(T, balance, ranks, b, keep, attn): what a candidate's stage table depends on besides P."""
    return c.T, c.balance, c.P * c.D * c.T, c.b, c.keep, c.attn


def _one_of(name: str, values) -> str:
    """'T = 1', or 'T in 1, 2' (the allowed values of a request's dimension, for messages)."""
    values = list(values)
    return f"{name} = {values[0]}" if len(values) == 1 else f"{name} in {', '.join(map(str, values))}"


class Planner:
    """Plans one model on one platform; caches per-TP unit costs and per-P stage tables."""

    def __init__(self, model, platform, exec_profile=None, budget: float | None = None, recipe=RECIPE,
                 micro_batches: tuple = tuple(range(1, MAX_MICRO_BATCH + 1))):
        check_algorithm(platform)
        self.micro_batches = tuple(micro_batches)
        self.model = model
        self.platform = platform
        self.exec_profile = exec_profile or load_exec_profile(platform)
        self.budget = float(budget if budget is not None else platform.cluster.memory_budget)
        # a backend with its own recipe and element size (a host runs fp32) prices its own bytes
        self.recipe = self.exec_profile.recipe if recipe is RECIPE and self.exec_profile.recipe else recipe
        self.elem = self.exec_profile.element_bytes or elem_bytes(model.dtype)
        self._units: dict = {}
        self._stages: dict = {}
        self._held: dict = {}       # (clusters, global batch) -> RATrain's P, or None

    def with_exec_profile(self, exec_profile) -> "Planner":
        """The same planner (budget, recipe, micro-batch sizes) with another execution profile."""
        if exec_profile == self.exec_profile:
            return self
        return Planner(self.model, self.platform, exec_profile, self.budget, self.recipe, self.micro_batches)

    @functools.cached_property
    def layers(self) -> int:
        """The model's decoder layers (read per candidate group: counted once)."""
        return self.model.num_layers

    def units(self, T: int, ranks: int = 1, b: int = 1, attn: str = "paper", pipeline: int = 1):
        """The unit table at tensor-parallel degree T of a program of `ranks` processes running
        micro-batches of `b` sequences over `pipeline` pipeline ranks, per sequence (a host
        profile's ranks share its cores, its tasks pay fixed costs once per micro-batch, and
        those grow with the bytes a rank's step moves, its share of the model; a DSP profile's
        units depend on none of these), with the attention kernels `attn`."""
        key = (T, (ranks, b, pipeline) if self._shaped else None, attn)
        if key not in self._units:
            # (each rank holding 1 / (pipeline x T) of the model)
            profile = self.exec_profile.for_program(ranks, b, self.model.param_count / (pipeline * T))
            self._units[key] = UnitTable.of(model_units(self.model, profile, self.platform, T, attn))
        return self._units[key]

    @functools.cached_property
    def _shaped(self) -> bool:
        """Whether the execution profile depends on the program (a host's: its ranks, micro-batch
        and share of the model; a DSP profile's never does)."""
        return self.exec_profile.for_program(2, 2, 1.0) is not self.exec_profile

    def stages(self, P: int, T: int, balance: str, ranks: int = 1, b: int = 1, keep: str = "",
               attn: str = "paper", layout: tuple = ()):
        """The stage tables of (P, T, balance) of a program of `ranks` processes running
        micro-batches of `b` sequences, the decoder layers keeping what `keep` says; with
        v > 1, P counts virtual stages and `layout` gives each one's rank (partition.stage_layout)."""
        key = (P, T, balance, (ranks, b) if self._shaped else None, keep, attn, layout)
        if key not in self._stages:
            table = self.units(T, ranks, b, attn, layout[0] if layout else P)
            if keep:        # (what layers keep changes no partition: the default's)
                self._stages[key] = stage_costs(table.with_choices(unit_choices(table.units, keep)), P, T, balance,
                                                self.recipe, self.stages(P, T, balance, ranks, b, "", attn, layout).ranges)
            else:
                self._stages[key] = stage_costs(table, P, T, balance, self.recipe, layout=layout)
        return self._stages[key]

    # -- the search space ------------------------------------------------------------
    def space(self, clusters: int, global_batch: int, strategy: Strategy) -> dict:
        """Candidates grouped by P (costed together); every cluster is used: P * D * T = clusters."""
        micro = self.micro_batches
        groups: dict = {}
        for T in strategy.tp:
            for P in range(1, self.layers + 1):
                if clusters % (P * T):
                    continue
                D = clusters // (P * T)
                if global_batch % D:
                    continue
                per_replica = global_batch // D
                zeros = strategy.zero if D > 1 else strategy.zero[:1]
                for balance in strategy.balance:
                    if balance != strategy.balance[0] and self._same_partition(P, T, strategy.balance[0], balance):
                        continue
                    cands = [Candidate(P, D, T, Z, b, per_replica // b, act, pref, balance, v=v, sched=s, corun=h,
                                       attn=a)
                             for a in self._attentions(strategy)
                             for b in micro if b <= per_replica and per_replica % b == 0
                             for Z in zeros for act in strategy.act for pref in strategy.pref
                             for v in strategy.v if v == 1 or self._interleaves(P, v, per_replica // b)
                             for s in (strategy.sched if v > 1 else ("1f1b",))
                             if not schedule_shape_error(s, v)
                             for h in (strategy.coruns if s != "1f1b" and act == "fsr" else ("prev",))]
                    if cands:
                        groups.setdefault(P, []).extend(cands)
        return groups

    def _attentions(self, strategy: Strategy) -> tuple:
        """The attention kernels a strategy tries here: fused ones only where kernels are generated."""
        return strategy.attn if self.platform.has_kernels else strategy.attn[:1]

    def _interleaves(self, P: int, v: int, M: int) -> bool:
        """Whether the search proposes a candidate with v > 1 chunks per rank: one the planner
        prices, with at most INTERLEAVE_ROUNDS rounds of P micro-batches (beyond them 1F1B's
        bubble, (P-1)/(M+P-1), all interleaving can shrink, is under a fifth of the step, and
        pricing the long interleaved orders costs the search its speed)."""
        return (P >= 2 and P * v <= self.layers and whole_rounds(P, M)
                and M <= INTERLEAVE_ROUNDS * P)

    def _same_partition(self, P: int, T: int, a: str, b: str) -> bool:
        return self.stages(P, T, a).ranges == self.stages(P, T, b).ranges

    def check_request(self, clusters: int, global_batch: int, strategy: Strategy, P: int | None = None) -> None:
        """Explain, with alternatives, why a request (with P fixed, if given) has no candidate at all."""
        if P is not None and P > self.layers:
            raise RatcError(f"pipeline degree P={P} exceeds the model's {self.layers} layers (P <= {self.layers})")
        Ps = range(1, self.layers + 1) if P is None else (P,)
        shapes = [(p, clusters // (p * T), T) for T in strategy.tp for p in Ps if clusters % (p * T) == 0]
        if not shapes:
            reach = max(64, 2 * max(Ps) * max(strategy.tp))
            near = [n for n in range(max(1, clusters - reach), clusters + reach + 1)
                    if any(n % (p * T) == 0 for T in strategy.tp for p in Ps)]
            which = f"P <= {self.layers} layers" if P is None else f"P={P}"
            raise RatcError(f"{clusters} clusters cannot be split into P x D x T with {_one_of('T', strategy.tp)} "
                            f"and {which}; nearby cluster counts that can: "
                            f"{', '.join(map(str, sorted(near, key=lambda n: (abs(n - clusters), n))[:6]))}")
        ds = sorted({D for _, D, _ in shapes})
        per_replica = sorted({global_batch // D for D in ds if global_batch % D == 0})
        if per_replica:
            raise RatcError(f"no allowed micro-batch size ({', '.join(map(str, self.micro_batches))}) divides the "
                            "per-replica batch "
                            f"({', '.join(map(str, per_replica))} sequences for {_one_of('D', ds)}); "
                            "allow micro-batch 1")
        fits = [g for g in range(global_batch + 1, global_batch + 1 + ds[-1] * 4) if any(g % D == 0 for D in ds)]
        raise RatcError(f"global batch {global_batch} is not divisible by any data-parallel degree D "
                        f"possible on {clusters} clusters ({_one_of('D', ds)}); the next batches that are: "
                        f"{', '.join(map(str, fits[:4]))}")

    # -- costing -------------------------------------------------------------------
    def _stacked(self, cands: list):
        keys = sorted({_table_key(c) for c in cands})
        index = {k: i for i, k in enumerate(keys)}
        c = cands[0]
        tables = [self.stages(c.P * c.v, *key, layout=stage_layout(c.P, c.v, c.sched)) for key in keys]
        return stack(tables, np.array([index[_table_key(c)] for c in cands]))

    def evaluate_group(self, cands: list, choose_keep: bool = False, best: float = math.inf) -> list:
        """Memory and step time for candidates sharing P, vectorized over all of them; with
        `choose_keep`, each recomputing candidate with memory to spare takes the per-layer save
        choices that recompute least within it (ratc.planner.keep), when that is faster --
        tried where it can beat `best` (the fastest feasible step so far) and this group's."""
        evs, total = self._costed(cands)
        if choose_keep:
            evs = self._keeps(evs, total, min([best] + [e.t_step for e in evs if e.feasible]))
        return evs

    def saves(self, cand: Candidate) -> list[str]:
        """What each decoder layer of a candidate keeps and recomputes, by runs of layers."""
        from ratc.planner.keep import describe
        ranks = cand.P * cand.D * cand.T
        units = self.units(cand.T, ranks, cand.b, cand.attn, cand.P).units
        if cand.act == "full":
            choices = ["full"] * len(units)
        else:
            choices = unit_choices(units, cand.keep) if cand.keep else ["layer" if u.recovers else "full" for u in units]
        ranges = self.stages(cand.P, cand.T, cand.balance, ranks, cand.b, "", cand.attn).ranges
        return describe(units, ranges, choices, cand.b) + self._fused_note(cand)

    def _fused_note(self, cand: Candidate) -> list[str]:
        """What fused attention changes of every layer's saved tensors ([] under the paper's kernels)."""
        if cand.attn != "fused":
            return []
        from ratc.units import format_bytes
        ranks = cand.P * cand.D * cand.T
        pick = next(k for k, u in enumerate(self.units(cand.T, ranks, cand.b, pipeline=cand.P).units) if u.decoder)
        paper, fused = (self.units(cand.T, ranks, cand.b, a, cand.P).units[pick] for a in ("paper", "fused"))
        less = format_bytes(cand.b * (paper.saved_bytes - fused.saved_bytes))
        return [f"  attention (every layer): fused kernels: a layer that keeps its attention keeps Q, K, V and the "
                f"rows' max and reciprocal softmax sum, not the s x s probabilities ({less} less per micro-batch), "
                "which its Backward recomputes on chip"]

    def _keeps(self, evs: list, total: np.ndarray, best: float) -> list:
        """evs with each recomputing, feasible candidate replaced by its best per-layer save
        choices under its stages' slack, where that is faster and fits. A candidate whose
        recovery-free 1F1B makespan (which no save choice changes) is no faster than `best`
        cannot win with any, so keeps its own."""
        from ratc.planner.keep import choose
        from ratc.planner.memory import n_in_flight
        rows = [k for k, e in enumerate(evs) if e.feasible and e.cand.act != "full" and not e.cand.keep
                and e.t_1f1b < best and e.cand.v == 1]     # (keep's in-flight counts are 1F1B's)
        tried = []
        by_table: dict = {}
        for k in rows:
            c = evs[k].cand
            by_table.setdefault((c.T, c.balance, c.P * c.D * c.T, c.b, c.attn), []).append(k)
        for (T, balance, ranks, size, attn), ks in by_table.items():
            P = evs[ks[0]].cand.P
            units = self.units(T, ranks, size, attn, P).units
            ranges = self.stages(P, T, balance, ranks, size, "", attn).ranges
            flight = np.stack([n_in_flight(P, evs[k].cand.A) for k in ks]).astype(float)
            b = np.array([[evs[k].cand.b] for k in ks], dtype=float)
            texts = choose(units, ranges, self.budget - total[ks], flight, b)
            tried += [(k, replace(evs[k].cand, keep=t)) for k, t in zip(ks, texts) if t]
        if not tried:
            return evs
        better, _ = self._costed([c for _, c in tried])
        evs = list(evs)
        for (k, _), e in zip(tried, better):
            if e.feasible and e.t_step < evs[k].t_step:
                evs[k] = e
        return evs

    def _reordered(self, feasible: list) -> list:
        """The feasible plans with each FSR keep reordered where that is faster (_reorders):
        tried on plans whose step less all its exposed recovery, the most a reorder can
        remove, is below the fastest plan's."""
        top = min((e.t_step for e in feasible), default=math.inf)
        by_p: dict = {}
        for k, e in enumerate(feasible):
            if e.cand.keep and e.cand.act == "fsr" and e.t_step - e.e_rec < top:
                by_p.setdefault(e.cand.P, []).append((k, e.cand))
        for tried in by_p.values():
            feasible = self._reorders(feasible, tried)
        return feasible

    def _reorders(self, evs: list, tried: list) -> list:
        """evs with each tried (row, FSR candidate with a keep) reordered within stages where
        that is faster and fits: every single-stage reorder (ratc.planner.keep.stage_orders) is
        costed, then the winners of all stages together; the fastest that fits stays."""
        from ratc.planner.keep import stage_orders, with_changes
        alts = []
        keeps = dict(tried)
        for k, c in tried:
            if c.act == "fsr" and c.keep:
                ranks = c.P * c.D * c.T
                units = self.units(c.T, ranks, c.b, c.attn, c.P).units
                ranges = self.stages(c.P, c.T, c.balance, ranks, c.b, "", c.attn).ranges
                alts += [(k, p, ch) for p, ch in stage_orders(units, ranges, c.keep)]
        if not alts:
            return evs
        costed, _ = self._costed([replace(keeps[k], keep=with_changes(keeps[k].keep, ch)) for k, _, ch in alts])
        won: dict = {}          # row -> stage -> (its fastest reorder that fits, the changes)
        for (k, p, ch), e in zip(alts, costed):
            if e.feasible and e.t_step < won.get(k, {}).get(p, (evs[k], None))[0].t_step:
                won.setdefault(k, {})[p] = (e, ch)
        evs = list(evs)
        for k, stages in won.items():
            evs[k] = min((e for e, _ in stages.values()), key=attrgetter("t_step"))
        together = [(k, {x: y for _, ch in stages.values() for x, y in ch.items()})
                    for k, stages in won.items() if len(stages) > 1]
        if together:
            both, _ = self._costed([replace(keeps[k], keep=with_changes(keeps[k].keep, ch))
                                    for k, ch in together])
            for (k, _), e in zip(together, both):
                if e.feasible and e.t_step < evs[k].t_step:
                    evs[k] = e
        return evs

    def _by_v(self, cands: list) -> tuple:
        """_costed over candidates of several v (or schedules, FSR hosts), a batch per (v,
        schedule, host), in the candidates' order."""
        evs, total = [None] * len(cands), np.zeros((len(cands), cands[0].P))
        for v in sorted({(c.v, c.sched, c.corun) for c in cands}):
            ks = [k for k, c in enumerate(cands) if (c.v, c.sched, c.corun) == v]
            part, part_total = self._costed([cands[k] for k in ks])
            for k, e in zip(ks, part):
                evs[k] = e
            total[ks] = part_total
        return evs, total

    def _costed(self, cands: list) -> tuple:
        """(Evaluated per candidate, [C, P] peak bytes per stage) of candidates sharing P.

        Only the state chain's tail depends on the state policy, and step_time returns it for
        every policy, so candidates that differ in nothing else are costed once.
        """
        from ratc.planner.timing import step_time
        _check_interleaved(cands, self.layers)
        if len({(c.v, c.sched, c.corun) for c in cands}) > 1:    # (a batch shares v: its stage tables are P*v stages)
            return self._by_v(cands)
        reps, inv = {}, []
        for c in cands:
            inv.append(reps.setdefault(_BUT_PREF(c), (len(reps), c))[0])
        distinct = [c for _, c in reps.values()]
        sc = self._stacked(distinct)
        batch = CandidateBatch.of(distinct)
        m = self.model
        mem = stage_memory(sc, batch, m.seq_len * m.hidden * self.elem, self.recipe)
        st = step_time(sc, batch, self.platform, m.seq_len, m.hidden, self.elem, self.recipe)
        inv = np.array(inv)
        total = mem.total[inv]
        peak_stage = total.argmax(axis=1)
        rows = np.arange(len(cands))
        peak = total[rows, peak_stage]
        tails = st.state_by_pref[inv, :, [PREF_POLICIES.index(c.pref) for c in cands]]   # [C, 3]
        t_1f1b, e_rec = st.t_1f1b[inv], st.e_rec[inv]
        e_comm, e_upd, e_pref = st.e_link[inv] + tails[:, 0], tails[:, 1], tails[:, 2]
        t_step = t_1f1b + e_comm + e_upd + e_pref + e_rec     # Eq. 12, as StepTime.t_step adds it
        state = mem.state[inv, peak_stage]
        act = mem.activations[inv, peak_stage]
        buf = mem.buffers[inv, peak_stage]
        columns = (t_step, t_1f1b, e_comm, e_upd, e_pref, e_rec, peak, peak_stage,
                   state, act, buf, peak <= self.budget)
        return [Evaluated(c, *row) for c, row in zip(cands, zip(*(col.tolist() for col in columns)))], total

    def detail(self, cand: Candidate):
        """(stage costs, per-stage memory, timing pieces) of one candidate, for reports and the VM
        (with v > 1: costs and task times per virtual stage, memory and state chain per rank)."""
        from ratc.planner.timing import step_time
        _check_interleaved([cand], self.layers)
        sc = self.stages(cand.P * cand.v, *_table_key(cand), layout=stage_layout(cand.P, cand.v, cand.sched))
        batch = CandidateBatch.of([cand])
        m = self.model
        mem = stage_memory(sc, batch, m.seq_len * m.hidden * self.elem, self.recipe)
        st = step_time(sc, batch, self.platform, m.seq_len, m.hidden, self.elem, self.recipe)
        return sc, mem, st

    def plan(self, clusters: int, global_batch: int, strategy: str | Strategy = "ratrain",
             progress: bool = False, pipeline: int | str | None = None) -> PlanResult:
        """Algorithm 2 over the strategy's space at one cluster count.

        `pipeline`: a number fixes P, "any" searches every P, None leaves it to the strategy
        (a baseline with hold_pipeline keeps RATrain's P for this request, when RATrain has a plan).
        """
        strat = get_strategy(strategy) if isinstance(strategy, str) else strategy
        if clusters < 1 or global_batch < 1:
            raise RatcError(f"clusters ({clusters}) and global batch ({global_batch}) must be positive")
        from ratc.limits import MAX_CLUSTERS
        MAX_CLUSTERS.check(clusters, "planning")
        start = time.perf_counter()
        groups = self.space(clusters, global_batch, strat)
        if not groups:
            self.check_request(clusters, global_batch, strat,
                               None if pipeline in (None, "any") else _check_pipeline(pipeline))
        P, source, why = self._pipeline(clusters, global_batch, strat, pipeline)
        if source == "ratrain" and P not in groups:   # e.g. P x T > N
            P, source, why = None, "searched", f"RATrain's P={P} has no {strat.name} candidate"
        if P is not None:
            if P not in groups:
                raise RatcError(f"pipeline degree P={P} has no {strat.name} candidate on {clusters} clusters "
                                f"with global batch {global_batch}; P values that have: "
                                f"{', '.join(map(str, sorted(groups)))}")
            groups = {P: groups[P]}
        result = PlanResult(self.model.name, self.platform.name, clusters, global_batch, strat.name, self.budget,
                            pipeline=P, pipeline_source=source, pipeline_why=why,
                            params=self.model.param_count, trainable=self.model.trainable_count)
        items = list(groups.values())
        if progress and progress_shown():
            from tqdm import tqdm
            items = tqdm(items, desc=f"planning {clusters} clusters", unit="group", leave=False, disable=None)
        fastest = math.inf
        for cands in items:
            for ev in self.evaluate_group(cands, strat.keep, fastest):
                if ev.feasible:
                    fastest = min(fastest, ev.t_step)
                (result.feasible if ev.feasible else result.infeasible).append(ev)
                result.evaluated += 1
        if strat.keep:
            result.feasible = self._reordered(result.feasible)
        # Equal to the microsecond is a tie (the policies' tails are computed differently and can
        # differ by float rounding alone). Among equally fast plans the richer state policy wins
        # (deadline > layerwise > bulk: under ZeRO-2 bulk and layerwise compile to the same
        # program, and RATrain's is deadline), then the leaner one: its headroom absorbs memory
        # the model does not see (e.g. ZeRO-2 over an equally fast ZeRO-1). Remaining ties keep
        # enumeration order, which is deterministic.
        result.feasible.sort(key=lambda e: (round(e.t_step, 6), -PREF_POLICIES.index(e.cand.pref), e.peak_mem))
        result.infeasible.sort(key=lambda e: e.peak_mem)
        result.seconds = time.perf_counter() - start
        return result

    def _pipeline(self, clusters: int, global_batch: int, strat: Strategy, pipeline) -> tuple:
        """(P or None, how it is chosen, why a held P is not): fixed by the caller, held at
        RATrain's, or searched."""
        if pipeline == "any":
            return None, "searched", ""
        if pipeline is not None:
            return _check_pipeline(pipeline), "fixed", ""
        if not strat.hold_pipeline:
            return None, "searched", ""
        key = (clusters, global_batch)
        if key not in self._held:   # every baseline of a request holds the same P: plan RATrain once
            ratrain = get_strategy("ratrain")
            anchor = self.plan(clusters, global_batch, ratrain) if self.space(clusters, global_batch, ratrain) else None
            self._held[key] = anchor.best.cand.P if anchor is not None and anchor.feasible else None
        if self._held[key] is not None:
            return self._held[key], "ratrain", ""
        return None, "searched", "RATrain has no feasible plan to hold the P of"

    def require_feasible(self, result: PlanResult) -> PlanResult:
        """The result, or an error saying what would fit instead."""
        if result.feasible:
            return result
        least = result.infeasible[0]
        hint = ""
        fixed = result.pipeline if result.pipeline_source == "fixed" else None
        fit = self.min_clusters(result.global_batch, result.strategy, limit=max(4 * result.clusters, 1024),
                                pipeline=fixed)
        if fit is not None:
            hint = (f"; the smallest cluster count that fits is {fit.clusters} "
                    f"({fit.best.cand.label()}, peak {format_bytes(fit.best.peak_mem)})")
        raise RatcError(
            f"no configuration of {result.model} fits the {format_bytes(result.budget)} memory budget on "
            f"{result.clusters} clusters (strategy {result.strategy}); the leanest, {least.cand.label()}, needs "
            f"{format_bytes(least.peak_mem)} on stage {least.peak_stage}, so a budget of at least "
            f"{format_bytes(least.peak_mem)} would fit{hint}")

    def cluster_ladder(self, limit: int) -> range:
        """Cluster counts tried by --min-clusters: whole nodes (multiples of clusters_per_node).

        Counts below the state-only bound are skipped: however P, D, T and Z split it, the
        training state totals (2 + 2 + 12) bytes per parameter (2 per frozen one), so N * budget
        must hold it.
        """
        return range(self.ladder_start(), limit + 1, self.platform.network.clusters_per_node)   # lazy: limits may be huge

    def ladder_start(self) -> int:
        """The first count of the cluster ladder: the fewest whole nodes that can hold the state."""
        step = self.platform.network.clusters_per_node
        r = self.recipe
        m = self.model
        floor = (m.param_count * r.param_bytes + m.trainable_count * (r.grad_bytes + r.optimizer_bytes)) / self.budget
        return max(step, step * math.ceil(floor / step))

    def min_clusters(self, global_batch: int, strategy: str | Strategy = "ratrain", limit: int = 4096,
                     progress: bool = False, pipeline: int | str | None = None):
        """The first cluster count on the ladder with a feasible plan (or None up to limit).

        `pipeline` as in plan(); a fixed P skips the counts it cannot divide.
        """
        strat = get_strategy(strategy) if isinstance(strategy, str) else strategy
        if pipeline not in (None, "any"):
            _check_pipeline(pipeline)
        ladder = self.cluster_ladder(limit)
        if progress and progress_shown():
            from tqdm import tqdm
            ladder = tqdm(ladder, desc="min clusters", unit="count", leave=False, disable=None)
        for n in ladder:
            groups = self.space(n, global_batch, strat)
            if not groups or (isinstance(pipeline, int) and pipeline not in groups):
                continue
            res = self.plan(n, global_batch, strat, pipeline=pipeline)
            if res.feasible:
                return res
        return None


def unit_choices(units, keep: str) -> tuple:
    """Each unit's save choice under a plan's `keep` text (one letter run per decoder layer)."""
    layers = [i for i, u in enumerate(units) if u.decoder]
    try:
        wanted = parse_keep(keep)
    except ValueError as e:
        raise RatcError(str(e)) from None
    if len(wanted) != len(layers):
        raise RatcError(f"keep={keep} names {len(wanted)} decoder layers; the model has {len(layers)}")
    out = ["layer" if u.recovers else "full" for u in units]
    for i, x in zip(layers, wanted):
        if x == "selective" and not units[i].selective:
            raise RatcError(f"keep={keep}: decoder layer {i} ({units[i].name}) has no attention core to recompute "
                            "selectively")
        out[i] = x if units[i].recovers else "full"
    return tuple(out)


def _check_pipeline(pipeline) -> int:
    """A caller's fixed pipeline degree, or a clear error."""
    if isinstance(pipeline, bool) or not isinstance(pipeline, int) or pipeline < 1:
        raise RatcError(f"pipeline degree must be a positive integer or 'any', got {pipeline!r}")
    return pipeline


def _check_interleaved(cands, layers: int) -> None:
    """Refuse v > 1 where interleaved 1F1B cannot run, and a schedule its v cannot run."""
    for c in cands:
        if c.v > 1:
            if c.P * c.v > layers:
                raise RatcError(f"{c.label()}: P x v = {c.P * c.v} virtual stages exceed the model's "
                                f"{layers} decoder layers (at most one virtual stage per layer)")
            check_interleaved(c.P, c.v, c.A, c.sched)
        if schedule_shape_error(c.sched, c.v):
            raise RatcError(f"{c.label()}: {schedule_shape_error(c.sched, c.v)}")

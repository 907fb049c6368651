"""`ratc launch --measure`: a real run's step time and per-task-kind times against the
planner's and the system VM's predictions of the same program.

Per task kind the comparable figure is a stage's total per step: the seconds one replica of
stage p spends in tasks of that kind during one step. The planner costs whole stages (its
GradSync, UpdateShard and PrefetchW are per stage, not per unit), and a per-step total does
not depend on how finely the runtime and the VM cut the same work into tasks.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ratc.errors import RatcError
from ratc.lifecycle.actions import Action, parse

# Rows in this order: compute first, then transfers and collectives, then the state chain.
KINDS = ("forward", "backward", "recover", "send", "grad_sync", "reduce", "tie_sum", "gather", "update",
         "prefetch")
COMPUTE = frozenset({"forward", "backward", "recover", "update"})
# action kind (ratc.lifecycle.actions) -> the task kind a row counts it as
# (a zero-bubble Backward's I and W are its two halves: one backward row)
_KIND_OF = {"F": "forward", "B": "backward", "I": "backward", "W": "backward", "R": "recover", "SEND_F": "send", "SEND_B": "send",
            "RECV_F": "recv", "RECV_B": "recv", "G": "grad_sync", "RS": "reduce", "AG": "gather",
            "U": "update", "P": "prefetch", "T": "tie_sum", "PARAM": "marker", "OPT": "marker",
            "STEP_END": "marker"}


def task_kind(name: str) -> tuple[int, str]:
    """(stage, kind) of a task named in action notation, e.g. '1RECV_B3' -> (1, 'recv'); the
    VM and the runtime name tasks alike (ratc.lifecycle.actions)."""
    a = parse(name)
    return a.stage, _KIND_OF[a.kind]


@dataclass(frozen=True)
class Figure:
    """A measured quantity over its samples: median and range."""

    median: float
    low: float
    high: float
    samples: tuple

    @classmethod
    def of(cls, samples) -> "Figure":
        samples = tuple(samples)
        return cls(statistics.median(samples), min(samples), max(samples), samples)

    def as_dict(self) -> dict:
        return {"median": self.median, "min": self.low, "max": self.high, "samples": list(self.samples)}


def error(predicted: float | None, measured: float) -> float | None:
    """Relative error of a prediction against the measurement (as ratc run's against the VM)."""
    if predicted is None or not measured:
        return None
    return (predicted - measured) / measured


@dataclass(frozen=True)
class Prediction:
    """What the planner and the system VM predict of one step of a program."""

    platform: str                   # the platform predicted for (the program's)
    this_machine: bool              # whether that platform describes the machine measured
    planner: float | None           # Eq. 12 step time (None without the model's graph IR)
    vm: float                       # the VM's measured-step time
    planner_kinds: dict             # (kind, stage) -> seconds per step
    vm_kinds: dict                  # (kind, stage) -> seconds per step


def describes_this_machine(platform) -> bool:
    """Whether a platform profile is the machine ratc runs on: only a host profile (issue
    29's `ratc calibrate` writes one, kind = "host") is; the DSP and GPU profiles model
    other machines."""
    return getattr(platform, "kind", None) == "host"


def predict(program) -> Prediction:
    """The planner's and the VM's step of a checked program (ratc.program_check) on the
    platform it was compiled for, priced with its execution profile (as `ratc run` does)."""
    from ratc.planner.exec_profile import load_exec_profile
    from ratc.planner.search import Planner
    from ratc.program_check import program_platform
    from ratc.vm.system.driver import simulate_program

    platform = program_platform(program)
    exec_profile = load_exec_profile(platform, program.meta.get("exec_profile", "paper-table5"))
    run = simulate_program(program, platform, exec_profile, memory_limit=False)
    planner_kinds = {}
    if run.predicted is not None:
        from ratc.codegen.program_kernels import program_exec_profile

        planner = Planner(program.profile, platform, program_exec_profile(exec_profile, run.module))
        planner_kinds = planner_kind_seconds(planner.detail(run.cand)[2], run.cand)
    return Prediction(platform.name, describes_this_machine(platform), run.predicted, run.results.step_seconds,
                      planner_kinds, vm_kind_seconds(run.timeline))


def vm_kind_seconds(tl) -> dict:
    """(kind, stage) -> seconds of the VM's last simulated step one replica of the stage spends
    in tasks of the kind. A co-running Recover (fsr) holds no engine: what it adds to its host
    (the host's `corun` cycles) is recovery, the rest of the host its own kind."""
    prog = tl.program
    last = prog.steps - 1
    out: dict = {}
    for t in prog.tasks:
        if t.step != last or t.replica != 0 or t.kind == "marker" or t.alongside:
            continue
        _, kind = task_kind(t.name)
        if kind == "recv":          # (zero cycles: the transfer is its SEND task)
            continue
        out[(kind, t.stage)] = out.get((kind, t.stage), 0.0) + (t.duration - t.corun) / prog.clock
        if t.corun:
            out[("recover", t.stage)] = out.get(("recover", t.stage), 0.0) + t.corun / prog.clock
    return out


def planner_kind_seconds(st, cand) -> dict:
    """(kind, stage) -> seconds per step of the planner's tasks (ratc.planner.timing.StepTime of
    one candidate): M Forwards, Backwards (each without its boundary send) and Recovers, M
    sends each way, summed over the stage's chunks (the planner's virtual stages, on their
    ranks: ratc.step.schedules.rank_of; a boundary within one rank, ZB-V's bottom, sends
    nothing), and the stage's GradSync, UpdateShard and PrefetchW."""
    from ratc.step.schedules import rank_of

    P, M, S = cand.P, cand.A, cand.P * cand.v
    p2p = float(st.p2p[0, 0])
    out = {}
    for s in range(S):
        p = rank_of(s, P, cand.sched)
        sends_f = s < S - 1 and rank_of(s + 1, P, cand.sched) != p
        sends_b = s > 0 and rank_of(s - 1, P, cand.sched) != p
        for kind, seconds in (("forward", float(st.fwd[0, s]) - p2p * sends_f),
                              ("backward", float(st.bwd[0, s]) - p2p * sends_b),
                              ("recover", float(st.rec[0, s])), ("send", p2p * (sends_f + sends_b))):
            out[(kind, p)] = out.get((kind, p), 0.0) + M * seconds
    for p in range(P):
        for kind, values in (("grad_sync", st.sync), ("update", st.update), ("prefetch", st.prefetch)):
            out[(kind, p)] = float(values[0, p])
    return out


def _numbered(events, tracks) -> list:
    """((step, name, n), event) of the events on `tracks`, n counting a name's events in a step
    in issue order (a unit's gathers, say, repeat a name), which is program order on every rank."""
    out, seen = [], {}
    for e in sorted((e for e in events if e[0] in tracks), key=lambda e: (e[5]["step"], e[3])):
        key = (e[5]["step"], e[1])
        seen[key] = seen.get(key, -1) + 1
        out.append(((*key, seen[key]), e))
    return out


def tie_members(module) -> dict:
    """unit -> ((stage, unit), ...) of the tie group it belongs to (its TieSum all-reduces the
    copies' gradients across those stages), for a life module's tied units."""
    from ratc.lifecycle.lowering import find_pipeline, find_plan

    stage_of = {u: s.attributes["stage"] for s in find_pipeline(module).region.ops for u in s.attributes["units"]}
    groups = find_plan(module).attributes.get("ties", [])
    return {u: tuple((stage_of[v], v) for v in sorted(g, key=lambda v: (stage_of[v], v))) for g in groups for u in g}


@dataclass(frozen=True)
class Groups:
    """Who takes part in each transfer and collective of a run, and when each issued it."""

    P: int
    D: int
    issued: dict            # (step, stage, replica, name, n) -> issue ns (see of)
    ties: dict              # tie_members of the program

    @classmethod
    def of(cls, trace: list, D: int, ties: dict) -> "Groups":
        """The groups of a run from its ranks' events (ranks on one host share one clock)."""
        issued = {}
        for rank, events in enumerate(trace):
            p, r = divmod(rank, D)
            for (step, name, n), e in _numbered(events, ("send", "collectives")):
                issued[(step, p, r, name, n)] = e[3]
        return cls(len(trace) // D, D, issued, ties)

    def charged(self, name: str, p: int, r: int) -> tuple:
        """(kind, stage, members as (stage, replica, their name)) of the transfer or collective
        the rank of stage p, replica r recorded as `name`. A receive is its sender's transfer
        (1RECV_F3 is 0SEND_F3's, 0RECV_B3 1SEND_B3's; interleaved, 0RECV_F3@5 is
        (P-1)SEND_F3@5's: peers wrap); a TieSum's members are its tie group's stages,
        another collective's the stage's replicas."""
        a = parse(name)
        kind = _KIND_OF[a.kind]
        if a.kind in ("RECV_F", "RECV_B"):
            sender = (a.stage - 1 if a.kind == "RECV_F" else a.stage + 1) % self.P
            return "send", sender, ((sender, r, str(a._replace(stage=sender, kind="SEND" + a.kind[4:]))),)
        if kind == "tie_sum" and a.unit in self.ties:
            return kind, p, tuple((s, r, str(Action(s, "T", None, u, u))) for s, u in self.ties[a.unit])
        return kind, p, tuple((p, other, name) for other in range(self.D))

    def seconds(self, out: dict, numbered: list, p: int, r: int) -> dict:
        """`out` plus each numbered transfer or collective event's time from when its group's
        last member issued it (or the event's start, if later) to the event's end."""
        for (step, name, n), (_, _, _, start, end, _) in numbered:
            kind, stage, members = self.charged(name, p, r)
            start = max([start] + [self.issued.get((step, s, m, what, n), start) for s, m, what in members])
            key = (step, kind, stage)
            out[key] = out.get(key, 0.0) + max(end - start, 0) / 1e9
        return out


def measured_kind_seconds(events, p: int, r: int, groups: Groups) -> dict:
    """(step, kind, stage) -> seconds of the recorded events (ratc.dist.trace.Recorder) of the
    rank of stage p, replica r. Compute kinds: the time in the op's handler. A transfer or a
    collective: from when it could start (every member of its group had issued it) to the
    completion seen by its first reader's wait, an upper bound of its duration; a transfer
    counted at its sender's stage from its receiver's record (a send is waited only at the
    step's end)."""
    out: dict = {}
    for track, name, _, start, end, args in events:
        _, kind = task_kind(name) if track == "compute" else (p, "")
        if kind in COMPUTE:
            key = (args["step"], kind, p)
            out[key] = out.get(key, 0.0) + (end - start) / 1e9
    return groups.seconds(out, _numbered(events, ("receive", "collectives")), p, r)


def blocked_kind_seconds(events, p: int, r: int, groups: Groups) -> dict:
    """(step, kind, stage) -> seconds the rank waited for transfers and collectives (its
    `waits` track) once every member had issued them: their exposed part, at most their
    measured span (waiting for a peer to issue is that peer's lateness, not the transfer)."""
    waits = [(t, name.removeprefix("wait "), *rest) for t, name, *rest in events if t == "waits"]
    return groups.seconds({}, _numbered(waits, ("waits",)), p, r)


@dataclass(frozen=True)
class KindRow:
    """One task kind on one stage: measured seconds per step against the predictions."""

    kind: str
    stage: int
    measured: Figure                # over the measured steps x the stage's replicas
    blocked: Figure | None          # transfers and collectives: the part of `measured` waited for
    vm: float | None
    planner: float | None

    def as_dict(self) -> dict:
        return {"kind": self.kind, "stage": self.stage, "measured_s": self.measured.as_dict(),
                "blocked_s": None if self.blocked is None else self.blocked.as_dict(), "vm_s": self.vm,
                "vm_error": error(self.vm, self.measured.median), "planner_s": self.planner,
                "planner_error": error(self.planner, self.measured.median)}


@dataclass(frozen=True)
class Measurement:
    """Measured step time and per-kind times of a run beside the predictions of its program."""

    warmup: int                     # steps run before the measured ones
    step: Figure                    # rank 0's step seconds over the measured steps
    prediction: Prediction
    rows: tuple                     # KindRow, in KINDS order then by stage

    @property
    def planner_error(self) -> float | None:
        return error(self.prediction.planner, self.step.median)

    @property
    def vm_error(self) -> float | None:
        return error(self.prediction.vm, self.step.median)

    def as_dict(self) -> dict:
        pred = self.prediction
        return {"warmup_steps": self.warmup, "measured_steps": len(self.step.samples),
                "platform": pred.platform, "predicts_this_machine": pred.this_machine,
                "step_time_s": {"measured": self.step.as_dict(), "planner": pred.planner,
                                "planner_error": self.planner_error, "vm": pred.vm, "vm_error": self.vm_error},
                "kinds": [r.as_dict() for r in self.rows]}

    def line(self) -> str:
        """step time: measured M s, planner P s (error E %), VM V s (error F %)."""
        pred = self.prediction
        planner = "planner -" if pred.planner is None else \
            f"planner {pred.planner:.4g} s (error {_percent(self.planner_error)})"
        return (f"step time: measured {self.step.median:.4g} s, {planner}, "
                f"VM {pred.vm:.4g} s (error {_percent(self.vm_error)})")

    def text(self) -> str:
        """The line, whose predictions are for which machine, and the per-kind table."""
        pred, n = self.prediction, len(self.step.samples)
        lines = [self.line()]
        if not pred.this_machine:
            lines.append(f"note: the predictions are for {pred.platform}, the platform the program was compiled "
                         "for, not this machine: the errors compare two different machines")
        lines += [f"measured {n} step{'s' if n > 1 else ''} after {self.warmup} warm-up "
                  f"step{'s' if self.warmup > 1 else ''}: rank 0's step time median {self.step.median:.4g} s "
                  f"[{self.step.low:.4g} .. {self.step.high:.4g}]",
                  "per task kind: ms per step one replica of a stage spends in the kind's tasks, median "
                  "[min .. max] over the measured steps and replicas",
                  "(compute: the ops' handlers; transfers and collectives: from their last member's issue "
                  "to the completion their reader waited for, an upper bound; blocked: the part of it a rank "
                  "waited for, median; a transfer at its sender's stage)",
                  f"  {'kind':<10} {'stage':>5} {'measured ms':>12} {'[min .. max]':>23} {'blocked ms':>11} "
                  f"{'VM ms':>11} {'error':>9} {'planner ms':>11} {'error':>9}"]
        for r in self.rows:
            m = r.measured
            lines.append(f"  {r.kind:<10} {r.stage:>5} {m.median * 1e3:>12.3f} "
                         f"{f'[{m.low * 1e3:.3f} .. {m.high * 1e3:.3f}]':>23} "
                         f"{_ms(r.blocked.median if r.blocked else None):>11} {_ms(r.vm):>11} "
                         f"{_percent(error(r.vm, m.median)):>9} {_ms(r.planner):>11} "
                         f"{_percent(error(r.planner, m.median)):>9}")
        return "\n".join(lines) + "\n"


def _percent(e: float | None) -> str:
    return "-" if e is None else f"{100 * e:+.1f} %"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def measure(results: list, D: int, warmup: int, prediction: Prediction, ties: dict | None = None) -> Measurement:
    """The measurement of a run's steps after `warmup` from its ranks' RankResults (rank 0's
    `trace` holding every rank's events, recorded with ratc.dist.trace.Recorder); `ties`:
    the program's tie_members."""
    first = results[0]
    skip = warmup - first.first_step
    if not 0 <= skip < len(first.step_seconds):
        raise RatcError(f"the run has {len(first.step_seconds)} step(s) from step {first.first_step}; "
                        f"none is left to measure after {warmup} warm-up step(s)")
    steps = range(warmup, first.first_step + len(first.step_seconds))
    if len(first.trace) != len(results):
        raise RatcError(f"the run recorded the events of {len(first.trace)} rank(s), not of its {len(results)} "
                        "(run it with tracing on)")
    groups = Groups.of(first.trace, D, ties or {})
    measured = _per_stage(first.trace, steps, measured_kind_seconds, groups)
    blocked = _per_stage(first.trace, steps, blocked_kind_seconds, groups)
    rows = tuple(KindRow(kind, stage, Figure.of(values),
                         Figure.of(blocked.get((kind, stage), [0.0] * len(values))) if kind not in COMPUTE else None,
                         prediction.vm_kinds.get((kind, stage)), prediction.planner_kinds.get((kind, stage)))
                 for (kind, stage), values in sorted(measured.items(), key=lambda kv: (KINDS.index(kv[0][0]),
                                                                                          kv[0][1])))
    return Measurement(warmup, Figure.of(first.step_seconds[skip:]), prediction, rows)


def _per_stage(trace: list, steps: range, seconds_of, groups: Groups) -> dict:
    """(kind, stage) -> seconds per (measured step, replica), from `seconds_of(events, p, r,
    groups)` ((step, kind, stage) -> seconds) of each rank's events of the measured steps."""
    D = groups.D
    totals: dict = {}                   # (kind, stage) -> {(step, replica): seconds}
    for rank, events in enumerate(trace):
        p, r = divmod(rank, D)
        measured = [e for e in events if e[5]["step"] >= steps.start]
        for (i, kind, stage), s in seconds_of(measured, p, r, groups).items():
            # (a stage's transfers are recorded by the replicas of the stages it sends to)
            per = totals.setdefault((kind, stage), {})
            per[(i, r)] = per.get((i, r), 0.0) + s
    return {key: [per.get((i, r), 0.0) for i in steps for r in range(D)] for key, per in totals.items()}

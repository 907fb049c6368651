"""Text and JSON renderings of a planning result."""

from __future__ import annotations

import json

from ratc import limits
from ratc.units import format_bytes, format_time


class Times:
    """How a plan's text prints times. A time of 1 s or more prints in seconds with two
    decimals, as it always has. So do shorter ones (the breakdown terms) when the plan's
    fastest step takes 1 s or more: a real model's plan reads as it always did. When even the
    fastest step is shorter (a small model), those get a unit of their own (format_time:
    '5.156 ms'), since '0.00 s' everywhere would hide the ranking."""

    def __init__(self, fastest: float = 1.0):
        self.seconds = fastest >= 1.0
        # differences smaller than this are a tie: what the printed precision cannot show
        self.tie = 0.005 if self.seconds else 5e-4 * fastest

    @classmethod
    def of(cls, result) -> "Times":
        return cls(min((ev.t_step for ev in result.feasible), default=1.0))

    def __call__(self, t: float, unit: bool = True) -> str:
        """A time; unit=False leaves out ' s' in seconds mode (the breakdown's E terms)."""
        if self.seconds:
            return f"{t:.2f} s" if unit else f"{t:.2f}"
        return f"{t:.2f} s" if abs(t) >= 1.0 else format_time(t)

    def column(self, t: float) -> str:
        """A time in the ranked table's 12-character column."""
        return f"{t:10.2f} s" if self.seconds or abs(t) >= 1.0 else f"{format_time(t):>12s}"

    def delta(self, t: float) -> str:
        """A positive difference, signed."""
        return f"{t:+.2f} s" if self.seconds or abs(t) >= 1.0 else f"+{format_time(t)}"


SECONDS = Times()


def tokens_per_second(result, ev, seq_len: int) -> float:
    """Training throughput of a candidate: global batch tokens per step time."""
    return result.global_batch * seq_len / ev.t_step


def _row(result, ev, seq_len: int, times: Times = SECONDS) -> str:
    return (f"{ev.cand.label():58s} {times.column(ev.t_step)} {tokens_per_second(result, ev, seq_len):10.1f} tok/s  "
            f"peak {format_bytes(ev.peak_mem):>9s} (stage {ev.peak_stage})")


def compilable(ev) -> bool:
    """Whether `ratc compile` can build the candidate's step (it refuses more micro-batches)."""
    return ev.cand.A <= limits.MAX_MICRO_BATCHES


def breakdown(ev, times: Times = SECONDS) -> str:
    """Eq. 12 terms and Eq. 9 terms of one candidate."""
    t = times
    return (f"    T_1F1B {t(ev.t_1f1b)} + E_comm {t(ev.e_comm, False)} + E_upd {t(ev.e_upd, False)} + "
            f"E_pref {t(ev.e_pref, False)} + E_rec {t(ev.e_rec, False)} = {t(ev.t_step)}\n"
            f"    memory at stage {ev.peak_stage}: state {format_bytes(ev.mem_state)} + activations "
            f"{format_bytes(ev.mem_act)} + buffers {format_bytes(ev.mem_buf)} = {format_bytes(ev.peak_mem)}")


def explain(result, limit: int = 8, times: Times = SECONDS, saves: list | None = None) -> list[str]:
    """What the winner's layers save and recompute (`saves`, ratc.planner.keep.describe), why
    the runners-up lost (per dimension value) and why pruned candidates did not fit."""
    lines = []
    best = result.best if result.feasible else None
    if best is not None and saves:
        lines.append(f"what each decoder layer of {best.cand.label()} saves for its Backward and recomputes "
                     f"(per micro-batch, b={best.cand.b}):")
        lines += saves
    if best is not None:
        lines.append("best per choice (what each alternative costs against the winner):")
        for dim in ("P", "Z", "T", "b", "act", "pref", "balance", "attn"):
            seen = {}
            for ev in result.feasible:
                seen.setdefault(getattr(ev.cand, dim), ev)
            for value, ev in sorted(seen.items(), key=lambda kv: kv[1].t_step):
                if value == getattr(best.cand, dim):
                    continue
                lines.append(f"  {dim}={value}: {ev.cand.label()} is {ev.t_step / best.t_step:.3f}x "
                             f"({times.delta(ev.t_step - best.t_step)}: {_why(best, ev, times)})")
    if result.infeasible:
        lines.append(f"pruned {len(result.infeasible)} candidates over the {format_bytes(result.budget)} budget "
                     "(Eq. 10); the leanest per pipeline degree:")
        per_p = {}
        for ev in result.infeasible:
            per_p.setdefault(ev.cand.P, ev)
        for P, ev in sorted(per_p.items())[:limit]:
            lines.append(f"  P={P}: {ev.cand.label()} needs {format_bytes(ev.peak_mem)} on stage {ev.peak_stage} "
                         f"(state {format_bytes(ev.mem_state)}, activations {format_bytes(ev.mem_act)}, "
                         f"buffers {format_bytes(ev.mem_buf)})")
    return lines


def _why(best, ev, times: Times = SECONDS) -> str:
    terms = {"1F1B main path": ev.t_1f1b - best.t_1f1b, "exposed comm": ev.e_comm - best.e_comm,
             "exposed update": ev.e_upd - best.e_upd, "exposed prefetch": ev.e_pref - best.e_pref,
             "exposed recovery": ev.e_rec - best.e_rec}
    top = [(k, v) for k, v in sorted(terms.items(), key=lambda kv: -kv[1])[:2] if v > times.tie]
    return ", ".join(f"{k} {times.delta(v)}" for k, v in top) or f"a tie within {times(2 * times.tie)}"


def duration(seconds: float) -> str:
    """A long duration in the unit that reads best: '0.41 s', '12.8 min', '197.96 h'."""
    if seconds >= 3600.0:
        return f"{seconds / 3600.0:.2f} h"
    if seconds >= 60.0:
        return f"{seconds / 60.0:.1f} min"
    return f"{seconds:.2f} s" if seconds >= 0.01 else format_time(seconds)


def failure_table(result, failures) -> list[str]:
    """`--failures`: per listed candidate its checkpoint, the interval, restart and goodput."""
    spec = failures.spec
    lines = ["", f"failures: cluster MTBF {duration(spec.cluster_mtbf)}, so one every {duration(failures.mtbf)} on "
                 f"{failures.clusters} clusters; checkpoint to storage at {format_bytes(spec.checkpoint_bandwidth)}/s "
                 f"per cluster, {format_bytes(spec.storage_bandwidth)}/s in all; restart = "
                 f"{duration(spec.relaunch_time)} relaunch + reading the checkpoint back",
             f"     {'checkpoint':>10s} {'per cluster':>11s} {'write':>9s}  {'every (Daly interval)':25s} "
             f"{'lost/failure':>12s} {'restart':>10s} {'goodput':>8s} {'steps/h':>8s}"]
    for i, est in enumerate(failures.rows, 1):
        c = est.checkpoint
        every = f"{est.every} step{'s' if est.every > 1 else ''} ({duration(est.daly)})"
        lines.append(f"{i:3d}. {format_bytes(c.total_bytes):>10s} {format_bytes(c.written_bytes):>11s} "
                     f"{duration(c.write_time):>9s}  {every:25s} {duration(est.lost_per_failure):>12s} "
                     f"{duration(est.restart):>10s} {100 * est.goodput:7.2f}% {est.steps_per_hour:8.2f}")
    best = failures.best()
    lines.append(f"most useful steps per hour: {best + 1}. {result.feasible[best].cand.label()}"
                 + ("" if best == 0 else " (not the fastest step: failures decide)"))
    return lines


def render_text(result, seq_len: int, top: int = 5, with_explain: bool = False, failures=None,
                cost_source: str = "", saves: list | None = None) -> str:
    """The ranked table with breakdowns, the failure costs (`failures`, a FailureReport of
    the listed candidates) and optionally the explanation (no timings: the same request
    gives the same text; the CLI reports the search time on stderr); `cost_source`, where
    the step times' operator costs come from."""
    head = (f"plan for {result.model} on {result.clusters} x {result.platform} clusters, global batch "
            f"{result.global_batch} x {seq_len} tokens, strategy {result.strategy}, budget {format_bytes(result.budget)}\n"
            + (f"step times priced with {cost_source}\n" if cost_source else "")
            + f"evaluated {result.evaluated} candidates: {len(result.feasible)} fit, "
            f"{len(result.infeasible)} pruned by memory\n")
    if result.pipeline_source != "searched" or result.pipeline_why:
        head += f"pipeline degree {result.pipeline_note()}\n"
    if result.trainable < result.params:
        head += (f"{result.params - result.trainable:,} of {result.params:,} parameters frozen "
                 "(requires_grad=False): no gradients or optimizer state\n")
    lines = [head]
    times = Times.of(result)
    for i, ev in enumerate(result.feasible[:top], 1):
        lines.append(f"{i:2d}. {_row(result, ev, seq_len, times)}")
        lines.append(breakdown(ev, times))
        if not compilable(ev):
            lines.append(f"    A={ev.cand.A} micro-batches per step: more than ratc compile builds "
                         f"({limits.MAX_MICRO_BATCHES}); it takes the fastest plan within that")
    if failures is not None:
        lines += failure_table(result, failures)
    if with_explain:
        lines.append("")
        lines += explain(result, times=times, saves=saves)
    return "\n".join(lines) + "\n"


def render_json(result, seq_len: int, top: int = 5, with_explain: bool = False, failures=None,
                cost_source: str = "", saves: list | None = None) -> str:
    """Machine-readable result (deterministic key order); `failures` and `cost_source` as in
    render_text."""
    data = {"model": result.model, "platform": result.platform, "clusters": result.clusters,
            "cost_source": cost_source,
            "global_batch": result.global_batch, "seq_len": seq_len, "strategy": result.strategy,
            "memory_budget_bytes": result.budget, "evaluated": result.evaluated,
            "parameters": {"total": result.params, "trainable": result.trainable},
            "feasible_count": len(result.feasible), "pruned_count": len(result.infeasible),
            "pipeline": {"P": result.pipeline, "source": result.pipeline_source, "why": result.pipeline_why},
            "top": [dict(ev.as_dict(), tokens_per_s=tokens_per_second(result, ev, seq_len), compilable=compilable(ev))
                    for ev in result.feasible[:top]]}
    if failures is not None:
        data["failure_model"] = failures.model_dict()
        for entry, est in zip(data["top"], failures.rows):
            entry["failures"] = est.as_dict()
    if with_explain:
        data["explain"] = explain(result, saves=saves)
    return json.dumps(data, indent=2, sort_keys=True) + "\n"

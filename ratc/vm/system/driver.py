"""End to end: a planner candidate or a compiled life module through the system VM, and
the planner's predictions against the VM's measurements."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ratc.errors import RatcError
from ratc.planner.config import ACT_POLICIES, PREF_POLICIES, Candidate

_ACT_NAMES = {"full": "full", "full-save": "full", "ckpt": "ckpt", "checkpoint": "ckpt", "fsr": "fsr"}
_INT_KEYS = ("P", "D", "T", "Z", "b", "A")


def parse_config(text: str) -> Candidate:
    """A candidate from the planner's label form: 'P=2,D=4,Z=2,b=1,A=128,FSR,deadline'.

    T, Z, b default to 1, 2, 1; the activation policy to FSR and the state policy to deadline.
    """
    values = {"T": 1, "Z": 2, "b": 1, "act": "fsr", "pref": "deadline", "balance": "time"}
    if not text.strip():
        raise RatcError("--plan is empty (expected e.g. 'P=2,D=4,Z=2,b=1,A=128,FSR,deadline')")
    given: set = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, val = part.partition("=")
        key, val = key.strip(), val.strip()
        what = key if eq else ("act" if part.lower() in _ACT_NAMES else "pref" if part.lower() in PREF_POLICIES
                               else part)
        if what in given:
            raise RatcError(f"--plan {text!r}: {what} is given twice")
        given.add(what)
        if eq and key in _INT_KEYS:
            if not re.fullmatch(r"\d+", val):
                raise RatcError(f"--plan: {key} must be a positive integer, got {val!r}")
            values[key] = int(val)
        elif eq and key in ("act", "pref", "balance"):
            values[key] = val.lower()
        elif not eq and part.lower() in _ACT_NAMES:
            values["act"] = _ACT_NAMES[part.lower()]
        elif not eq and part.lower() in PREF_POLICIES:
            values["pref"] = part.lower()
        else:
            raise RatcError(f"--plan: cannot read {part!r} in {text!r} (expected e.g. "
                            "'P=2,D=4,Z=2,b=1,A=128,FSR,deadline')")
    missing = [k for k in ("P", "D", "A") if k not in values]
    if missing:
        raise RatcError(f"--plan {text!r}: missing {', '.join(missing)}")
    values["act"] = _ACT_NAMES.get(values["act"], values["act"])
    if values["act"] not in ACT_POLICIES or values["pref"] not in PREF_POLICIES:
        raise RatcError(f"--plan {text!r}: activation policy must be one of {', '.join(ACT_POLICIES)} and state "
                        f"policy one of {', '.join(PREF_POLICIES)}")
    if min(values[k] for k in ("P", "D", "T", "b", "A")) < 1 or values["Z"] > 3:
        raise RatcError(f"--plan {text!r}: P, D, T, b, A must be >= 1 and Z in 0..3")
    return Candidate(**{k: values[k] for k in (*_INT_KEYS, "act", "pref", "balance")})


def model_macs(profile) -> float:
    """MACs of one sequence's forward and backward through the whole model (no recomputation)."""
    layers = [profile.pre, *profile.decoder_layers(), profile.post]
    return sum(lp.fwd_flops + lp.bwd_flops for lp in layers) / 2


def compile_candidate(profile, cand: Candidate, platform, planner=None):
    """The scheduled life module of a candidate; the budget is left to the VM to enforce."""
    from ratc.lifecycle.compile import compile_program
    from ratc.passes.base import PassError

    try:
        return compile_program(profile, cand, platform, {"budget": "none", "planner": planner})
    except PassError as exc:
        raise RatcError(f"{cand.label()}: {exc}") from None


def run_module(module, platform, macs_per_step: float = 0.0, steps: int = 2, symmetric: bool = True,
               budget="plan"):
    """(timeline, results) of a scheduled life module."""
    from ratc.vm.system.engine import simulate
    from ratc.vm.system.life import translate
    from ratc.vm.system.results import summarize

    tl = simulate(translate(module, platform, steps=steps, symmetric=symmetric, macs_per_step=macs_per_step,
                            budget=budget))
    return tl, summarize(tl)


@dataclass(frozen=True)
class Comparison:
    """A candidate's predicted (Eq. 12) and simulated step time."""

    cand: Candidate
    predicted: float
    simulated: float
    peak: int                  # the VM's largest per-stage peak memory (bytes)

    @property
    def error(self) -> float:
        """Relative error of the prediction against the simulation."""
        return (self.predicted - self.simulated) / self.simulated


def compare(planner, evaluated, budget=None) -> list:
    """Comparisons for planner results (ratc.planner.search.Evaluated), simulated via the lifecycle."""
    out = []
    macs = model_macs(planner.model)
    for ev in evaluated:
        module = compile_candidate(planner.model, ev.cand, planner.platform, planner)
        _, res = run_module(module, planner.platform, macs * ev.cand.global_batch, budget=budget)
        out.append(Comparison(ev.cand, ev.t_step, res.step_seconds, max(res.stage_peak_bytes)))
    return out


def kendall_tau(xs, ys) -> float:
    """Kendall's tau-b rank correlation of two equally long sequences (ties counted as in scipy)."""
    n = len(xs)
    if n != len(ys) or n < 2:
        raise RatcError(f"Kendall tau needs two sequences of equal length >= 2 (got {n} and {len(ys)})")
    conc = disc = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx = (xs[i] > xs[j]) - (xs[i] < xs[j])
            dy = (ys[i] > ys[j]) - (ys[i] < ys[j])
            if dx and dy:
                conc += dx == dy
                disc += dx != dy
            elif dx:
                tx += 1
            elif dy:
                ty += 1
    denom = ((conc + disc + tx) * (conc + disc + ty)) ** 0.5
    return (conc - disc) / denom if denom else 0.0

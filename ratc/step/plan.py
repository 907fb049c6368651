"""The plan a program is compiled for: a configuration and the memory budget it must fit.

`life.plan` holds it (with the per-unit costs the planner priced); every reader of a
program — the lowering, the verifier, both VMs, the executors, `ratc run` and `ratc report`
— takes it back with `Plan.from_ir`, and only `Plan.attributes` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ratc.ir.attributes import ByteSize
from ratc.step.config import ACT_POLICIES, ATTENTION, BALANCES, CORUNS, PREF_POLICIES, SCHEDULES, Candidate, keep_text


@dataclass(frozen=True)
class Plan:
    """A configuration committed to a memory budget (bytes per cluster, paper Eq. 10)."""

    config: Candidate
    budget: int

    def attributes(self) -> dict:
        """The configuration's `life.plan` attributes (the layer balance only when not `time`,
        v only when interleaved, the schedule only when not 1F1B, FSR's corun only when not
        'prev' and the attention kernels only when fused: the defaults, so other programs read
        as before)."""
        c = self.config
        attrs = {"P": c.P, "D": c.D, "T": c.T, "Z": c.Z, "b": c.b, "A": c.A, "act": c.act, "pref": c.pref,
                 "budget": ByteSize(int(self.budget))}
        if c.balance != "time":
            attrs["balance"] = c.balance
        if c.v > 1:
            attrs["v"] = c.v
        if c.sched != "1f1b":
            attrs["sched"] = c.sched
        if c.corun != "prev":
            attrs["corun"] = c.corun
        if c.attn != "paper":
            attrs["attn"] = c.attn
        return attrs

    @classmethod
    def from_ir(cls, plan_op) -> "Plan":
        """The plan a (verified) `life.plan` op holds."""
        a = plan_op.attributes
        return cls(Candidate(a["P"], a["D"], a["T"], a["Z"], a["b"], a["A"], a["act"], a["pref"],
                             a.get("balance", "time"), _keep(plan_op), a.get("v", 1),
                             a.get("sched", "1f1b"), a.get("corun", "prev"), a.get("attn", "paper")), int(a["budget"]))

    @staticmethod
    def spec() -> dict:
        """{attribute: IR kind} of the plan's part of `life.plan`."""
        return {"P": "int", "D": "int", "T": "int", "Z": "int", "b": "int", "A": "int", "act": "|".join(ACT_POLICIES),
                "pref": "|".join(PREF_POLICIES), "balance": "|".join(BALANCES) + "?", "budget": "bytes",
                "v": "int?", "sched": "|".join(SCHEDULES) + "?", "corun": "|".join(CORUNS) + "?",
                "attn": "|".join(ATTENTION) + "?"}

    def label(self) -> str:
        """The configuration as `--plan` writes it."""
        return self.config.label()


def _keep(plan_op) -> str:
    """The plan's `keep` text from its decoder units' `keep` attributes ("" when every one
    keeps its input, the default)."""
    units = plan_op.region.ops if plan_op.region is not None else ()
    choices = [u.attributes.get("keep", "layer") for u in units if u.attributes.get("decoder") is True]
    return keep_text(choices) if any(c != "layer" for c in choices) else ""

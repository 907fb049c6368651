"""What failures cost LLaMA-2-70B at 256-4096 clusters: the best plan by step time against the
best by useful steps per hour, and where failures, not bandwidth, decide how far to scale.

    python benchmarks/failure_sweep.py [--write-docs]

Plans LLaMA-2-70B (examples/llama.py --preset llama2-70b, global batch 1024, strategy any,
as benchmarks/bench_planner.py does) on each platform with a [failures] model and prices
every feasible candidate with ratc.planner.failures under three cluster MTBFs: the
profile's (Llama 3's fleet), a research cluster's (Kokolis et al. 2024) and a stress case.
--write-docs replaces docs/failures.md after its marker line. Traces come from the trace
cache, so a second run takes seconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratc.frontend.presets import trace_preset  # noqa: E402
from ratc.io import write_atomic  # noqa: E402
from ratc.planner.failures import estimate, failure_spec, stage_checkpoint_bytes  # noqa: E402
from ratc.planner.report import duration  # noqa: E402
from ratc.planner.search import Planner  # noqa: E402
from ratc.platform import load_platform  # noqa: E402
from ratc.units import format_bytes  # noqa: E402
from ratc.vm.system.checkpoint import transfer_time  # noqa: E402

MODEL, GLOBAL_BATCH, STRATEGY = "llama2-70b", 1024, "any"
CLUSTERS = (256, 512, 1024, 2048, 4096)
PLATFORMS = ("mt3000", "a800")
# (name, factor on the profile's cluster MTBF). Kokolis et al. 2024 (Meta's research
# clusters) measure a 7.9 h MTTF for 1,024-GPU jobs: 8,090 h per GPU, against Llama 3's
# 50,677 h.
SCENARIOS = (("Llama 3 fleet (profile)", 1.0), ("research cluster", 8090 / 50677), ("stress: 1/100", 0.01))
DOC = Path(__file__).resolve().parents[1] / "docs" / "failures.md"
MARK = "<!-- sweep: python benchmarks/failure_sweep.py --write-docs -->"


def best_by_goodput(planner, result, spec):
    """(evaluated, estimate) with the most useful steps per hour among all feasible candidates;
    a candidate whose failure-free rate (3600 / step) cannot beat the best so far is skipped."""
    best = None
    for ev in result.feasible:              # fastest step first
        if best is not None and 3600.0 / ev.t_step < best[1].steps_per_hour:
            break
        est = estimate(planner.stages(ev.cand.P, ev.cand.T, ev.cand.balance).trainable, ev.cand, ev.t_step, spec)
        if best is None or est.steps_per_hour > best[1].steps_per_hour:
            best = (ev, est)
    return best


def vm_write(planner, cand, spec) -> float:
    """The save of a plan's checkpoint as system-VM tasks (ratc.vm.system.checkpoint): each of
    a stage's D x T clusters writes its shard, all sharing the storage; seconds."""
    trainable = planner.stages(cand.P, cand.T, cand.balance).trainable
    written, _ = stage_checkpoint_bytes(trainable * planner.recipe.optimizer_bytes, cand.Z, cand.D)
    return transfer_time("save", "tx", [float(b) for b in written], cand.D * cand.T, spec,
                         planner.platform.dsp.clock, cand.D)


def sweep(platform_name: str) -> list[dict]:
    """One row per cluster count: the fastest plan, and per scenario its failure cost and the
    plan with the most useful steps per hour."""
    platform = load_platform(platform_name)
    planner = Planner(trace_preset(MODEL), platform)
    base = failure_spec(platform)
    rows = []
    for n in CLUSTERS:
        result = planner.plan(n, GLOBAL_BATCH, STRATEGY)
        fastest = result.best
        row = {"clusters": n, "fastest": fastest, "scenarios": [], "vm_write": vm_write(planner, fastest.cand, base)}
        for _, factor in SCENARIOS:
            spec = failure_spec(platform.with_overrides(cluster_mtbf=f"{base.cluster_mtbf * factor!r}s"))
            own = estimate(planner.stages(fastest.cand.P, fastest.cand.T, fastest.cand.balance).trainable,
                           fastest.cand, fastest.t_step, spec)
            row["scenarios"].append((own, best_by_goodput(planner, result, spec)))
        rows.append(row)
    return rows


def table_head(head: str, rule: str, per_scenario: str) -> list[str]:
    """A markdown table's header and rule: the given columns, then one per scenario."""
    for name, _ in SCENARIOS:
        head += f" {name}: {per_scenario} |"
        rule += "---|"
    return [head, rule]


def plan_table(rows: list[dict]) -> list[str]:
    """Per cluster count: the fastest plan, its checkpoint and restart, and per scenario its
    goodput and useful steps per hour, and the plan with the most if another."""
    lines = table_head("| clusters | fastest plan | step | checkpoint per cluster | write | write (VM) | restart |",
                       "|---:|---|---:|---:|---:|---:|---:|", "goodput, steps/h")
    for row in rows:
        ev, first = row["fastest"], row["scenarios"][0][0]
        c = first.checkpoint
        line = (f"| {row['clusters']} | {ev.cand.label()} | {ev.t_step:.1f} s | {format_bytes(c.written_bytes)} | "
                f"{duration(c.write_time)} | {vm_against(row['vm_write'], c.write_time)} | {duration(first.restart)} |")
        for own, (best_ev, best) in row["scenarios"]:
            other = "" if best_ev.cand == ev.cand else f"; best: {best_ev.cand.label()} {best.steps_per_hour:.2f}"
            line += f" {100 * own.goodput:.2f} %, {own.steps_per_hour:.2f}{other} |"
        lines.append(line)
    return lines


def vm_against(vm: float, model: float) -> str:
    """The VM's save time, and how much longer than the closed form's where it differs (its
    stages' shards finish at different times; a cycle's rounding aside)."""
    off = vm / model - 1
    return f"{vm:.3f} s" + (f" ({100 * off:+.1f} %)" if abs(off) >= 5e-4 else "")


def doubling(lo: dict, hi: dict) -> tuple[float, list]:
    """A doubling of the cluster count: the fastest step's speed-up, and per scenario (goodput
    kept, useful steps per hour gained, whether failures lose more than the step falls short
    of 2x)."""
    speedup = lo["fastest"].t_step / hi["fastest"].t_step
    out = []
    for (_, (_, a)), (_, (_, b)) in zip(lo["scenarios"], hi["scenarios"]):
        kept = b.goodput / a.goodput
        out.append((kept, b.steps_per_hour / a.steps_per_hour, 1 - kept > 1 - speedup / 2))
    return speedup, out


def doubling_table(rows: list[dict]) -> list[str]:
    """Per doubling of the cluster count: what the step gains (its shortfall from 2x is the
    price of bandwidth and parallel overhead) and what failures take back, per scenario."""
    lines = table_head("| clusters | step speed-up |", "|---|---:|", "goodput kept, steps/h gain, larger loss")
    for lo, hi in zip(rows, rows[1:]):
        speedup, per = doubling(lo, hi)
        line = f"| {lo['clusters']} → {hi['clusters']} | {speedup:.3f}x |"
        for kept, gain, failures in per:
            line += f" {100 * kept:.2f} %, {gain:.3f}x, {'failures' if failures else 'step'} |"
        lines.append(line)
    return lines


def summary(rows: list[dict]) -> list[str]:
    """Per scenario: whether failures ever reorder the plans, the cluster count with the most
    useful steps per hour, and from which doubling on failures cost more than the step loses."""
    lines = []
    for k, (name, _) in enumerate(SCENARIOS):
        reordered = [r["clusters"] for r in rows if r["scenarios"][k][1][0].cand != r["fastest"].cand]
        top = max(rows, key=lambda r: r["scenarios"][k][1][1].steps_per_hour)
        decided = [lo["clusters"] for lo, hi in zip(rows, rows[1:]) if doubling(lo, hi)[1][k][2]]
        lines.append(f"- {name}: the fastest plan is also the one with the most useful steps per hour at "
                     + ("every cluster count" if not reordered else f"all but {', '.join(map(str, reordered))}")
                     + f"; most useful steps per hour on {top['clusters']} clusters; failures are the larger loss "
                     + (f"in the doubling from {', '.join(map(str, decided))} clusters" if decided
                        else "in no doubling"))
    return lines


def markdown() -> str:
    out = [MARK, "", f"Generated by `python benchmarks/failure_sweep.py --write-docs`: {MODEL}, global batch "
           f"{GLOBAL_BATCH} x 2048 tokens, strategy `{STRATEGY}`; every feasible candidate that could have the most useful steps per hour is priced.", ""]
    for name in PLATFORMS:
        rows = sweep(name)
        spec = failure_spec(load_platform(name))
        out += [f"### {name}: cluster MTBF {duration(spec.cluster_mtbf)} (profile)", "",
                "The fastest plan per cluster count and what failures leave of it; \"best:\" names a plan "
                "with more useful steps per hour where one exists. \"write (VM)\": the save as system-VM tasks "
                "(`ratc run --fail-at`'s), every cluster writing its stage's shard with the storage shared "
                "fairly, against the closed form's \"write\".", "", *plan_table(rows), "",
                "Each doubling: the step's speed-up and the goodput it keeps; \"larger loss\" says which of "
                "the two costs the doubling more against a perfect 2x: the step's shortfall (bandwidth and "
                "parallel overheads; none at 2x or more) or the goodput failures take.", "", *doubling_table(rows), "",
                *summary(rows), ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write-docs", action="store_true", help=f"replace {DOC.name} after its marker line")
    args = ap.parse_args(argv)
    text = markdown()
    if not args.write_docs:
        print(text)
        return 0
    doc = DOC.read_text()
    if MARK not in doc:
        print(f"{DOC}: no marker line {MARK!r}", file=sys.stderr)
        return 1
    write_atomic(str(DOC), doc[:doc.index(MARK)] + text, "--write-docs")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Assemble a report: simulate the compiled plan (and the runners-up) and draw the pictures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ratc.errors import RatcError
from ratc.report.data import KernelRow, ReportData
from ratc.units import format_bytes, format_time

# `ratc diagram --policy`: the paper's Fig. 6 panels. Standard 1F1B recomputes at backward
# time (checkpointing, panel a); FSR co-runs each recovery with the task before it, the
# first of a backward with the Forward before it (panel b).
DIAGRAM_POLICIES = {"standard": "ckpt", "fsr": "fsr"}


@dataclass
class Simulation:
    """A simulated life program: the VM timeline and results; `oom` is set when the budget
    was exceeded (the timeline is then the same program run without the budget stop, so
    the pictures show where memory overflows)."""

    timeline: object
    results: object
    oom: object = None


def simulate_module(module, platform, macs_per_step: float = 0.0) -> Simulation:
    """Run a scheduled life module on the system VM against its plan's memory budget."""
    from ratc.vm.system.driver import run_module
    from ratc.vm.system.memory import OutOfMemory

    try:
        tl, res = run_module(module, platform, macs_per_step, memory_limit=True)
        return Simulation(tl, res)
    except OutOfMemory as exc:
        tl, res = run_module(module, platform, macs_per_step, memory_limit=False)
        return Simulation(tl, res, exc)


def compile_quietly(planner, cand):
    """A candidate's scheduled module for timing only: the lifecycle passes without
    verification after each pass (the program `ratc compile` writes is verified)."""
    from ratc.lifecycle.compile import CompileOptions, compile_program
    from ratc.passes.base import PassError

    try:
        return compile_program(planner.model, cand, planner.platform,
                               CompileOptions(planner=planner, memory_limit=False, verify="none"))
    except PassError as exc:
        raise RatcError(f"{cand.label()}: {exc}") from None


def build_report(planner, result, module=None, top: int = 10, simulate_top: int = 3, fmt: str = "png",
                 progress=None) -> tuple:
    """(ReportData, images) for a planning result and the compiled module of the chosen plan
    (compiled here from the best candidate when `module` is None).

    `simulate_top` of the ranked candidates are simulated for predicted-vs-simulated;
    `progress(message)` is called before each slow step.
    """
    from ratc.report import diagram, memory_plot
    from ratc.report.from_planner import breakdown, candidate_rows
    from ratc.lifecycle.lowering import find_plan
    from ratc.report.from_vm import memory_from_timeline, pipeline_from_timeline
    from ratc.step.plan import Plan
    from ratc.vm.system.driver import model_macs

    say = progress or (lambda msg: None)
    model, platform = planner.model, planner.platform
    macs = model_macs(model)
    if module is None:
        if not result.feasible:
            raise RatcError(f"no feasible plan for {result.model} on {result.clusters} clusters to report on")
        say(f"compiling {result.best.cand.label()}")
        module = compile_quietly(planner, result.best.cand)
    cand = Plan.from_ir(find_plan(module)).config
    say(f"simulating {cand.label()}")
    sim = simulate_module(module, platform, macs * cand.global_batch)
    runs = {cand.label(): sim}
    notes = []
    for ev in result.feasible[:simulate_top]:
        label = ev.cand.label()
        if label in runs:
            continue
        say(f"simulating {label}")
        try:
            other = compile_quietly(planner, ev.cand)
            runs[label] = simulate_module(other, platform, macs * ev.cand.global_batch)
        except RatcError as exc:
            notes.append(f"{label} not simulated: {str(exc).splitlines()[0]}")
    _, mem, _ = planner.detail(cand)
    (ev,) = planner.evaluate_group([cand])
    res = sim.results
    facts = [("model", f"{model.name}, {model.num_layers} layers, sequence length {model.seq_len} tokens"),
             ("platform", f"{result.clusters} x {platform.name} clusters, budget "
                          f"{format_bytes(planner.budget)} per cluster"),
             ("global batch", f"{result.global_batch} sequences"),
             ("plan", cand.label()),
             ("predicted step (Eq. 12)", format_time(ev.t_step)),
             ("simulated step", format_time(res.step_seconds)),
             ("prediction error", f"{100 * (ev.t_step - res.step_seconds) / res.step_seconds:+.2f} %"),
             ("tokens/s (simulated)", f"{res.tokens_per_second:,.1f}"),
             ("MAC utilization", f"{100 * res.mac_utilization:.2f} %"),
             ("bubble fraction", f"{100 * res.bubble_fraction:.2f} %"),
             ("exposed tail", format_time(res.tail_seconds)),
             ("peak memory", f"{format_bytes(max(res.stage_peak_bytes))} simulated, "
                             f"{format_bytes(ev.peak_mem)} by Eq. 9 (stage {ev.peak_stage})")]
    if sim.oom is not None:
        notes.insert(0, "the simulation exceeded the memory budget; the pictures show the run without the "
                        f"budget stop. {str(sim.oom).splitlines()[0]}")
    if cand.label() not in {e.cand.label() for e in result.feasible[:top]}:
        notes.append(f"the compiled plan {cand.label()} is not among the planner's top {top} candidates")
    report = ReportData(title=f"ratc report: {model.name} on {result.clusters} x {platform.name}",
                        facts=facts, notes=notes, budget=planner.budget, breakdown=breakdown(mem),
                        candidates=candidate_rows(result, top, runs),
                        kernels=kernel_rows(module, platform, res.step_seconds))
    say("drawing")
    title = f"{model.name}, {cand.label()}"
    report.pipelines.append(pipeline_from_timeline(sim.timeline, title))
    report.memory = memory_from_timeline(sim.timeline, f"memory per stage, {title}", budget=planner.budget)
    images = {
        "pipeline": (diagram.render(report.pipelines[0], fmt), fmt, "pipeline diagram"),
        "memory": (memory_plot.render_timeline(report.memory, fmt), fmt, "memory over time"),
        "breakdown": (memory_plot.render_breakdown(report.breakdown, planner.budget,
                                                   f"Eq. 9 per stage, {title}", fmt), fmt, "memory breakdown"),
    }
    return report, images


def policy_diagram(planner, P: int, M: int, policy: str, D: int = 2, Z: int = 2, b: int = 1,
                   pref: str = "deadline", v: int = 1, sched: str = "1f1b") -> tuple:
    """(PipelineData, VM results) of one configuration compiled through the lifecycle passes,
    simulated without the memory stop (a diagram shows the schedule; `ratc run` enforces
    the budget)."""
    from ratc.step.config import Candidate, schedule_shape_error
    from ratc.report.from_vm import pipeline_from_timeline
    from ratc.vm.system.driver import compile_candidate, run_module

    if policy not in DIAGRAM_POLICIES:
        raise RatcError(f"unknown policy {policy!r} (known: {', '.join(DIAGRAM_POLICIES)})")
    if min(P, M, D, b, v) < 1:
        raise RatcError(f"--pp, --microbatches, --dp, --micro-batch and --virtual-stages must be at least 1 (got "
                        f"P={P}, M={M}, D={D}, b={b}, V={v})")
    if v > 1 and P < 2:
        raise RatcError(f"--virtual-stages {v}: interleaved 1F1B needs --pp of at least 2")
    why = schedule_shape_error(sched, v)
    if why:
        raise RatcError(f"--schedule {sched} --virtual-stages {v}: {why.split(': ', 1)[-1]}")
    cand = Candidate(P=P, D=D, T=1, Z=Z, b=b, A=M, act=DIAGRAM_POLICIES[policy], pref=pref, v=v, sched=sched)
    module = compile_candidate(planner.model, cand, planner.platform, planner)
    tl, res = run_module(module, planner.platform, memory_limit=False)
    kind = f"{sched.upper()}, zero bubble (v={v})" if sched != "1f1b" else f"interleaved 1F1B (v={v})" if v > 1 \
        else "1F1B"
    title = f"{planner.model.name}: {policy} {kind}, P={P}, M={M} ({cand.label()})"
    return pipeline_from_timeline(tl, title), res


def kernel_rows(module, platform, step_seconds: float) -> list:
    """The program's generated kernels (its life.kernel ops), with calls and share of the step."""
    from ratc.codegen.program_kernels import kernel_entries, kernel_shares

    entries = kernel_entries(module, platform)
    rows = []
    for e, (name, cycles, util, calls, share) in zip(entries, kernel_shares({"kernels": entries}, step_seconds)):
        shape = e["shape"]
        what = ("x".join(map(str, shape)) if e["kind"] == "gemm" else
                "heads {}, seq {}, head dim {}, kv heads {}".format(*shape))
        rows.append(KernelRow(name, what, cycles, util, ddr_bytes=e["ddr_bytes"], calls=calls, share=share))
    return rows


def write_report(outdir, report, images: dict, html_name: str = "report.html") -> list:
    """Write the HTML page and each picture beside it; returns the paths written."""
    from ratc.io import check_output, write_atomic
    from ratc.program import record_derived
    from ratc.report import html

    out = Path(outdir)
    page = Path(html_name) if Path(html_name).is_absolute() else out / html_name
    # every output checked before any is written (a program's own files among them)
    check_output(page, "-o")
    for key, (_, fmt, _) in images.items():
        check_output(out / f"{key}.{fmt}", key)
    # listed in a program's manifest first: a report killed half-written is still ratc's
    record_derived(out, [page, *(out / f"{key}.{fmt}" for key, (_, fmt, _) in images.items())])
    written = []
    for key, (data, fmt, _) in sorted(images.items()):
        path = out / f"{key}.{fmt}"
        write_atomic(path, data)
        written.append(path)
    write_atomic(page, html.render(report, images))
    return [page, *written]

"""`ratc run OUTDIR`: simulate a compiled training program on the system VM."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

from ratc.errors import RatcError
from ratc.step.config import parse_config


@dataclass(frozen=True)
class RunRequest:
    """What `ratc run` is asked: its options by their argparse names (defaults as the CLI's),
    so that `ratc compile` runs it as a function."""

    outdir: str
    plan: str | None = None
    platform: str | None = None
    steps: int = 2
    explicit_replicas: bool = False
    no_memory_limit: bool = False
    json: bool = False
    trace: str | None = None
    critical_path: bool = False
    dag: str | None = None
    output: str | None = None
    kernel: str | None = None
    seed: int = 0
    fail_at: str | None = None
    checkpoint_every: int | None = None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="simulate a compiled program on the system VM (step time, memory, trace)",
        description="Run every task of the compiled program in OUTDIR as a discrete-event simulation on "
                    "P x D modeled clusters (compute engine, DDR, link ports) and report step time, "
                    "tokens/s, MAC utilization, bubbles, per-stage peak memory and the exposed terms. "
                    "Exceeding the memory budget stops the run with an out-of-memory report.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  ratc run out/ --trace step.json\n"
               "  ratc run out/ --json\n"
               "  ratc run out/ --critical-path --dag tasks.graphml\n"
               "  ratc run out/ --plan 'P=2,D=4,Z=2,b=1,A=128,FSR,deadline'\n"
               "  ratc run out/ --fail-at 3:2h --checkpoint-every 50")
    p.add_argument("outdir", help="program directory written by `ratc compile`")
    p.add_argument("--plan", metavar="CONFIG",
                   help="simulate this configuration of the program's model instead of the compiled one, "
                        "even if it does not fit (e.g. 'P=2,D=4,Z=2,b=1,A=128,FSR,deadline')")
    p.add_argument("--platform", help="platform profile name or TOML file (default: the program's)")
    p.add_argument("--steps", type=int, default=RunRequest.steps,
                   help="consecutive steps simulated; the last is measured (default 2)")
    p.add_argument("--explicit-replicas", action="store_true",
                   help="simulate all D replicas instead of one by symmetry")
    p.add_argument("--no-memory-limit", action="store_true", help="report peaks instead of stopping over budget")
    p.add_argument("--json", action="store_true", help="print JSON (stable keys) instead of text")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome-trace timeline (open in Perfetto)")
    p.add_argument("--critical-path", action="store_true",
                   help="after the report, the chain of tasks that sets the measured step's time: each task's "
                        "start, duration, share of the step and what it waited for (a dependency or a busy "
                        "resource); in --json output under 'critical_path'")
    p.add_argument("--dag", metavar="FILE",
                   help="write the program's task DAG (tasks with their simulated times, dependency edges) as "
                        "GraphML (FILE.graphml) or DOT (FILE.dot, FILE.gv)")
    p.add_argument("-o", "--output", help="write the report to a file instead of stdout")
    p.add_argument("--kernel", metavar="STAGE:TASK",
                   help="instead of simulating, run the kernels one task calls (GEMM and attention-backward, "
                        "e.g. 0:F3, or 0:B3@2 for one layer as schedule.txt names it) with real numerics on random "
                        "inputs and check them against numpy")
    p.add_argument("--seed", type=int, default=RunRequest.seed, help="seed of the random inputs for --kernel (default 0)")
    p.add_argument("--fail-at", metavar="CLUSTER:TIME",
                   help="inject a failure of cluster CLUSTER (stage x D + replica) at TIME (e.g. 90s, 2h) into a "
                        "run of the simulated step, a checkpoint saved (on the VM) after every --checkpoint-every "
                        "steps, and report the work it loses and the restart (see docs/failures.md); --trace "
                        "and --dag then hold the simulated steps and the save after them")
    p.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="with --fail-at: steps between checkpoints (default: Daly's interval in whole steps, as "
                        "`ratc plan --failures` reports, on the VM's step, save and read-back times)")
    p.set_defaults(func=handler)


def spot_check(program, args: RunRequest) -> int:
    """`--kernel STAGE:TASK`: execute the kernels that task calls and compare them with numpy."""
    from ratc.io import write_output
    from ratc.codegen.assembler import assemble
    from ratc.codegen.spot_check import check_kernel
    from ratc.lifecycle.actions import task_ops
    from ratc.lifecycle.lowering import find_pipeline
    from ratc.program_check import program_platform

    module = program.module         # (check_program verified it and timed its kernels)
    kernels = {op.sym_name: op.attributes for op in module.body.ops if op.name == "life.kernel"}
    if not kernels:
        raise RatcError(f"{args.outdir}: the program has no kernels (compile with the default "
                        "--exec-profile kernel-vm, which runs the codegen pass)")
    stage, ops = task_ops(find_pipeline(module), args.kernel)
    names = sorted({ref.name for op in ops for ref in op.attributes.get("kernels", ())})
    platform = program_platform(program, args.platform)
    units = sorted({op.attributes["unit"] for op in ops})
    lines, failed = [f"task {args.kernel}: stage {stage}, units {units}"], 0
    for name in names:
        a, rel = kernels[name], f"kernels/{name}.rasm"
        check = check_kernel(assemble(program.text(rel), platform, filename=str(program.root / rel)),
                             platform, tuple(a["shape"]), args.seed, a["kind"])
        failed += not check.ok
        lines.append(f"  {check.kernel:<32} {check.cycles:>12,} cycles  max |error| "
                     f"{check.max_abs_error:.3g} (tolerance {check.tolerance:.3g})  "
                     f"{'ok' if check.ok else 'MISMATCH'}")
    write_output(args.output, "\n".join(lines) + "\n")
    if failed:
        raise RatcError(f"{failed} kernel(s) of task {args.kernel} disagree with numpy")
    return 0


def _kernel_table(table: dict, step_seconds: float) -> str:
    """The program's kernels: cycles, MAC utilization, calls and share of the step time."""
    from ratc.codegen.program_kernels import kernel_shares

    lines = ["kernels (calls per step on the stage that runs each most; share = calls x kernel time / step time):",
             f"  {'kernel':<32} {'cycles':>12} {'MAC util':>9} {'calls':>8} {'share':>7}"]
    for name, cycles, util, calls, share in kernel_shares(table, step_seconds):
        lines.append(f"  {name:<32} {cycles:>12,} {100 * util:>8.2f}% {calls:>8,} {100 * share:>6.2f}%")
    return "\n".join(lines) + "\n"


def _warn_other_platform(own, other, config: str | None) -> None:
    """--platform without --plan runs the program's own tasks, whose cycle counts (kernels
    included) were computed for the program's platform: allowed (a what-if), but said."""
    import sys

    # (a platform file may keep a profile's name and change its numbers)
    compiled_for, simulated_on = ((own.name, other.name) if own.name != other.name
                                  else (f"{own.name} (its platform.toml)", f"{other.name} ({other.source})"))
    print(f"ratc run: warning: the program was compiled for {compiled_for}; simulating it on "
          f"{simulated_on} keeps its kernel cycle counts from {compiled_for} (at {simulated_on}'s clock); "
          f"--plan {config or 'CONFIG'} recompiles it for {simulated_on}", file=sys.stderr)


MAX_STEPS = 16       # the VM holds every step's tasks at once


def handler(args: argparse.Namespace) -> int:
    """`ratc run`."""
    return run(RunRequest(**{f.name: getattr(args, f.name) for f in dataclasses.fields(RunRequest)}))


def run(args: RunRequest, compiled=None) -> int:
    """Simulate a program and report it; compiled = (verified module, model profile) when
    `ratc compile` just wrote the program, so the files it holds in memory are not parsed and
    verified again. A plain run of a program run before with the same options reads its
    report back (ratc.vm.system.run_cache)."""
    from ratc.cli.progress import phase
    from ratc.program import load_program
    from ratc.program_check import check_program
    from ratc.vm.system import run_cache

    _check_arguments(args)
    with phase(f"reading and checking {args.outdir}"):
        program = load_program(args.outdir)         # the files against the manifest's hashes
        key = run_cache.run_key(program, args.steps, not args.explicit_replicas,
                                not args.no_memory_limit) if _plain(args) else None
        report = run_cache.load(key) if key is not None and compiled is None else None
        if report is None:
            check_program(program, compiled)        # every file's meaning (ratc.program_check)
    if report is not None:
        return _print_report(args, report)
    if args.kernel:
        _check_spot_check_alone(args)
        return spot_check(program, args)
    failed = _failure_target(args, program) if args.fail_at else None
    run = _simulate(args, program, compiled)
    if run is None:         # out of memory, reported as JSON
        return 1
    if failed is not None:
        return _report_failure(args, run, *failed)
    chain = _write_timeline(args, run.timeline)
    report = run_cache.RunReport.of(run, _kernels_simulated(args, program, run, compiled))
    if key is not None:
        run_cache.store(key, report)
    return _print_report(args, report, chain)


def _plain(args: RunRequest) -> bool:
    """Whether the run reports the program's own step and nothing else (what run_cache keeps):
    no other plan or platform, no files beside the report, no kernels, no failure."""
    return not (args.plan or args.platform or args.trace or args.dag or args.critical_path or args.kernel
                or args.fail_at)


def _print_report(args: RunRequest, report, chain=None) -> int:
    """The run's report (a RunReport, and the critical chain when asked), as text or JSON."""
    res, predicted = report.results, report.predicted
    if args.json:
        import json

        out = {"config": report.config, "results": res.as_dict(), "predicted_step_time_s": predicted,
               "predicted_cost_source": report.cost_source or None, "plan_default_step_time_s": report.plan_default,
               "prediction_error": None if predicted is None else (predicted - res.step_seconds) / res.step_seconds}
        if chain is not None:
            out["critical_path"] = chain.as_dict()
        _write_report(args.output, json.dumps(out, indent=2, sort_keys=True) + "\n", "JSON")
        return 0
    text = f"{report.model} on {report.clusters} clusters, {report.config}\n" + res.text()
    if predicted is not None:
        from ratc.units import format_time

        text += (f"planner (Eq. 12) predicted {format_time(predicted)}; error "
                 f"{100 * (predicted - res.step_seconds) / res.step_seconds:+.2f} % against the VM "
                 f"(priced with {report.cost_source})\n")
        if report.plan_default is not None:
            text += (f"planner priced with {report.plan_default_source} (`ratc plan`'s default): "
                     f"{format_time(report.plan_default)}\n")
    if not report.macs:
        text += "MAC utilization needs the model's graph IR in the program\n"
    if report.kernel_table:
        text += _kernel_table(report.kernel_table, res.step_seconds)
    if chain is not None:
        text += chain.text()
    _write_report(args.output, text, "text")
    return 0


def _check_arguments(args: RunRequest) -> None:
    """Ranges and outputs, before any work (a program's own files are refused as outputs)."""
    from ratc.io import check_output
    from ratc.vm.system.dag import dag_format

    if not 1 <= args.steps <= MAX_STEPS:
        raise RatcError(f"--steps must be 1..{MAX_STEPS}, got {args.steps} (the first steps show the "
                        "steady state: every later one repeats them)")
    if not 0 <= args.seed < 2 ** 63:
        raise RatcError(f"--seed must be 0..2**63-1, got {args.seed}")
    if args.dag is not None:
        dag_format(args.dag)
    for flag, path in (("--trace", args.trace), ("-o", args.output), ("--dag", args.dag)):
        if path not in (None, "-"):
            check_output(path, flag)
    if args.fail_at and args.critical_path:
        raise RatcError("--critical-path reports the step alone; with --fail-at the report is the failure's "
                        "(run without --fail-at for the step's critical path)")
    if args.checkpoint_every is not None and not args.fail_at:
        raise RatcError("--checkpoint-every applies only with --fail-at (the run into which a failure is injected)")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        raise RatcError(f"--checkpoint-every must be at least 1, got {args.checkpoint_every}")
    if args.trace == "-" and args.output in (None, "-"):
        raise RatcError("--trace - writes the trace to stdout, where the report goes too; "
                        "give the report a file (-o FILE) or the trace one")


def _check_spot_check_alone(args: RunRequest) -> None:
    """--kernel runs kernels instead of the simulation: the simulation's flags are refused."""
    simulation_only = [flag for flag, given in (("--json", args.json), ("--trace", args.trace),
                                                ("--plan", args.plan is not None),
                                                ("--explicit-replicas", args.explicit_replicas),
                                                ("--no-memory-limit", args.no_memory_limit),
                                                ("--critical-path", args.critical_path),
                                                ("--dag", args.dag is not None),
                                                ("--fail-at", args.fail_at is not None)) if given]
    if simulation_only:
        raise RatcError(f"--kernel runs one task's kernels against numpy; {', '.join(simulation_only)} "
                        f"{'applies' if len(simulation_only) == 1 else 'apply'} only to the simulation")


def _simulate(args: RunRequest, program, compiled):
    """The program (or --plan's recompile of it) simulated; over budget, an error naming the
    command that runs it anyway (with --json: None, the out-of-memory report written)."""
    from ratc.cli.progress import phase
    from ratc.planner.exec_profile import load_exec_profile
    from ratc.program_check import program_platform
    from ratc.vm.system.driver import simulate_program
    from ratc.vm.system.memory import OutOfMemory

    platform = program_platform(program, args.platform)
    own = program_platform(program)
    other = platform.text != own.text           # another machine than the program's (a what-if)
    if other and args.plan is None and compiled is None:
        _warn_other_platform(own, platform, program.meta.get("config"))
    # the GEMM profile the program was compiled with: its tasks' times and the prediction's
    exec_profile = load_exec_profile(platform, program.meta.get("exec_profile", "paper-table5"))
    try:
        return simulate_program(program, platform, exec_profile, plan=args.plan, steps=args.steps,
                                symmetric=not args.explicit_replicas, memory_limit=not args.no_memory_limit,
                                other_platform=other, compiled=compiled, phase=phase)
    except OutOfMemory as exc:
        if args.json:
            import json

            from ratc.io import write_output
            write_output(args.output, json.dumps({"config": exc.config, "out_of_memory": exc.as_dict()},
                                                 indent=2, sort_keys=True) + "\n")
            return None
        import shlex

        command = " ".join(["ratc run", shlex.quote(str(args.outdir))]
                           + ([f"--plan {shlex.quote(args.plan)}"] if args.plan is not None else [])
                           + ([f"--platform {shlex.quote(args.platform)}"] if args.platform else []))
        raise RatcError(f"{exc}\n`{command} --no-memory-limit` runs it anyway and reports each stage's "
                        "peak memory") from None


def _kernels_simulated(args: RunRequest, program, simulated, compiled) -> dict | None:
    """The kernel table of what was simulated: the program's, or that of the plan --plan just
    compiled (whose kernels need not be the program's)."""
    if args.plan is None or compiled is not None:
        return program.kernel_table
    from ratc.codegen.program_kernels import program_files
    from ratc.program_check import program_platform, read_kernel_table

    kernels = program_files(simulated.module, program_platform(program, args.platform)).get("kernels.json")
    return read_kernel_table(kernels, "kernels.json") if kernels else None


def _write_timeline(args: RunRequest, tl):
    """Write the simulation's --trace and --dag files; the critical chain if --critical-path
    asks for it (else None)."""
    from ratc.io import report_written, write_atomic, write_output
    from ratc.vm.system.critical import critical_chain
    from ratc.vm.system.dag import dag_format, dag_text, task_graph
    from ratc.vm.system.trace import trace_json

    n = len(tl.program.tasks)
    if args.trace == "-":
        write_output("-", trace_json(tl))
    elif args.trace:
        write_atomic(args.trace, trace_json(tl), "--trace")
        report_written(args.trace, f"Chrome trace of {n} tasks (open it in Perfetto)")
    if not (args.dag or args.critical_path):
        return None
    graph = task_graph(tl)
    if args.dag:
        form = dag_format(args.dag)
        write_atomic(args.dag, dag_text(graph, form), "--dag")
        report_written(args.dag, f"task DAG of {n} tasks and {graph.number_of_edges()} dependencies "
                                 f"({'GraphML' if form == 'graphml' else 'DOT'})")
    return critical_chain(tl, graph) if args.critical_path else None


def _write_report(path: str | None, text: str, form: str) -> None:
    """The run's report on stdout, or in a file (and said so)."""
    from ratc.io import report_written, to_file, write_output

    write_output(path, text)
    if to_file(path):
        report_written(path, f"the simulation's report ({form})")


def _failure_target(args: RunRequest, program) -> tuple:
    """--fail-at CLUSTER:TIME parsed, the cluster checked against the program (or --plan's
    configuration) and the platform's failure model found, before any simulation:
    (cluster, seconds, the platform, its [failures] table)."""
    from ratc.lifecycle.lowering import find_plan
    from ratc.planner.failures import failure_spec
    from ratc.program_check import program_platform
    from ratc.step.plan import Plan
    from ratc.units import UnitError, parse_time
    from ratc.vm.system.failure import check_cluster

    cluster, sep, when = args.fail_at.partition(":")
    if not sep or not cluster.strip().isdigit():
        raise RatcError(f"--fail-at expects CLUSTER:TIME, a cluster index and a time with its unit "
                        f"(e.g. 3:90s or 0:2h), got {args.fail_at!r}")
    try:
        at = parse_time(when)
    except UnitError as exc:
        raise RatcError(f"--fail-at {args.fail_at}: {exc}") from None
    if not at >= 0 or at == float("inf"):
        raise RatcError(f"--fail-at {args.fail_at}: the time must be finite and not negative")
    config = parse_config(args.plan) if args.plan is not None else Plan.from_ir(find_plan(program.module)).config
    check_cluster(int(cluster), config.clusters, config.label())
    platform = program_platform(program, args.platform)
    return int(cluster), at, platform, failure_spec(platform)


def _report_failure(args: RunRequest, run, cluster: int, at: float, platform, spec) -> int:
    """--fail-at: the failure injected into a run of the simulated step, as text or JSON."""
    from ratc.vm.system.failure import inject_failure

    failure = inject_failure(run, platform, spec, cluster, at, args.checkpoint_every, steps=args.steps,
                             symmetric=not args.explicit_replicas)
    _write_timeline(args, failure.checkpoint.timeline)      # the steps and the save after them
    if args.json:
        import json

        out = {"config": run.cand.label(), "results": run.results.as_dict(), "failure": failure.as_dict()}
        _write_report(args.output, json.dumps(out, indent=2, sort_keys=True) + "\n", "JSON")
        return 0
    from ratc.units import format_time

    text = (f"{run.model} on {run.cand.clusters} clusters, {run.cand.label()}: step time "
            f"{format_time(run.results.step_seconds)} on the VM\n" + failure.text())
    _write_report(args.output, text, "text")
    return 0

"""`ratc compile`: a model through the frontend, the planner and the lifecycle passes to a program.

With `--emit=graph` it prints the traced graph IR and stops. Otherwise it plans the
configuration (or takes `--plan`), runs the lifecycle pipeline, writes the program
directory (graph IR, scheduled IR, plan, platform profile, manifest) and, unless
`--no-run`, simulates one training step on the system VM.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ratc.cli.model_source import add_model_arguments, check_model_source, describe, load_model, model_file
from ratc.errors import RatcError


def _emit_graph(profile) -> str:
    from ratc.ir import print_module, verify
    from ratc.frontend.graph_ir import module_from_profile

    module = module_from_profile(profile)
    verify(module)
    return print_module(module)


# One printer per --emit stage, in pipeline order; later stages extend this table.
EMITTERS = {"graph": _emit_graph}


def register(sub) -> None:
    p = sub.add_parser("compile", help="trace, plan, schedule and simulate a model (writes a program)",
                       description="Trace a PyTorch model file (or a Hugging Face config.json) on the meta "
                                   "device, plan its training configuration, run the lifecycle passes, "
                                   "write the program directory and simulate one step on the system VM. "
                                   "--emit=graph prints the traced graph IR instead.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n"
                              "  ratc compile examples/llama.py --preset llama2-7b --clusters 8 -o out/llama2-7b\n"
                              "  ratc compile examples/llama.py --preset llama2-7b --emit=graph\n"
                              "  ratc compile --hf-config examples/hf/qwen2.json --seq-len 512 --clusters 8 -o out/qwen2")
    add_model_arguments(p, "model file following the model-file protocol (docs/frontend.md); "
                           "omit for the bundled example with --preset", tracer=True)
    p.add_argument("--emit", choices=sorted(EMITTERS),
                   help="print this stage's IR and stop (default: compile the whole program)")
    p.add_argument("-o", "--output",
                   help="program directory to write (default out/<model>); with --emit, the IR file")
    from ratc.cli.pass_options import add_pass_options
    from ratc.cli.plan import add_planning_arguments

    add_planning_arguments(p, exec_profile="kernel-vm")
    p.add_argument("--plan", metavar="CONFIG",
                   help="compile this configuration instead of planning one, even if it does not fit "
                        "(e.g. 'P=2,D=4,Z=2,b=1,A=128,FSR,deadline'); the VM then reports out-of-memory")
    p.add_argument("--tiles", metavar="SPEC", default="",
                   help="tile choices of the codegen pass, e.g. 'gemm_2048x4096x4096_f16:kt=64,md=128' "
                        "(several separated by ';'; keys: gm gn md nd kt groups unroll, attention br bc)")
    p.add_argument("--no-run", action="store_true", help="do not simulate the program on the system VM")
    p.add_argument("--report", action="store_true",
                   help="also write the HTML report (OUTDIR/report.html, see `ratc report`)")
    p.add_argument("--json", action="store_true", help="print the VM's results as JSON")
    p.add_argument("--trace-out", metavar="FILE", help="write the VM's Chrome-trace timeline here")
    add_pass_options(p)
    p.set_defaults(func=run)


def _header(command: str, profile) -> str:
    """Comment lines that say how to reproduce the output and how it was traced."""
    meta = profile.meta
    return f"// {command}\n// tracer: {meta.get('tracer')}, layers traced: {meta.get('traced_layers')}\n"


def check_arguments(args: argparse.Namespace) -> None:
    """What the parser cannot say: a compile needs a cluster count or a plan, unless it stops at --emit."""
    if args.output == "":
        raise RatcError("-o needs a path (omit it for out/<model>)")
    if args.emit is None and args.clusters is None and args.plan is None:
        raise RatcError("ratc compile: give --clusters N (or --plan CONFIG), or --emit=graph to stop after tracing")
    for flag, value in (("--clusters", args.clusters), ("--global-batch", args.global_batch)):
        if value is not None and value < 1:
            raise RatcError(f"{flag} must be at least 1, got {value}")
    if args.clusters is not None:
        from ratc.limits import MAX_CLUSTERS
        MAX_CLUSTERS.check(args.clusters, "--clusters")
    from ratc.cli.plan import memory_budget
    memory_budget(args)         # before tracing


def check_output_dir(path) -> None:
    """Refuse a program directory -o (through a symlink) that is or holds an input, or is not
    a ratc program holding only what ratc wrote."""
    from ratc.io import refuse_input
    from ratc.program import check_replaceable, resolve_output_dir

    outdir = resolve_output_dir(path)
    refuse_input(outdir, "-o")
    check_replaceable(outdir)


def run(args: argparse.Namespace) -> int:
    from ratc.io import check_output, write_output

    check_model_source(args)      # a missing model file first: it is what the user typed wrong
    check_arguments(args)
    if args.output is not None:   # before tracing: a refused output costs the user nothing
        check_output_dir(args.output) if args.emit is None else check_output(args.output, "-o")
    from ratc.cli.progress import phase

    with phase(f"tracing {args.hf_config or args.model or args.preset}"):
        profile = load_model(args)
    unmodeled = profile.meta.get("unmodeled_ops") or []
    if unmodeled:
        print(f"ratc: warning: no cost formula for {', '.join(unmodeled)}; "
              "costed as generic elementwise ops", file=sys.stderr)
    command = f"ratc compile {describe(args)}"
    if args.emit is not None:
        text = _header(f"{command} --emit={args.emit}", profile) + EMITTERS[args.emit](profile)
        write_output(args.output, text)
        return 0
    outdir, module = compile_to_directory(args, profile, command)
    status = 0
    if args.no_run:
        print(f"wrote {outdir}; simulate it with `ratc run {outdir}`", file=sys.stderr)
    else:
        from ratc.cli.run import RunRequest
        from ratc.cli.run import run as run_program

        status = run_program(RunRequest(str(outdir), json=args.json, trace=args.trace_out), compiled=(module, profile))
    if args.report:
        from ratc.cli.report import report_program

        report_program(outdir, args.strategy, args.pipeline)
    return status


def invocation(args: argparse.Namespace, fallback: str) -> str:
    """The whole command line as typed (`ratc compile ...` with every option), for the manifest."""
    import shlex

    argv = getattr(args, "argv", None)
    return f"ratc {shlex.join(argv)}" if argv else fallback


def choose_candidate(args: argparse.Namespace, planner):
    """(candidate, plan result or None): the forced --plan, or the planner's best."""
    from ratc.cli.plan import global_batch
    from ratc.planner.strategies import get_strategy
    from ratc.step.config import parse_config

    if args.plan is not None:
        cand = parse_config(args.plan)
        if args.clusters is not None and cand.clusters != args.clusters:
            raise RatcError(f"--plan {args.plan} uses {cand.clusters} clusters (P x D x T), "
                            f"but --clusters is {args.clusters}")
        if args.global_batch is not None and cand.global_batch != args.global_batch:
            raise RatcError(f"--plan {args.plan} trains {cand.global_batch} sequences per step (D x b x A), "
                            f"but --global-batch is {args.global_batch}")
        return cand, None
    result = planner.require_feasible(planner.plan(args.clusters, global_batch(args), get_strategy(args.strategy),
                                                   progress=True, pipeline=args.pipeline))
    return _compilable(result), result


def _compilable(result):
    """The fastest feasible candidate whose step ratc can build (A <= MAX_MICRO_BATCHES)."""
    from ratc.limits import MAX_MICRO_BATCHES
    from ratc.planner.report import compilable
    from ratc.units import format_time

    best = result.feasible[0]
    ev = next((e for e in result.feasible if compilable(e)), None)
    if ev is None:
        raise RatcError(f"every configuration that fits runs more than {MAX_MICRO_BATCHES} micro-batches per step "
                        f"(the fastest, {best.cand.label()}, runs A={best.cand.A}), more than ratc compiles; "
                        "allow larger micro-batches (--micro-batch) or use a smaller global batch")
    if ev is not best:
        print(f"note: the planner's fastest, {best.cand.label()}, runs A={best.cand.A} micro-batches per step, "
              f"more than ratc compiles ({MAX_MICRO_BATCHES}); compiling the fastest that it can, "
              f"{ev.cand.label()} ({format_time(ev.t_step)}, {ev.t_step / best.t_step:.3f}x the fastest)", file=sys.stderr)
    return ev.cand


def compile_to_directory(args: argparse.Namespace, profile, command: str):
    """Plan, schedule and write the program directory; returns (its path, the scheduled module)."""
    from ratc.cli.pass_options import instrumentation, verify_mode
    from ratc.cli.plan import make_planner
    from ratc.cli.progress import phase
    from ratc.ir import print_module
    from ratc.lifecycle.actions import format_pipeline
    from ratc.lifecycle.compile import CompileOptions, compile_program
    from ratc.lifecycle.lowering import find_pipeline
    from ratc.planner.report import render_json
    from ratc.program import write_program

    outdir = Path(args.output or Path("out") / profile.name)
    check_output_dir(outdir)
    planner = make_planner(args, profile)
    cand, result = choose_candidate(args, planner)
    if args.tiles and not planner.exec_profile.runs_kernels:
        raise RatcError("--tiles sets the codegen pass's tiles; it runs with --exec-profile kernel-vm only")
    inst = instrumentation(args)
    with phase(f"compiling {cand.label()}", enabled=not inst.prints()) as show:
        inst.progress = lambda i, n, p: show(f"compiling {cand.label()}: pass {i}/{n}, {p.name}")
        # (a forced plan may not fit: the VM, not the compiler, reports that)
        options = CompileOptions(planner=planner, verify=verify_mode(args), tiles=args.tiles,
                                 instrumentation=inst, memory_limit=not args.plan)
        if args.tiles:
            # The re-tiled kernels price the plan's units too, so that the schedule (the fsr
            # pass's co-runs) and `ratc run`'s prediction rest on them.
            from dataclasses import replace

            from ratc.codegen.program_kernels import parse_tiles, retiled_by
            from ratc.lifecycle.plan_ir import plan_op

            units = plan_op(profile, cand, planner.platform, planner).region.ops
            retiled = retiled_by(units, planner.platform, parse_tiles(args.tiles))
            options = replace(options, planner=planner.with_exec_profile(replace(planner.exec_profile, tiles=retiled)))
        module = compile_program(profile, cand, planner.platform, options)
    with phase(f"writing {outdir}"):
        files = {
            "model.ir": _header(command + " --emit=graph", profile) + _emit_graph(profile),
            "program.ir": print_module(module),
            "schedule.txt": format_pipeline(find_pipeline(module)) + "\n",
            "platform.toml": planner.platform.text,
        }
        if result is not None:
            files["plan.json"] = render_json(result, profile.seq_len, top=20, with_explain=True)
        # The tasks' times rest on the codegen pass's kernels, so the program carries their code.
        from ratc.codegen.program_kernels import program_files

        files.update(program_files(module, planner.platform))
        from ratc.dist import source

        meta = {"command": invocation(args, command), "model": profile.name, "config": cand.label(),
                "platform": planner.platform.name, "exec_profile": args.exec_profile if planner.platform.has_kernels else "host",
                "model_source": source.record(model_file(args), profile.name, profile.seq_len, args.hf_config)}
        write_program(outdir, files, meta)
    print(f"compiled {profile.name}: {cand.label()} -> {outdir}", file=sys.stderr)
    return outdir, module

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

from ratc.errors import RatcError


def _emit_graph(profile) -> str:
    from ratc.ir import print_module, verify
    from ratc.ir.dialects.graph import module_from_profile

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
    p.add_argument("model", nargs="?", help="model file following the model-file protocol (docs/frontend.md)")
    p.add_argument("--preset", help="preset of the model file (default: its DEFAULT_PRESET)")
    p.add_argument("--seq-len", type=int, help="sequence length to trace (default: the model's input_spec)")
    p.add_argument("--hf-config", metavar="CONFIG_JSON",
                   help="trace a Hugging Face causal LM from its config.json instead (needs ratc[hf])")
    p.add_argument("--trace", choices=("auto", "fx", "export"), default="auto",
                   help="tracer for model files: torch.fx, torch.export, or fx then export (default)")
    p.add_argument("--emit", choices=sorted(EMITTERS),
                   help="print this stage's IR and stop (default: compile the whole program)")
    p.add_argument("-o", "--output",
                   help="program directory to write (default out/<model>); with --emit, the IR file")
    from ratc.cli.pass_options import add_pass_options
    from ratc.cli.plan import add_planning_arguments

    add_planning_arguments(p, global_batch_required=False, exec_profile="kernel-vm")
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


def check_source(args: argparse.Namespace) -> None:
    """The model the arguments name: one source (a model file or an HF config) that exists."""
    if args.hf_config and args.model:
        raise RatcError("give either a model file or --hf-config, not both")
    if args.hf_config and args.preset:
        raise RatcError("--preset applies to model files, not to --hf-config")
    source = args.hf_config or args.model
    if not source:
        raise RatcError("no model: give a model file or --hf-config CONFIG_JSON")
    if not Path(source).is_file():
        raise RatcError(f"{source}: no such file")


def trace_inputs(args: argparse.Namespace):
    """The ModelProfile the arguments describe (model file or HF config)."""
    from ratc.frontend import trace_hf_config, trace_model_file

    check_source(args)
    if args.hf_config:
        return trace_hf_config(args.hf_config, 2048 if args.seq_len is None else args.seq_len)
    return trace_model_file(args.model, args.preset, args.seq_len, method=args.trace)


def _header(command: str, profile) -> str:
    """Comment lines that say how to reproduce the output and how it was traced."""
    meta = profile.meta
    return f"// {command}\n// tracer: {meta.get('tracer')}, layers traced: {meta.get('traced_layers')}\n"


def check_arguments(args: argparse.Namespace) -> None:
    """What the parser cannot say: a compile needs a cluster count or a plan, unless it stops at --emit."""
    if args.emit is None and args.clusters is None and not args.plan:
        raise RatcError("ratc compile: give --clusters N (or --plan CONFIG), or --emit=graph to stop after tracing")
    for flag, value in (("--clusters", args.clusters), ("--global-batch", args.global_batch)):
        if value is not None and value < 1:
            raise RatcError(f"{flag} must be at least 1, got {value}")


def run(args: argparse.Namespace) -> int:
    from ratc.cli.io import write_output

    check_source(args)      # a missing model file first: it is what the user typed wrong
    check_arguments(args)
    from ratc.cli.progress import phase

    with phase(f"tracing {args.hf_config or args.model}"):
        profile = trace_inputs(args)
    unmodeled = profile.meta.get("unmodeled_ops") or []
    if unmodeled:
        print(f"ratc: warning: no cost formula for {', '.join(unmodeled)}; "
              "costed as generic elementwise ops", file=sys.stderr)
    source = args.hf_config and f"--hf-config {args.hf_config}" or args.model
    extra = "".join(f" --{flag} {v}" for flag, v in (("preset", args.preset), ("seq-len", args.seq_len)) if v)
    if args.emit is not None:
        text = _header(f"ratc compile {source}{extra} --emit={args.emit}", profile) + EMITTERS[args.emit](profile)
        write_output(args.output, text)
        return 0
    outdir, module = compile_to_directory(args, profile, f"ratc compile {source}{extra}")
    status = 0
    if args.no_run:
        print(f"wrote {outdir}; simulate it with `ratc run {outdir}`", file=sys.stderr)
    else:
        from ratc.cli import run as run_command

        status = run_command.handler(argparse.Namespace(
            outdir=str(outdir), plan=None, platform=None, steps=2, explicit_replicas=False,
            no_memory_limit=False, json=args.json, trace=args.trace_out, output=None), compiled=(module, profile))
    if args.report:
        from ratc.cli import report as report_command

        report_command.handler(argparse.Namespace(
            outdir=str(outdir), model=None, preset=None, seq_len=None, clusters=None, global_batch=None,
            platform=args.platform, strategy=args.strategy, pipeline=args.pipeline, top=10, simulate_top=3,
            format="png",
            output="report.html"))
    return status


def choose_candidate(args: argparse.Namespace, planner):
    """(candidate, plan result or None): the forced --plan, or the planner's best."""
    from ratc.planner.strategies import get_strategy
    from ratc.vm.system.driver import parse_config

    if args.plan:
        cand = parse_config(args.plan)
        if args.clusters is not None and cand.clusters != args.clusters:
            raise RatcError(f"--plan {args.plan} uses {cand.clusters} clusters (P x D x T), "
                            f"but --clusters is {args.clusters}")
        return cand, None
    global_batch = 64 * args.clusters if args.global_batch is None else args.global_batch
    result = planner.require_feasible(planner.plan(args.clusters, global_batch, get_strategy(args.strategy),
                                                   progress=True, pipeline=args.pipeline))
    return result.feasible[0].cand, result


def compile_to_directory(args: argparse.Namespace, profile, command: str):
    """Plan, schedule and write the program directory; returns (its path, the scheduled module)."""
    from pathlib import Path

    from ratc.cli.pass_options import instrumentation
    from ratc.cli.plan import make_planner
    from ratc.cli.progress import phase
    from ratc.ir import print_module
    from ratc.lifecycle import compile_program, format_pipeline
    from ratc.lifecycle.lowering import find_pipeline
    from ratc.planner.report import render_json
    from ratc.program import write_program

    planner = make_planner(args, profile)
    cand, result = choose_candidate(args, planner)
    if args.tiles and not planner.exec_profile.runs_kernels:
        raise RatcError("--tiles sets the codegen pass's tiles; it runs with --exec-profile kernel-vm only")
    inst = instrumentation(args, command)
    with phase(f"compiling {cand.label()}", enabled=not inst.prints()) as show:
        inst.progress = lambda i, n, p: show(f"compiling {cand.label()}: pass {i}/{n}, {p.name}")
        module = compile_program(profile, cand, planner.platform, {
            "planner": planner, "verify_each": not args.no_verify, "tiles": args.tiles, "instrumentation": inst,
            # A forced plan may not fit; the VM, not the compiler, reports that.
            "budget": "none" if args.plan else "plan"})
    outdir = Path(args.output or Path("out") / profile.name)
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
        meta = {"command": command, "model": profile.name, "config": cand.label(),
                "platform": planner.platform.name, "exec_profile": args.exec_profile}
        write_program(outdir, files, meta)
    print(f"compiled {profile.name}: {cand.label()} -> {outdir}", file=sys.stderr)
    return outdir, module

"""`ratc report OUTDIR`: a self-contained HTML report of a plan and its simulated schedule."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ratc.cli.model_source import add_model_arguments, load_model, named
from ratc.cli.plan import pipeline_degree
from ratc.errors import RatcError
from ratc.planner.exec_profile import EXEC_PROFILES

TOP, SIMULATE_TOP, FORMAT, OUTPUT = 10, 3, "png", "report.html"      # the options' defaults


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="write an HTML report: pipeline diagram, memory, plan ranking, kernels",
        description="Simulate the compiled program in OUTDIR (written by `ratc compile`) on the system VM, rank "
                    "the planner's candidates for the same model, clusters and batch, simulate the best few, and "
                    "write OUTDIR/report.html with the pictures beside it. The page embeds every image and "
                    "style, so it opens without network access. Without a compiled program, give a model "
                    "(--preset or a model file) with --clusters and --global-batch and the best plan is compiled "
                    "in memory.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  ratc report out/\n"
               "  ratc report out/ --preset llama2-7b --clusters 8 --global-batch 512")
    p.add_argument("outdir", help="program directory of `ratc compile`, or where to write the report")
    add_model_arguments(p, "model file, when OUTDIR holds no compiled program (or --preset / --hf-config)")
    p.add_argument("--clusters", type=int, help="clusters (default: the compiled plan's P x D x T)")
    p.add_argument("--global-batch", type=int, help="sequences per step (default: the compiled plan's)")
    p.add_argument("--platform", default="mt3000", help="platform when there is no compiled program (default mt3000)")
    p.add_argument("--exec-profile", choices=EXEC_PROFILES, default="kernel-vm",
                   help="GEMM profile when there is no compiled program (default kernel-vm, as `ratc compile`)")
    p.add_argument("--strategy", default="ratrain", help="planner search space for the ranking (default ratrain)")
    p.add_argument("--pipeline", type=pipeline_degree, default=None, metavar="P|any",
                   help="pipeline degree of the ranking: a number fixes P, 'any' searches every P "
                        "(default: as `ratc plan`)")
    p.add_argument("--top", type=int, default=TOP, help="ranked candidates listed (default 10)")
    p.add_argument("--simulate-top", type=int, default=SIMULATE_TOP,
                   help="how many of the best candidates the VM simulates for predicted vs simulated (default 3)")
    p.add_argument("--format", choices=("png", "svg"), default=FORMAT, help="image format (default png)")
    p.add_argument("-o", "--output", default=OUTPUT,
                   help="HTML file name, relative to OUTDIR unless absolute (default report.html)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (stable keys) instead of text")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    """`ratc report`: of the compiled program in OUTDIR, or of the best plan for a named model."""
    from ratc.program import MANIFEST

    if args.top < 1 or args.simulate_top < 0:
        raise RatcError(f"--top must be >= 1 and --simulate-top >= 0 (got {args.top}, {args.simulate_top})")
    say = _progress()
    if (Path(args.outdir) / MANIFEST).is_file():
        if named(args):
            raise RatcError(f"{args.outdir} holds a compiled program; its model is the one reported "
                            "(drop the model file / --preset / --hf-config / --hf-model)")
        planner, clusters, batch, module = _of_program(args.outdir, say)
        clusters = clusters if args.clusters is None else args.clusters
        batch = batch if args.global_batch is None else args.global_batch
    else:
        if not named(args) or args.clusters is None or args.global_batch is None:
            raise RatcError(f"{args.outdir} holds no compiled program (no {MANIFEST}); compile one with "
                            "`ratc compile`, or give a model (--preset NAME, a model file, --hf-config or --hf-model) "
                            "with --clusters N and --global-batch G")
        planner, clusters, batch, module = _of_model(args, say), args.clusters, args.global_batch, None
    return _report(args.outdir, planner, clusters, batch, module, args.strategy, args.pipeline, say,
                   top=args.top, simulate_top=args.simulate_top, fmt=args.format, output=args.output,
                   as_json=args.json)


def report_program(outdir, strategy: str, pipeline) -> int:
    """The report of the compiled program in `outdir`, with the options' defaults (`ratc compile --report`)."""
    say = _progress()
    return _report(outdir, *_of_program(outdir, say), strategy, pipeline, say)


def _progress():
    """say(msg): progress with the seconds since now, on terminals only, as every command's
    phases (redirected output has none)."""
    start = time.perf_counter()

    def say(msg: str) -> None:
        if sys.stderr.isatty():
            print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr)
    say.start = start
    return say


def _of_program(outdir, say) -> tuple:
    """(planner, clusters, global batch, module) of a compiled program: planned as its kernels
    run (the tiles it was compiled with included), under its memory budget."""
    from ratc.codegen.program_kernels import program_exec_profile
    from ratc.lifecycle.lowering import find_plan
    from ratc.planner.exec_profile import load_exec_profile
    from ratc.planner.search import Planner
    from ratc.report.inputs import load_inputs
    from ratc.step.plan import Plan

    say(f"reading {outdir}")
    inputs = load_inputs(outdir)
    module, platform = inputs.module, inputs.platform
    plan = Plan.from_ir(find_plan(module))
    profile = program_exec_profile(load_exec_profile(platform, inputs.exec_profile), module)
    planner = Planner(inputs.profile, platform, profile, budget=plan.budget)
    return planner, plan.config.clusters, plan.config.global_batch, module


def _of_model(args: argparse.Namespace, say):
    """The planner of a named model (no compiled program)."""
    from ratc.planner.exec_profile import load_exec_profile
    from ratc.planner.search import Planner
    from ratc.platform import load_platform

    say("tracing the model")
    model = load_model(args)
    platform = load_platform(args.platform)
    return Planner(model, platform, load_exec_profile(platform, args.exec_profile))


def _report(outdir, planner, clusters: int, batch: int, module, strategy: str, pipeline, say, *,
            top: int = TOP, simulate_top: int = SIMULATE_TOP, fmt: str = FORMAT, output: str = OUTPUT,
            as_json: bool = False) -> int:
    """Plan, simulate the best few, write the report and print its summary."""
    from ratc.report.build import build_report, write_report
    from ratc.report.summary import report_summary

    say(f"planning {clusters} clusters, global batch {batch}")
    result = planner.plan(clusters, batch, strategy, pipeline=pipeline)
    if module is None:
        result = planner.require_feasible(result)
    report, images = build_report(planner, result, module, top=top, simulate_top=simulate_top, fmt=fmt,
                                  progress=say)
    paths = write_report(outdir, report, images, output)
    # the summary is the same for the same input; how long it took goes to stderr, as plan's
    summary = report_summary(report, str(paths[0]))
    if as_json:
        import json
        print(json.dumps(summary.as_dict(), indent=2, sort_keys=True))
    else:
        print(summary.render(), end="")
    print(f"ratc report: {time.perf_counter() - say.start:.1f} s", file=sys.stderr)
    return 0

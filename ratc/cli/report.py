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
    p.add_argument("--top", type=int, default=10, help="ranked candidates listed (default 10)")
    p.add_argument("--simulate-top", type=int, default=3,
                   help="how many of the best candidates the VM simulates for predicted vs simulated (default 3)")
    p.add_argument("--format", choices=("png", "svg"), default="png", help="image format (default png)")
    p.add_argument("-o", "--output", default="report.html",
                   help="HTML file name, relative to OUTDIR unless absolute (default report.html)")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from ratc.planner.exec_profile import load_exec_profile
    from ratc.planner.search import Planner
    from ratc.program import MANIFEST
    from ratc.report.build import build_report, write_report
    from ratc.report.summary import report_summary

    if args.top < 1 or args.simulate_top < 0:
        raise RatcError(f"--top must be >= 1 and --simulate-top >= 0 (got {args.top}, {args.simulate_top})")
    start = time.perf_counter()

    def say(msg: str) -> None:
        # progress on terminals only, as every command's phases: redirected output has none
        if sys.stderr.isatty():
            print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr)

    module = None
    if (Path(args.outdir) / MANIFEST).is_file():
        from ratc.codegen.program_kernels import program_exec_profile
        from ratc.lifecycle.lowering import find_plan
        from ratc.report.inputs import load_inputs
        from ratc.step.plan import Plan

        if named(args):
            raise RatcError(f"{args.outdir} holds a compiled program; its model is the one reported "
                            "(drop the model file / --preset / --hf-config)")
        say(f"reading {args.outdir}")
        inputs = load_inputs(args.outdir)
        module, platform, model = inputs.module, inputs.platform, inputs.profile
        plan = Plan.from_ir(find_plan(module))
        cand = plan.config
        # as the program's kernels run (tiles it was compiled with included)
        planner = Planner(model, platform, program_exec_profile(load_exec_profile(platform, inputs.exec_profile), module),
                          budget=plan.budget)
        clusters = cand.clusters if args.clusters is None else args.clusters
        batch = cand.global_batch if args.global_batch is None else args.global_batch
    else:
        from ratc.platform import load_platform

        if not named(args) or args.clusters is None or args.global_batch is None:
            raise RatcError(f"{args.outdir} holds no compiled program (no {MANIFEST}); compile one with "
                            "`ratc compile`, or give a model (--preset NAME, a model file or --hf-config) "
                            "with --clusters N and --global-batch G")
        say("tracing the model")
        model = load_model(args)
        platform = load_platform(args.platform)
        planner = Planner(model, platform, load_exec_profile(platform, args.exec_profile))
        clusters, batch = args.clusters, args.global_batch
    say(f"planning {clusters} clusters, global batch {batch}")
    result = planner.plan(clusters, batch, args.strategy, pipeline=args.pipeline)
    if module is None:
        result = planner.require_feasible(result)
    report, images = build_report(planner, result, module, top=args.top, simulate_top=args.simulate_top,
                                  fmt=args.format, progress=say)
    paths = write_report(args.outdir, report, images, args.output)
    # the summary is the same for the same input; how long it took goes to stderr, as plan's
    print(report_summary(report, str(paths[0])).render(), end="")
    print(f"ratc report: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0

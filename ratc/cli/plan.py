"""`ratc plan`: pick the fastest training configuration that fits in memory (paper Alg. 2)."""

from __future__ import annotations

import argparse
import sys

from ratc.cli.model_source import add_model_arguments, check_model_source, load_model, picked
from ratc.errors import RatcError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="search P/D/T/ZeRO/micro-batch/activation/prefetch configurations",
        description="Enumerate training configurations for a model on a platform, prune those over the "
                    "per-cluster memory budget (Eq. 10) and rank the rest by predicted step time (Eq. 12).")
    add_model_arguments(p, "model file (python, see examples/llama.py); omit to use the bundled example "
                           "with --preset")
    add_planning_arguments(p)
    p.add_argument("--min-clusters", action="store_true",
                   help="find the smallest cluster count (whole nodes) with a feasible plan")
    p.add_argument("--max-clusters", type=int, default=4096, help="search limit for --min-clusters")
    p.add_argument("--top", type=int, default=5, help="candidates to print (default 5)")
    p.add_argument("--explain", action="store_true", help="say why alternatives lost or did not fit")
    p.add_argument("--failures", action="store_true",
                   help="price failures per candidate with the platform's [failures] model: checkpoint size and "
                        "write time, Young/Daly checkpoint interval, expected goodput and useful steps per hour")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("-o", "--output", help="write the report to a file instead of stdout")
    p.set_defaults(func=handler)


GLOBAL_BATCH_PER_CLUSTER = 64       # sequences per optimizer step and cluster, unless --global-batch says


def global_batch(args: argparse.Namespace) -> int:
    """--global-batch, or the default for --clusters (said on stderr)."""
    if args.global_batch is not None:
        return args.global_batch
    batch = GLOBAL_BATCH_PER_CLUSTER * args.clusters
    picked(args, f"a global batch of {batch} sequences ({GLOBAL_BATCH_PER_CLUSTER} per cluster; "
                 "--global-batch chooses another)")
    return batch


def add_planning_arguments(p: argparse.ArgumentParser, exec_profile: str = "paper-table5") -> None:
    """The options shared by `ratc plan` and `ratc compile`: clusters, batch, platform, strategy."""
    p.add_argument("--clusters", type=int, help="clusters to use (P x D x T must equal it)")
    p.add_argument("--global-batch", type=int,
                   help=f"sequences per optimizer step (default: {GLOBAL_BATCH_PER_CLUSTER} per cluster)")
    p.add_argument("--platform", default="mt3000", help="platform profile name or TOML file (default mt3000)")
    p.add_argument("--memory-budget",
                   help="override the per-cluster memory budget, e.g. 30GB")
    p.add_argument("--strategy", default="ratrain", help="search space: ratrain, tp-heavy, zero3-heavy, "
                   "backward-ckpt, full-save, tuned-pp-dp-zero, any (default ratrain)")
    p.add_argument("--pipeline", type=pipeline_degree, default=None, metavar="P|any",
                   help="pipeline degree: a number fixes P, 'any' searches every P (default: searched; "
                        "tp-heavy, zero3-heavy, backward-ckpt and full-save keep RATrain's P for the request, "
                        "as the paper's Table 2 baselines do)")
    p.add_argument("--micro-batch", type=int, action="append", metavar="B",
                   help="allowed micro-batch size (repeatable; default 1..16)")
    p.add_argument("--exec-profile", default=exec_profile, help="GEMM execution profile: paper-table5 "
                   "(the paper's measured Table 5) or kernel-vm (cycle counts of ratc's generated kernels) "
                   f"(default {exec_profile})")


def memory_budget(args: argparse.Namespace) -> int | None:
    """--memory-budget in bytes (None if not given): a positive byte size. Plan and compile
    check it before tracing."""
    from ratc import units

    if args.memory_budget is None:
        return None
    try:
        budget = units.parse_bytes(args.memory_budget)
    except units.UnitError as exc:
        raise RatcError(f"--memory-budget: {exc}") from None
    if budget <= 0:
        raise RatcError(f"--memory-budget must be a positive byte size, got {args.memory_budget!r}")
    return budget


def pipeline_degree(text: str) -> int | str:
    """--pipeline: a positive integer or 'any'."""
    if text == "any":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'any', got {text!r}")
    return value


def make_planner(args: argparse.Namespace, model):
    """The Planner the shared planning options describe, for a traced model."""
    from ratc import units
    from ratc.planner.exec_profile import load_exec_profile
    from ratc.planner.search import Planner
    from ratc.platform import load_platform

    platform = load_platform(args.platform)
    budget = memory_budget(args)
    micro = tuple(sorted(set(args.micro_batch))) if args.micro_batch else None
    if micro and micro[0] < 1:
        raise RatcError(f"--micro-batch must be at least 1, got {micro[0]}")
    kwargs = {"micro_batches": micro} if micro else {}
    return Planner(model, platform, load_exec_profile(platform, args.exec_profile), budget, **kwargs)


def handler(args: argparse.Namespace) -> int:
    from ratc import units
    from ratc.io import check_output, report_written, to_file, write_output
    from ratc.planner.report import render_json, render_text
    from ratc.planner.strategies import get_strategy

    check_model_source(args)
    if to_file(args.output):
        check_output(args.output, "-o")         # before tracing and planning
    if args.top < 1:
        raise RatcError(f"--top must be at least 1, got {args.top}")
    if not args.min_clusters and args.clusters is None:
        raise RatcError("ratc plan: give --clusters N (or --min-clusters)")
    if args.min_clusters and args.global_batch is None:
        raise RatcError("ratc plan --min-clusters: give --global-batch G (the default is per cluster, and the "
                        "cluster count is what is searched)")
    from ratc.limits import MAX_CLUSTERS

    # before tracing: a search over a billion clusters ran for minutes before its first error
    if args.min_clusters:
        MAX_CLUSTERS.check(args.max_clusters, "--max-clusters")
    else:
        MAX_CLUSTERS.check(args.clusters, "--clusters")
    memory_budget(args)
    if args.failures:       # before tracing: a platform without a failure model cannot price failures
        from ratc.planner.failures import failure_spec
        from ratc.platform import load_platform
        failure_spec(load_platform(args.platform))
    strategy = get_strategy(args.strategy)
    model = load_model(args)
    planner = make_planner(args, model)
    if args.min_clusters:
        result = planner.min_clusters(args.global_batch, strategy, limit=args.max_clusters, progress=True,
                                      pipeline=args.pipeline)
        if result is None and args.max_clusters < planner.ladder_start():
            raise RatcError(f"--max-clusters {args.max_clusters} leaves no cluster count to try: counts go in whole "
                            f"nodes of {planner.platform.network.clusters_per_node} clusters, from "
                            f"{planner.ladder_start()} (the fewest whose {units.format_bytes(planner.budget)} "
                            f"each can hold {model.name}'s training state)")
        if result is None:
            raise RatcError(f"no cluster count up to {args.max_clusters} fits {model.name} with global batch "
                            f"{args.global_batch} in {units.format_bytes(planner.budget)} per cluster; "
                            "raise --max-clusters or the memory budget")
    else:
        result = planner.require_feasible(planner.plan(args.clusters, global_batch(args), strategy, progress=True,
                                                       pipeline=args.pipeline))
    failures = None
    if args.failures:
        from ratc.planner.failures import failure_report
        failures = failure_report(planner, result, args.top)
    render = render_json if args.json else render_text
    saves = planner.saves(result.best.cand) if args.explain and result.feasible else None
    write_output(args.output, render(result, model.seq_len, args.top, args.explain, failures,
                                     cost_source=planner.exec_profile.cost_source, saves=saves))
    if to_file(args.output):
        report_written(args.output, f"the plan ({'JSON' if args.json else 'text'}, top {args.top})")
    print(f"ratc plan: {result.evaluated} candidates in {result.seconds:.3f} s", file=sys.stderr)
    return 0

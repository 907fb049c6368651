"""`ratc diagram`: the pipeline diagram of one P, M and activation policy (paper Fig. 6)."""

from __future__ import annotations

import argparse
import sys

from ratc.cli.model_source import add_model_arguments, load_model
from ratc.errors import RatcError
from ratc.step.config import SCHEDULES

DEFAULT_PRESET = "llama2-7b"     # of the bundled example, when no model is named
# narrower leaves no room for the axes; wider is a multi-gigapixel image
MIN_WIDTH, MAX_WIDTH = 2.0, 100.0
MAX_MICROBATCHES = 256


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "diagram", help="draw the simulated 1F1B schedule for a P, M and policy (PNG or SVG)",
        description="Simulate one training step of a model at pipeline degree P with M micro-batches on the "
                    "system VM and draw every stage's tasks over time, like the paper's Fig. 6: standard 1F1B "
                    "(recomputation at backward time) or FSR (forward-side recovery). The memory budget is "
                    "not enforced here; `ratc run` does that.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  ratc diagram --pp 4 --microbatches 8 --policy fsr -o fsr.svg\n"
               "  ratc diagram --pp 2 --microbatches 4 --policy standard --virtual-stages 2 -o inter.svg\n"
               "  ratc diagram --pp 2 --microbatches 4 --policy standard --virtual-stages 2 --schedule zb1p "
               "-o zb.svg")
    p.add_argument("--pp", type=int, required=True, metavar="P", help="pipeline stages")
    p.add_argument("--microbatches", type=int, required=True, metavar="M", help="micro-batches per step")
    p.add_argument("--policy", choices=("standard", "fsr"), default="fsr",
                   help="standard: recompute at backward time; fsr: forward-side recovery (default)")
    add_model_arguments(p, f"model file (default: examples/llama.py with --preset, else {DEFAULT_PRESET})")
    p.add_argument("--platform", default="mt3000", help="platform profile name or TOML file (default mt3000)")
    p.add_argument("--virtual-stages", type=int, default=1, metavar="V",
                   help="model chunks per stage: interleaved 1F1B when > 1 (with --policy standard; default 1)")
    p.add_argument("--schedule", choices=SCHEDULES, default="1f1b",
                   help="with --virtual-stages > 1: interleaved 1F1B (default), or a zero-bubble schedule that "
                        "splits each Backward into I (input gradient) and W (weight gradient): zb1p, or zbv "
                        "(--virtual-stages 2, rank r holding stages r and 2P-1-r)")
    p.add_argument("--dp", type=int, default=2, help="data-parallel replicas D (default 2: shows GradSync)")
    p.add_argument("--zero", type=int, choices=(0, 1, 2), default=2, help="ZeRO stage (default 2)")
    p.add_argument("--micro-batch", type=int, default=1, help="sequences per micro-batch (default 1)")
    p.add_argument("--state", choices=("bulk", "layerwise", "deadline"), default="deadline",
                   help="GradSync/UpdateShard/PrefetchW policy (default deadline)")
    p.add_argument("--format", choices=("png", "svg"), help="image format (default: from -o, else png)")
    p.add_argument("--width", type=float, default=10.0, help="figure width in inches (default 10)")
    p.add_argument("-o", "--output", required=True, help="image file to write")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from ratc.cli.progress import phase
    from ratc.io import write_atomic
    from ratc.planner.search import Planner
    from ratc.platform import load_platform
    from ratc.report import diagram
    from ratc.report.build import policy_diagram
    from ratc.report.style import format_of
    from ratc.units import format_time

    fmt = format_of(args.output, "-o", args.format)
    if args.microbatches > MAX_MICROBATCHES:
        raise RatcError(f"--microbatches {args.microbatches}: a diagram shows at most {MAX_MICROBATCHES} "
                        "(its tasks would not be told apart; `ratc run` simulates more)")
    if not MIN_WIDTH <= args.width <= MAX_WIDTH:       # (also refuses NaN)
        raise RatcError(f"--width must be {MIN_WIDTH:g}..{MAX_WIDTH:g} inches, got {args.width}")
    planner = Planner(load_model(args, default_preset=DEFAULT_PRESET), load_platform(args.platform))
    with phase(f"compiling and simulating P={args.pp}, M={args.microbatches}, {args.policy}"):
        data, res = policy_diagram(planner, args.pp, args.microbatches, args.policy, D=args.dp, Z=args.zero,
                                   b=args.micro_batch, pref=args.state, v=args.virtual_stages,
                                   sched=args.schedule)
    with phase(f"drawing {args.output}"):
        image = diagram.render(data, fmt, width=args.width)
    write_atomic(args.output, image)
    print(f"wrote {args.output}: {len(data.intervals)} tasks, step {format_time(res.step_seconds)}, "
          f"exposed tail {format_time(res.tail_seconds)}", file=sys.stderr)
    return 0

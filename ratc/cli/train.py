"""`ratc train`: train a small model by following the compiled schedule, against plain PyTorch."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

from ratc.cli.checkpoint_options import add_checkpoint_arguments, check_checkpoint_arguments
from ratc.cli.model_source import add_model_arguments, check_model_source, model_file, picked
from ratc.errors import RatcError
from ratc.hostmem import keep_freed_memory
from ratc.step.config import ACT_OPTION_NAMES, SCHEDULES, schedule_shape_error


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "train", help="train a model with real tensors by executing ratc's schedule; compare with PyTorch",
        description="Compile the model's training step for P pipeline stages x D replicas, run every task of "
                    "the scheduled life program on CPU tensors (per-layer Forward/Recover/Backward, GradSync, "
                    "sharded AdamW UpdateShard, PrefetchW), and train the same model with plain PyTorch on "
                    "the same batches. Prints both losses per step and their relative deviation.")
    add_model_arguments(p, "model file (see examples/llama.py); omit for the bundled example with --preset",
                        seq_len=False)
    p.add_argument("--steps", type=int, required=True, help="optimizer steps")
    p.add_argument("--pp", type=int, default=1, metavar="P", help="pipeline stages (default 1)")
    p.add_argument("--dp", type=int, default=1, metavar="D", help="data-parallel replicas (default 1)")
    p.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3), metavar="Z", help="ZeRO stage 0-3 (default 0)")
    p.add_argument("--act-policy", default="fsr", choices=tuple(ACT_OPTION_NAMES), help="activation policy (default fsr)")
    p.add_argument("--no-state-pipeline", action="store_true",
                   help="GradSync, UpdateShard and PrefetchW at the step end instead of layer-wise/deadline")
    p.add_argument("--virtual-stages", type=int, default=1, metavar="V",
                   help="model chunks per pipeline stage: interleaved 1F1B when V > 1 (default 1)")
    p.add_argument("--schedule", default="1f1b", choices=SCHEDULES,
                   help="pipeline schedule: 1f1b (interleaved when V > 1), zb1p (zero bubble, V >= 2) or zbv "
                        "(zero bubble in a V, V = 2) (default 1f1b)")
    p.add_argument("--micro-batches", type=int, default=4, metavar="M", help="micro-batches per replica per step (default 4)")
    p.add_argument("--micro-batch-size", type=int, default=2, metavar="B", help="sequences per micro-batch (default 2)")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights and the synthetic data")
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: PyTorch's sums, so the reference's losses, then do "
                        "not depend on the core count; more threads may change their last bits)")
    p.add_argument("--csv", help="write step, ratc loss, reference loss, relative deviation to this CSV")
    p.add_argument("--plot", help="write both loss curves and their relative deviation as a .png or .svg")
    p.add_argument("--no-reference", action="store_true", help="train with ratc only (no comparison)")
    p.add_argument("--json", action="store_true",
                   help="print the run and its losses per step as JSON (stable keys) instead of text")
    p.add_argument("--program", metavar="FILE.ir|DIR",
                   help="execute this scheduled life program (one written by --emit-program, or a program "
                        "directory of `ratc compile`) instead of compiling one; its plan fixes P, D, Z, M, b, "
                        "the activation policy, what each layer keeps, V and the schedule")
    p.add_argument("--emit-program", metavar="FILE.ir", help="write the executed life program here")
    add_checkpoint_arguments(p, "launch", "; runs without the PyTorch reference")
    p.set_defaults(func=handler)


def _csv(rows: list[tuple]) -> str:
    lines = ["step,ratc_loss,reference_loss,relative_deviation"]
    lines += [f"{s},{a!r},{'' if b is None else repr(b)},{'' if d is None else repr(d)}" for s, a, b, d in rows]
    return "\n".join(lines) + "\n"


def plot_losses(rows: list[tuple], path: str, title: str) -> None:
    """The loss per step of (step, loss, reference loss or None, deviation or None) rows as a picture."""
    from matplotlib.figure import Figure

    from ratc.io import write_atomic
    from ratc.report.style import format_of, save

    steps = [r[0] for r in rows]
    fig = Figure(figsize=(7, 6))
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    top.plot(steps, [r[1] for r in rows], label="ratc (scheduled program)", lw=2)
    if rows[0][2] is not None:
        top.plot(steps, [r[2] for r in rows], "--", label="PyTorch reference", lw=1.5)
        # log scale: exact matches (deviation 0) are drawn at the floor
        bottom.semilogy(steps, [max(r[3], 1e-10) for r in rows], ".-", color="C3")
        bottom.axhline(1e-5, color="gray", ls=":", label="1e-5")
        bottom.set_ylabel("rel. deviation")
        bottom.legend(loc="upper left")
    top.set_ylabel("training loss")
    top.set_title(title, fontsize=9)
    top.legend()
    bottom.set_xlabel("step")
    fig.tight_layout()
    write_atomic(path, save(fig, format_of(path, "--plot")))


def _load_program(path: str, cfg):
    """A life program (a program directory or one IR file, through ratc.program_check's
    loader); the run's P, D, Z, M, b and policy come from its plan."""
    import dataclasses

    from ratc.lifecycle.lowering import find_pipeline, find_plan
    from ratc.program_check import open_life_program
    from ratc.step.plan import Plan

    module = open_life_program(path)
    plan = Plan.from_ir(find_plan(module)).config
    pipe = find_pipeline(module).attributes      # (the activation policy the program was lowered with)
    return module, dataclasses.replace(cfg, P=plan.P, D=plan.D, Z=plan.Z, M=plan.A, b=plan.b, keep=plan.keep,
                                       v=plan.v, sched=plan.sched, act=pipe["act"], state_pipeline=pipe.get("state") == "layerwise")


def _checkpoints(args: argparse.Namespace, session):
    """(saves(step done), first step): --resume loaded into the session (checked against
    this run first), and what --checkpoint-dir / --checkpoint-every save after a step."""
    from ratc.io import refuse_input
    from ratc.lifecycle.lowering import find_plan
    from ratc.step.plan import Plan
    from ratc.vm.functional import checkpoint as ckpt

    cfg = session.cfg
    identity = ckpt.identity_of(session.executor, session.preset, session.seq_len, cfg.seed, cfg.opt.lr)
    first = 0
    if args.resume:
        found = ckpt.find(args.resume)
        ckpt.check_fits(found, identity)
        if found.step >= args.steps:
            raise RatcError(f"--resume {args.resume}: the checkpoint is after step {found.step}; --steps "
                            f"{args.steps} leaves nothing to run (--steps counts from the training's first step)")
        ckpt.restore(session.executor, found.path)
        print(f"ratc train: resuming at step {found.step} from {found.path} (saved at {found.config})",
              file=sys.stderr)
        first = found.step
    root = None
    if args.checkpoint_dir:
        refuse_input(args.checkpoint_dir, "--checkpoint-dir")
        root = ckpt.prepare_root(args.checkpoint_dir)    # (now: a typo fails before training)
    label = Plan.from_ir(find_plan(session.module)).label()

    def saves(done: int) -> None:
        if root is not None and (done == args.steps or args.checkpoint_every and done % args.checkpoint_every == 0):
            ckpt.save_local(session.executor, root, done, identity, label)
    return saves, first


def _print_json(cfg, session, params: int, rows: list[tuple], worst, param_dev) -> None:
    """The run as JSON: its model and configuration, and per step ratc's loss, PyTorch's and their deviation."""
    import json

    from ratc.step.config import ACT_OPTION_NAMES, SCHEDULES, schedule_shape_error

    policy = {v: k for k, v in ACT_OPTION_NAMES.items()}[cfg.act]
    out = {"model": cfg.model, "preset": session.preset, "seq_len": session.seq_len, "parameters": params,
           "config": {"P": cfg.P, "D": cfg.D, "Z": cfg.Z, "M": cfg.M, "b": cfg.b, "act_policy": policy,
                      "state_pipeline": cfg.state_pipeline, "global_batch": cfg.global_batch,
                      "v": cfg.v, "sched": cfg.sched},
           "steps": [{"step": i, "loss": ours, "reference_loss": ref, "relative_deviation": dev}
                     for i, ours, ref, dev in rows],
           "max_relative_deviation": worst, "parameter_deviation": param_dev}
    print(json.dumps(out, indent=2, sort_keys=True))


MAX_THREADS = 1024      # torch's own pools fail (or crash) far above a machine's cores


def _check_arguments(args: argparse.Namespace) -> None:
    """Ranges and outputs, before any work (so that a typo does not lose the run)."""
    import torch

    from ratc.io import check_output

    check_model_source(args)
    if args.hf_config:
        # the executor splits the real module with torch.fx, which Hugging Face models defeat
        # (they trace only with torch.export, on the meta device)
        raise RatcError(f"{args.hf_model or args.hf_config}: ratc train runs model files only (it executes the "
                        "real module, split with torch.fx, which Hugging Face models do not trace with); "
                        "`ratc compile`/`plan` take this config, and docs/frontend.md says how to write "
                        "a model file for the same architecture")
    if args.steps < 1:
        raise RatcError(f"--steps must be at least 1, got {args.steps}")
    if args.virtual_stages < 1:
        raise RatcError(f"--virtual-stages must be at least 1, got {args.virtual_stages}")
    if not args.program:        # (a program's plan fixes them)
        why = schedule_shape_error(args.schedule, args.virtual_stages)
        if why:
            raise RatcError(f"--schedule {args.schedule} --virtual-stages {args.virtual_stages}: {why}")
    if not 1 <= args.threads <= MAX_THREADS:
        raise RatcError(f"--threads must be 1..{MAX_THREADS}, got {args.threads}")
    # the optimizer runs in fp32: a learning rate it cannot hold overflows the update
    if not 0 < args.lr <= torch.finfo(torch.float32).max:
        raise RatcError(f"--lr must be positive and finite in fp32, got {args.lr}")
    if not 0 <= args.seed < 2 ** 63:
        raise RatcError(f"--seed must be 0..2**63-1, got {args.seed}")
    for flag, path in (("--csv", args.csv), ("--plot", args.plot), ("--emit-program", args.emit_program)):
        if path is not None:
            check_output(path, flag)
    if args.plot:
        from ratc.report.style import format_of
        format_of(args.plot, "--plot")
    check_checkpoint_arguments(args)



def handler(args: argparse.Namespace) -> int:
    import torch
    from tqdm import tqdm

    from ratc.io import report_written, write_atomic
    from ratc.vm.functional.session import Session, TrainConfig, relative_deviation
    from ratc.vm.functional.shards import AdamW

    _check_arguments(args)
    torch.set_num_threads(args.threads)
    keep_freed_memory()         # (as `ratc launch`'s ranks: ratc.hostmem)
    model = model_file(args)
    cfg = TrainConfig(model=model, preset=args.preset, P=args.pp, D=args.dp, Z=args.zero,
                      act=ACT_OPTION_NAMES[args.act_policy], state_pipeline=not args.no_state_pipeline,
                      M=args.micro_batches, b=args.micro_batch_size, v=args.virtual_stages, sched=args.schedule,
                      seed=args.seed, opt=AdamW(lr=args.lr),
                      reference=not args.no_reference)
    module = None
    if args.program:
        module, cfg = _load_program(args.program, cfg)
    if args.resume and cfg.reference:
        print("ratc train: --resume runs without the PyTorch reference (it would start from its own "
              "initial state)", file=sys.stderr)
        cfg = dataclasses.replace(cfg, reference=False)
    session = Session(cfg, module)
    if not args.preset and not args.program:
        picked(args, f"{model}'s default preset '{session.preset}' (--preset chooses another)")
    saves, first = _checkpoints(args, session)
    policy = {v: k for k, v in ACT_OPTION_NAMES.items()}[cfg.act]
    label = (f"P={cfg.P} D={cfg.D} Z={cfg.Z} {policy} "
             f"state-pipeline={'on' if cfg.state_pipeline else 'off'} M={cfg.M} b={cfg.b}"
             f"{f' v={cfg.v}' if cfg.v > 1 else ''}{f' sched={cfg.sched}' if cfg.sched != '1f1b' else ''}")
    params = sum(u.numel for u in session.units.units)
    if not args.json:
        print(f"ratc train: {cfg.model} [{session.preset}] {label}, global batch {cfg.global_batch} x "
              f"{session.seq_len} tokens, {params:,} parameters")
    if args.emit_program:
        from ratc.ir import print_module
        write_atomic(args.emit_program, print_module(session.module), "--emit-program")
        report_written(args.emit_program, f"the executed life program ({label})")
    rows = []
    bar = tqdm(range(first, args.steps), desc="training", unit="step", disable=None)
    for i in bar:
        ours, ref = session.step(i)
        saves(i + 1)
        dev = None if ref is None else relative_deviation(ours, ref)
        rows.append((i, ours, ref, dev))
        bar.set_postfix(loss=f"{ours:.4f}", **({} if dev is None else {"dev": f"{dev:.1e}"}))
        if not args.json:
            tqdm.write(f"step {i:4d}  loss {ours:.6f}" +
                       ("" if ref is None else f"  pytorch {ref:.6f}  rel.dev {dev:.2e}"))
    bar.close()
    worst = param_dev = None
    if cfg.reference:
        devs = [r[3] for r in rows]
        worst = math.nan if any(math.isnan(d) for d in devs) else max(devs)     # max() would skip a NaN
        param_dev = session.parameter_deviation()
        if not args.json:
            print(f"max per-step relative loss deviation {worst:.2e}; "
                  f"final parameter deviation {param_dev:.2e} (relative L2, worst unit)")
    if args.json:
        _print_json(cfg, session, params, rows, worst, param_dev)
    dev0 = rows[0][3]
    if dev0 is not None and dev0 > 1e-3:
        # the schedule cannot make step 0 differ this much (its weights are PyTorch's): the loss
        # is not the mean of equal micro-batch means
        print(f"ratc train: warning: the step-0 losses already differ by {dev0:.1e}; ratc averages the "
              "micro-batches' losses, which is PyTorch's loss of the whole batch only when forward returns a "
              "mean over a fixed number of tokens per sequence (not reduction='sum', no ignore_index hits)",
              file=sys.stderr)
    bad = [i for i, ours, _, _ in rows if not math.isfinite(ours)]
    if bad:
        print(f"ratc train: warning: the loss is not finite from step {bad[0]} on (learning rate "
              f"{args.lr:g}?)", file=sys.stderr)
    if args.csv:
        write_atomic(args.csv, _csv(rows), "--csv")
        report_written(args.csv, f"losses of {len(rows)} step{'s' if len(rows) > 1 else ''}")
    if args.plot:
        plot_losses(rows, args.plot, f"{Path(cfg.model).name} [{session.preset}] {label}")
        report_written(args.plot, f"loss curves of {len(rows)} step{'s' if len(rows) > 1 else ''}")
    return 0

"""`ratc launch`: run a compiled program on torch.distributed, one local process per rank.

`torchrun -m ratc.dist OUTDIR` runs the same program under torchrun (multi-node through its
rendezvous flags) with the same options.
"""

from __future__ import annotations

import argparse
import os
import sys

from ratc.cli.checkpoint_options import add_checkpoint_arguments, check_checkpoint_arguments
from ratc.errors import RatcError

WARMUP = 2      # steps --measure runs before measuring (see _measured_steps)


def register(sub) -> None:
    p = sub.add_parser("launch", help="run a compiled program on torch.distributed (one process per rank)",
                       description="Run a program directory of `ratc compile` for real: P x D processes on "
                                   "this machine (stage p, replica r is rank p*D + r), each executing its "
                                   "stage's ops in program order with gloo (CPU) or NCCL (GPU) transfers "
                                   "and collectives, on the same synthetic data and seeds as `ratc train`. "
                                   "Under torchrun: `torchrun --nproc-per-node=N -m ratc.dist OUTDIR`.",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog="examples:\n"
                              "  ratc compile examples/llama.py --preset tiny --plan 'P=2,D=2,Z=1,b=2,A=4,FSR,deadline' "
                              "--no-run -o out/tiny-dist\n"
                              "  ratc launch out/tiny-dist --steps 20 --csv losses.csv\n"
                              "  ratc launch out/tiny-dist --measure 5 --measure-json measured.json")
    add_run_arguments(p)
    p.add_argument("--measure", type=int, metavar="K",
                   help=f"run {WARMUP} warm-up steps, then K measured ones, and print the measured step time "
                        "beside the planner's and the system VM's predictions, with per-task-kind times from "
                        "the real trace (replaces --steps)")
    p.add_argument("--measure-json", metavar="FILE", help="with --measure: write the measurement as JSON (stable keys)")
    p.add_argument("--json", action="store_true",
                   help="print the steps (loss, seconds, exposed comm seconds) and any --measure result as JSON "
                        "(stable keys) instead of text")
    p.set_defaults(func=handler, steps=None)


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options `ratc launch` and `python -m ratc.dist` share."""
    p.add_argument("outdir", help="program directory written by `ratc compile`")
    p.add_argument("--steps", type=int, default=10, help="optimizer steps (default 10)")
    p.add_argument("--model", metavar="FILE",
                   help="the model file, if it moved since compiling (its sha256 must match the program's record)")
    p.add_argument("--seed", type=int, default=0, help="seed of the initial weights and the synthetic data")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate (default 1e-3)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                   help="torch.distributed backend (default nccl with GPUs, else gloo)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="longest wait for a transfer or collective before the job fails (default 60)")
    p.add_argument("--check-collectives", action="store_true",
                   help="before every collective, the replicas compare its fingerprint (index, kind, unit, "
                        "bytes); a mismatch stops every rank naming the op (costs one small all-gather each)")
    p.add_argument("--trace", metavar="FILE",
                   help="write the real timeline of every rank (tasks, transfers, collectives, waits) as one "
                        "Chrome trace, in the layout of `ratc run --trace`")
    add_checkpoint_arguments(p, "train")
    p.add_argument("--csv", metavar="FILE", help="write step, loss, wall time and exposed communication per step")
    p.add_argument("--plot", metavar="FILE", help="draw the loss per step as a .png or .svg")


def prepare(args: argparse.Namespace):
    """(verified module, RunConfig, P, D) from the arguments; errors before any process starts."""
    program, cfg, P, D = prepare_program(args)
    return program.module, cfg, P, D


def prepare_program(args: argparse.Namespace):
    """(checked program, RunConfig, P, D) from the arguments (see prepare)."""
    from ratc.dist import source
    from ratc.dist.worker import RunConfig
    from ratc.lifecycle.lowering import find_plan
    from ratc.program_check import open_program
    from ratc.step.plan import Plan

    for flag, value, low in (("--steps", args.steps, 1), ("--threads", args.threads, 1)):
        if value < low:
            raise RatcError(f"{flag} must be at least {low}, got {value}")
    if not args.timeout > 0:
        raise RatcError(f"--timeout must be positive, got {args.timeout}")
    from ratc.io import check_output
    for flag, path in (("--csv", args.csv), ("--trace", args.trace), ("--plot", args.plot)):
        if path:
            check_output(path, flag)
    if args.plot:
        from ratc.report.style import format_of
        format_of(args.plot, "--plot")
    program = open_program(args.outdir)         # checked against its manifest, then validated
    module = program.module
    plan = Plan.from_ir(find_plan(module)).config
    T = plan.T
    if T != 1:
        raise RatcError(f"{args.outdir}: the program's plan has T={T}; the runtime executes no tensor "
                        "parallelism yet (compile with T=1)")
    path, preset = source.resolve(program.meta, str(args.outdir), args.model)
    backend = args.backend or default_backend()
    if backend == "nccl":
        import torch
        if not torch.cuda.is_available():
            raise RatcError("--backend nccl needs CUDA GPUs; this machine has none (use gloo)")
    P, D = plan.P, plan.D
    cfg = RunConfig(model=path, preset=preset, steps=args.steps, seed=args.seed, lr=args.lr, threads=args.threads,
                    timeout_s=args.timeout, backend=backend, check_collectives=args.check_collectives,
                    trace=bool(args.trace))
    return program, _checkpointing(args, module, cfg), P, D


def _checkpointing(args: argparse.Namespace, module, cfg):
    """cfg with --checkpoint-dir, --checkpoint-every and --resume checked (the checkpoint
    against this run) before any rank starts."""
    import dataclasses

    from ratc.dist.checkpoints import resume_point
    from ratc.vm.functional.checkpoint import prepare_root
    from ratc.dist.worker import run_identity
    from ratc.io import refuse_input

    check_checkpoint_arguments(args)
    if args.checkpoint_dir:
        refuse_input(args.checkpoint_dir, "--checkpoint-dir")
        inside = os.path.realpath(args.checkpoint_dir).startswith(os.path.realpath(args.outdir).rstrip(os.sep) + os.sep)
        if inside:
            raise RatcError(f"--checkpoint-dir {args.checkpoint_dir} is inside the program directory {args.outdir} "
                            "(an input of this command); choose a directory outside it")
        cfg = dataclasses.replace(cfg, checkpoint_dir=str(prepare_root(args.checkpoint_dir)),
                                  checkpoint_every=args.checkpoint_every)
    if args.resume:
        found = resume_point(args.resume, run_identity(module, cfg), args.steps)
        print(f"ratc: resuming at step {found.step} from {found.path} (saved at {found.config})", file=sys.stderr)
        cfg = dataclasses.replace(cfg, resume=str(found.path), first_step=found.step)
    return cfg


def default_backend() -> str:
    import torch
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "gloo"


def print_step(tokens_per_step: int):
    """An on_step callback printing one line per step: loss, wall time, tokens/s, and the
    share of the step the ranks spent blocked on transfers and collectives."""
    def show(i: int, loss: float, seconds: float, exposed: float) -> None:
        print(f"step {i:4d}  loss {loss:.6f}  {seconds * 1e3:8.1f} ms  {tokens_per_step / seconds:10.0f} tokens/s  "
              f"exposed comm {exposed * 1e3:7.1f} ms ({exposed / seconds:5.1%})", flush=True)
    return show


def write_outputs(args: argparse.Namespace, result, D: int) -> None:
    """--csv, --plot and --trace from rank 0's result."""
    from ratc.io import report_written, write_atomic

    if args.csv:
        rows = ["step,loss,seconds,exposed_comm_seconds"] + [
            f"{i},{loss!r},{s:.6f},{e:.6f}"
            for i, (loss, s, e) in enumerate(zip(result.losses, result.step_seconds, result.exposed_seconds),
                                             result.first_step)]
        write_atomic(args.csv, "\n".join(rows) + "\n", "--csv")
        report_written(args.csv, f"the loss of {len(result.losses)} steps")
    if args.plot:
        from ratc.cli.train import plot_losses

        rows = [(i, loss, None, None) for i, loss in enumerate(result.losses, result.first_step)]
        plot_losses(rows, args.plot, f"ratc launch {args.outdir}: {len(result.losses)} steps")
        report_written(args.plot, "the loss per step")
    if args.trace:
        from ratc.dist.trace import trace_json

        write_atomic(args.trace, trace_json(result.trace, D), "--trace")
        report_written(args.trace, f"the real timeline of {len(result.trace)} ranks (open in Perfetto)")


def tokens_per_step(module) -> int:
    from ratc.lifecycle.lowering import find_plan
    from ratc.step.plan import Plan

    plan_op = find_plan(module)
    return Plan.from_ir(plan_op).config.global_batch * plan_op.attributes["seq_len"]


def _torchrun(args: argparse.Namespace, world: int) -> int:
    """The ranks under torchrun on this machine (NCCL: CUDA does not survive a fork)."""
    import subprocess

    argv = [a for a in args.argv[1:]]       # this command's own arguments, as typed
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
           "-m", "ratc.dist", *argv]
    print(f"ratc launch: {' '.join(cmd[1:])}", file=sys.stderr)
    return 1 if subprocess.run(cmd).returncode else 0


def _measured_steps(args: argparse.Namespace) -> int:
    """--steps, or with --measure K the WARMUP + K steps it runs (checked). The first step
    pays for what later ones reuse: gloo's connections, the allocator's pools, the optimizer's
    moments; the second still ran measurably slower than the later ones (README)."""
    if args.measure is None:
        if args.measure_json:
            raise RatcError("--measure-json writes the measurement of --measure K; give --measure too")
        return 10 if args.steps is None else args.steps
    if args.measure < 1:
        raise RatcError(f"--measure must be at least 1 (measured steps after {WARMUP} warm-up ones), "
                        f"got {args.measure}")
    for flag, given in (("--steps", args.steps is not None), ("--resume", args.resume is not None)):
        if given:
            raise RatcError(f"--measure K runs {WARMUP} + K steps from the start; drop {flag}")
    if args.measure_json:
        from ratc.io import check_output

        check_output(args.measure_json, "--measure-json")
    return WARMUP + args.measure


def handler(args: argparse.Namespace) -> int:
    import dataclasses

    from ratc.dist.launch import launch

    args.steps = _measured_steps(args)
    program, cfg, P, D = prepare_program(args)
    module = program.module
    if cfg.backend == "nccl":
        if args.json:
            raise RatcError("--json reads the ranks this process forks (gloo); NCCL ranks run under torchrun, "
                            "whose output it does not collect")
        if args.measure is not None:
            raise RatcError("--measure measures ranks this process forks (gloo); NCCL ranks run under torchrun, "
                            "which it does not drive yet")
        return _torchrun(args, P * D)
    from ratc.dist.worker import Stopped

    prediction = None
    if args.measure is not None:
        from ratc.dist.measure import predict

        prediction = predict(program)
        # the warm-up unrecorded, unless --trace wants every step
        cfg = dataclasses.replace(cfg, trace=True, record_from=0 if args.trace else WARMUP)
    print(f"ratc launch: {P * D} ranks (P={P}, D={D}), {cfg.backend}, {cfg.steps} steps", file=sys.stderr)
    try:
        results = launch(module, cfg, P, D, on_step=(lambda *step: None) if args.json
                         else print_step(tokens_per_step(module)))
    except Stopped as exc:
        print(f"ratc launch: {exc}", file=sys.stderr)
        return Stopped.EXIT
    write_outputs(args, results[0], D)
    measured = _report_measurement(args, results, D, prediction, module) if prediction is not None else None
    if args.json:
        import json

        r = results[0]
        steps = [{"step": i, "loss": loss, "seconds": s, "exposed_comm_seconds": e}
                 for i, (loss, s, e) in enumerate(zip(r.losses, r.step_seconds, r.exposed_seconds), r.first_step)]
        out = {"ranks": P * D, "P": P, "D": D, "backend": cfg.backend, "tokens_per_step": tokens_per_step(module),
               "steps": steps, **({"measurement": measured} if measured is not None else {})}
        print(json.dumps(out, indent=2, sort_keys=True))
    return 0


def _report_measurement(args: argparse.Namespace, results: list, D: int, prediction, module) -> dict:
    """The measured steps against the predictions: on stdout (unless --json), and as --measure-json;
    returns them as JSON-ready data."""
    import json

    from ratc.dist.measure import measure, tie_members
    from ratc.io import report_written, write_atomic

    found = measure(results, D, WARMUP, prediction, tie_members(module))
    if not args.json:
        print(found.text(), end="", flush=True)
    if args.measure_json:
        write_atomic(args.measure_json, json.dumps(found.as_dict(), indent=2, sort_keys=True) + "\n",
                     "--measure-json")
        report_written(args.measure_json, f"the measurement of {args.measure} steps")
    return found.as_dict()

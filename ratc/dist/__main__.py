"""`torchrun --nproc-per-node=N -m ratc.dist OUTDIR [options]`: one rank of a compiled program.

torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; the options are `ratc
launch`'s. Rank 0 prints each step and writes --csv.
"""

from __future__ import annotations

import argparse
import os
import sys

from ratc.errors import RatcError


def main(argv: list[str] | None = None) -> int:
    from ratc.cli.launch import add_run_arguments, prepare, print_step, tokens_per_step, write_outputs
    from ratc.dist.worker import Stopped, run_rank

    parser = argparse.ArgumentParser(prog="python -m ratc.dist", description=__doc__.split("\n\n")[0])
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    try:
        if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
            raise RatcError("python -m ratc.dist runs under torchrun (RANK and WORLD_SIZE are not set); "
                            "to start the ranks on this machine use `ratc launch OUTDIR`")
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        module, cfg, _, D = prepare(args)
        result = run_rank(module, cfg, rank, world, on_step=print_step(tokens_per_step(module)) if rank == 0 else None)
        if rank == 0:
            write_outputs(args, result, D)
    except Stopped as exc:          # SIGTERM (torchrun's, a scheduler's): the checkpoint is saved
        print(f"ratc: {exc}", file=sys.stderr)
        return Stopped.EXIT
    except RatcError as exc:
        print(f"ratc: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _exit(code: int) -> None:
    """End the rank without the interpreter's finalization: a gloo worker thread that drops a
    finished collective's last tensor reference while the interpreter shuts down aborts the
    process ("terminate called without an active exception", pytorch/pytorch#179291), after
    its outputs were written. The outputs are complete here (written atomically), so flush and go."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())

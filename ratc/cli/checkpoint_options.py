"""The checkpoint options `ratc launch` and `ratc train` share, and their checks."""

from __future__ import annotations

import argparse

from ratc.errors import RatcError


def add_checkpoint_arguments(p: argparse.ArgumentParser, other: str, resume_note: str = "") -> None:
    """--checkpoint-dir, --checkpoint-every and --resume; `other` is the command whose
    checkpoints this one also reads."""
    p.add_argument("--checkpoint-dir", metavar="DIR",
                   help="save checkpoints (torch.distributed.checkpoint, sharded as the ranks hold the state) "
                        "under DIR/step-NNNNNNNN: after the last step, and every --checkpoint-every steps")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="also save after every N steps (needs --checkpoint-dir)")
    p.add_argument("--resume", metavar="DIR",
                   help="start from the last complete checkpoint under DIR (or the step directory DIR), saved by "
                        f"this command or `ratc {other}` at any P, D and ZeRO stage of the same training; "
                        f"--steps counts from the training's first step{resume_note}")


def check_checkpoint_arguments(args: argparse.Namespace) -> None:
    """--checkpoint-every needs a positive N and --checkpoint-dir."""
    if args.checkpoint_every < 0:
        raise RatcError(f"--checkpoint-every must be at least 1, got {args.checkpoint_every}")
    if args.checkpoint_every and not args.checkpoint_dir:
        raise RatcError("--checkpoint-every N needs --checkpoint-dir DIR")

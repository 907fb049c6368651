"""Checkpoints of a distributed run: a collective save of every rank's state, and the checks
`ratc launch --resume` makes before any rank trains (ratc.vm.functional.checkpoint holds
the format)."""

from __future__ import annotations

import torch.distributed as dist

from ratc.vm.functional import checkpoint as ckpt


def save(executor, transport, root: str, step: int, identity: ckpt.RunIdentity, config: str) -> None:
    """Every rank saves its state into one checkpoint directory, which rank 0 completes
    (manifest, then the rename that makes it visible); collective, in program order."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.device_mesh import DeviceMesh

    from ratc.atomic import Staging, recover
    from ratc.dist.transport import RuntimeFailure

    mesh = transport.mesh
    what = f"the save of checkpoint step {step}"
    staging = None
    try:
        if mesh.rank == 0:
            target = ckpt.step_dir(ckpt.prepare_root(root), step)
            recover(target)
            staging = Staging(target)
        shared = [str(staging.path) if staging is not None else None]
        try:
            dist.broadcast_object_list(shared, src=0)
            device_mesh = DeviceMesh.from_group(transport.group, transport.device.type)
            dcp.save(ckpt.local_state(executor, device_mesh), checkpoint_id=shared[0])
        except (RuntimeError, CheckpointException) as exc:    # gloo's and DCP's (a peer gone, a timeout)
            raise RuntimeFailure(f"{mesh.where()}: {what} failed: {str(exc).splitlines()[0] if str(exc) else exc}")
        if staging is not None:
            ckpt.write_manifest(staging.path, step, step * identity.global_batch, identity, config)
            staging.swap_in(ckpt.refuse_foreign)
            staging.close()
            staging = None
        transport.barrier(what)     # the checkpoint is complete when any rank goes on
    finally:
        if staging is not None:
            staging.discard()
            staging.close()


def resume_point(path: str, identity: ckpt.RunIdentity, steps: int) -> ckpt.Checkpoint:
    """The checkpoint `--resume PATH` names, checked against the run before any rank starts."""
    from ratc.errors import RatcError

    found = ckpt.find(path)
    ckpt.check_fits(found, identity)
    if found.step >= steps:
        raise RatcError(f"--resume {path}: the checkpoint is after step {found.step}; --steps {steps} leaves "
                        "nothing to run (--steps counts from the first step of the training)")
    return found



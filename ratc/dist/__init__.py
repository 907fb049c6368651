"""The distributed runtime: a compiled life program run by one process per (stage, replica)
on torch.distributed (gloo on CPUs, NCCL on GPUs), started by `ratc launch` or torchrun.

Each rank runs the functional executor's op handlers over its own stage and replica; only
the transport differs (`ratc.dist.transport`): point-to-point sends between stages and
asynchronous collectives on the stage's data-parallel group, issued in program order and
waited at their first reader, every wait bounded by a timeout that names the op, the rank
and the peer.
"""

"""`ratc launch`: start the P x D ranks of a program on this machine and supervise them.

The parent has imported torch and read the program once; each rank is a forked child
(a cold `import torch` costs seconds per process) that joins a FileStore rendezvous, runs
`run_rank` and sends its result back through a pipe. A rank that fails or dies ends the
others at once (SIGTERM, then SIGKILL), and the job fails naming it.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import tempfile
import time
import traceback

from ratc.errors import RatcError

GRACE_S = 5.0       # how long a rank being ended may take to exit before SIGKILL


def _child(module, cfg, rank: int, world: int, store_path: str, out_fd: int, on_step, specs) -> int:
    import torch.distributed as dist

    from ratc.dist.worker import run_rank

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        result = run_rank(module, cfg, rank, world, dist.FileStore(store_path, world), on_step, specs)
        data = pickle.dumps(result)
        with os.fdopen(out_fd, "wb") as fh:
            fh.write(data)
        return 0
    except RatcError as exc:
        from ratc.dist.worker import Stopped

        print(f"ratc: {'' if isinstance(exc, Stopped) else 'error: '}{exc}", file=sys.stderr)
        if isinstance(exc, Stopped):
            return Stopped.EXIT
    except BaseException:  # noqa: BLE001 - a rank's crash is reported with its traceback
        print(f"ratc: rank {rank} crashed:\n{traceback.format_exc()}", file=sys.stderr)
    return 1


def _stop(children: dict, grace_s: float) -> None:
    """SIGTERM every rank and reap those that exit within grace_s (a second interrupt cuts it short)."""
    try:
        for pid in children:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while children and time.monotonic() < deadline:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid:
                children.pop(pid, None)
            else:
                time.sleep(0.05)
    except BaseException:  # noqa: BLE001 - the caller kills whoever is left
        pass


def _describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def launch(module, cfg, P: int, D: int, on_step=None, deadline_s: float | None = None) -> list:
    """Run the program on P x D forked ranks; their RankResults by rank, or RatcError. With
    `deadline_s`, ranks still running after that many seconds are ended and the job fails."""
    if cfg.backend == "nccl":
        raise RatcError("the NCCL backend runs its ranks under torchrun (CUDA cannot be used in forked "
                        "children); `ratc launch --backend nccl` starts torchrun itself")
    # What every rank imports and rehearses, done once here: the forked children share it
    # (the rehearsal's meta tensors also import torch._dynamo, seconds per process).
    import torch.distributed  # noqa: F401

    import ratc.dist.transport  # noqa: F401
    import ratc.vm.functional.session  # noqa: F401
    from ratc.dist.worker import rehearse

    specs = rehearse(module, cfg)

    with tempfile.TemporaryDirectory(prefix="ratc-launch-") as tmp:
        store = os.path.join(tmp, "store")
        children, pipes = {}, {}
        sys.stdout.flush()
        sys.stderr.flush()
        for rank in range(P * D):
            r_fd, w_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r_fd)
                code = _child(module, cfg, rank, P * D, store, w_fd, on_step if rank == 0 else None, specs)
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            os.close(w_fd)
            children[pid], pipes[r_fd] = rank, (rank, bytearray())
        # while checkpointing, a SIGTERM of the launcher reaches the ranks, which save first
        grace = 2 * cfg.timeout_s if cfg.checkpoint_dir is not None else None
        results, failure = _supervise(children, pipes, deadline_s, grace)
    if failure == "deadline":
        raise RatcError(f"the job did not finish within {deadline_s:g} s; its ranks were ended")
    if failure is not None:
        rank, status = failure
        from ratc.dist.worker import Stopped

        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == Stopped.EXIT:
            raise Stopped(f"the ranks stopped on SIGTERM, each after saving its part of a checkpoint under "
                          f"{cfg.checkpoint_dir}; `--resume {cfg.checkpoint_dir}` continues the training")
        p, r = divmod(rank, D)
        raise RatcError(f"rank {rank} (stage {p}, replica {r}) {_describe_exit(status)}; the other ranks were ended")
    return [results[r] for r in sorted(results)]


def _supervise(children: dict, pipes: dict, deadline_s: float | None,
               grace_s: float | None = None) -> tuple[dict, object]:
    """Collect the ranks' results until every one has exited; the first failure ends the rest.
    Returns ({rank: result}, (rank, wait status) of the first failure, "deadline" or None).
    Interrupted itself, it ends the ranks at once, or with `grace_s` sends them SIGTERM and
    gives them that long to stop (they save a checkpoint first)."""
    failure, ending_since, results = None, None, {}
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    try:
        while children or pipes:
            if deadline is not None and failure is None and time.monotonic() > deadline:
                failure, ending_since = "deadline", time.monotonic()
                for other in children:
                    os.kill(other, signal.SIGTERM)
            ready = select.select(list(pipes), [], [], 0.05)[0] if pipes else []
            if not pipes:
                time.sleep(0.05)
            for fd in ready:
                chunk = os.read(fd, 1 << 20)
                if chunk:
                    pipes[fd][1].extend(chunk)
                    continue
                rank, data = pipes.pop(fd)
                os.close(fd)
                if data:
                    results[rank] = pickle.loads(bytes(data))
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                rank = children.pop(pid)
                if status != 0 and failure is None:
                    failure, ending_since = (rank, status), time.monotonic()
                    for other in children:
                        os.kill(other, signal.SIGTERM)
            if ending_since is not None and time.monotonic() - ending_since > GRACE_S:
                for other in children:
                    os.kill(other, signal.SIGKILL)
    except BaseException:       # Ctrl-C or SIGTERM of the launcher: no rank outlives it
        if grace_s is not None:
            _stop(children, grace_s)
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        for pid in children:
            os.waitpid(pid, 0)
        raise
    return results, failure

"""Figures between ranks: messages, collectives, and how ranks sharing cores slow each other.

Each rank is a process that joins a FileStore rendezvous: forked from this one for gloo (it
has torch imported; a cold import costs seconds per process), spawned for NCCL (CUDA cannot
run in a forked child). Every wait has the settings' timeout, and the parent ends every rank
as soon as one fails, dies or outlives the deadline, naming it. Rank 0 times; the others
take part.
"""

from __future__ import annotations

import datetime
import math
import multiprocessing
import os
import queue
import tempfile
import time

import torch
import torch.distributed as dist

from ratc.calibrate.compute import FP32, Operands, fixed_cost_units, gemm, memory_op, step_round, synchronizer
from ratc.calibrate.settings import Settings
from ratc.calibrate.stats import CalibrationError, per_call
from ratc.hostmem import keep_freed_memory

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")


class _Rank:
    """One rank's side of the measurements (the same calls, in the same order, on every rank)."""

    def __init__(self, settings: Settings, rank: int, world: int):
        self.settings, self.rank, self.world = settings, rank, world
        self.timeout = datetime.timedelta(seconds=settings.timeout_s)
        self.device = torch.device(f"cuda:{rank}" if settings.device == "cuda" else "cpu")
        self.sync = synchronizer(self.device)
        # every group is made on every rank, in the same order (torch.distributed requires it)
        self.groups = {g: dist.new_group(list(range(g))) for g in range(2, world + 1)}
        # a micro-batch's worth of small tasks in a step's order: the compute beside collectives,
        # and the work [sharing].tasks and .busy time
        self.round = step_round(fixed_cost_units(self.device))

    def wait(self, work, what: str) -> None:
        start = time.monotonic()
        try:
            work.wait(timeout=self.timeout)
        except Exception as exc:  # noqa: BLE001 - the backends raise RuntimeError of many kinds
            # the first sentence of the backend's reason (gloo's goes on about reporting bugs)
            reason = (str(exc).splitlines() or [type(exc).__name__])[0].split(". ")[0]
            waited = time.monotonic() - start
            if waited >= self.settings.timeout_s:
                raise CalibrationError(f"rank {self.rank}: {what} did not complete within "
                                       f"{self.settings.timeout_s:g} s ({reason})") from None
            raise CalibrationError(f"rank {self.rank}: {what} failed after {waited:.1f} s ({reason})") from None
        self.sync()

    def barrier(self) -> None:
        self.wait(dist.barrier(async_op=True), "the barrier between measurements")

    def ping_pong(self, buf: torch.Tensor) -> float:
        """One-way seconds of a message between ranks 0 and 1 (half a round trip)."""
        start = time.perf_counter()
        if self.rank == 0:
            self.wait(dist.isend(buf, 1), f"a send of {buf.numel() * FP32} B to rank 1")
            self.wait(dist.irecv(buf, 1), f"a receive of {buf.numel() * FP32} B from rank 1")
        elif self.rank == 1:
            self.wait(dist.irecv(buf, 0), f"a receive of {buf.numel() * FP32} B from rank 0")
            self.wait(dist.isend(buf, 0), f"a send of {buf.numel() * FP32} B to rank 0")
        return (time.perf_counter() - start) / 2

    def _issue(self, op: str, nbytes: int, ranks: int) -> tuple:
        """(a call issuing the collective over a buffer of nbytes on the first `ranks` ranks,
        asynchronously; the buffer's bytes; what it is, for a wait's error)."""
        shard = torch.ones(max(1, nbytes // (FP32 * ranks)), device=self.device)
        full = torch.ones(shard.numel() * ranks, device=self.device)
        group, what = self.groups[ranks], f"{op} of {full.numel() * FP32} B over {ranks} ranks"
        start = {"all_reduce": lambda: dist.all_reduce(full, group=group, async_op=True),
                 "reduce_scatter": lambda: dist.reduce_scatter_single(shard, full, group=group, async_op=True),
                 "all_gather": lambda: dist.all_gather_single(full, shard, group=group, async_op=True)}[op]
        return start, full.numel() * FP32, what

    def collective(self, op: str, nbytes: int, ranks: int):
        """A call that runs the collective over a buffer of nbytes on the first `ranks` ranks."""
        start, size, what = self._issue(op, nbytes, ranks)

        def run() -> float:
            begin = time.perf_counter()
            self.wait(start(), what)
            return time.perf_counter() - begin
        return run, size

    def _chained(self, group, what: str, step, compute, calls: int) -> float:
        """Extra seconds per call of a chain of `calls` calls of `step()` (each running `compute`
        between a message's issue and its wait, no barrier between calls: a rank late to one
        makes the others wait at it, as in a step) over `calls` runs of `compute` alone, every
        rank of `group` running both after a barrier; a warm-up call first."""
        step()
        self.wait(dist.barrier(group=group, async_op=True), f"a barrier before {what}")
        begin = time.perf_counter()
        for _ in range(calls):
            compute()
        self.sync()
        alone = time.perf_counter() - begin
        self.wait(dist.barrier(group=group, async_op=True), f"a barrier before {what}")
        begin = time.perf_counter()
        for _ in range(calls):
            step()
        return (time.perf_counter() - begin - alone) / calls

    def beside(self, op: str, nbytes: int, ranks: int, compute, calls: int) -> tuple:
        """(buffer bytes, [extra seconds per call]) of the collective issued before a run of
        `compute` and waited for after it, in a chain (_chained). Where the ranks' threads take
        every core, gloo's threads get the cores only as the scheduler hands them over: a
        `tiny` layer's reduce-scatter issued before 1.5 ms of compute ended 2.5 ms after it,
        where it took 0.63 ms alone; a 0.7 MB all-gather beside 2.7 ms of compute cost 0.51 ms
        more after a barrier each time, 0.79 ms in a chain (2026-12-05)."""
        start, size, what = self._issue(op, nbytes, ranks)

        def step() -> None:
            work = start()
            compute()
            self.wait(work, f"{what} beside compute")
        return size, [self._chained(self.groups[ranks], f"{what} beside compute", step, compute, calls)]

    def exchange_beside(self, nbytes: int, compute, calls: int) -> float:
        """Extra seconds per exchange of ranks 0 and 1 in a chain (_chained), each posting the
        receive of the other's message of nbytes, running `compute`, sending its own and waiting
        for the other's (a 1F1B steady state's hand-offs: each stage sends one value and waits
        for one a micro-batch). With the ranks' threads on every core, gloo moves a message
        only as the scheduler hands its threads a core: a 32 KB exchange beside 2.7 ms of
        compute cost 2.1 ms more per exchange (the same beside 7.7 ms), where a ping-pong's
        one way took 0.05 ms (2026-12-05)."""
        peer = 1 - self.rank
        mine = torch.ones(max(1, nbytes // FP32), device=self.device)
        theirs = torch.empty_like(mine)
        what = f"an exchange of {mine.numel() * FP32} B with rank {peer} beside compute"

        def step() -> None:
            receive = dist.irecv(theirs, peer)
            compute()
            send = dist.isend(mine, peer)
            self.wait(receive, what)
            self.wait(send, what)
        return self._chained(self.groups[2], what, step, compute, calls)

    def messages(self) -> dict:
        """{("p2p", 2) or (collective, ranks): [[(bytes, [seconds per call]) per size] per repeat]}."""
        runs = {("p2p", 2): []}
        runs.update({(op, g): [] for g in self.groups for op in COLLECTIVES})
        for _ in range(self.settings.repeats):
            for key in runs:
                sweep = []
                for nbytes, calls in self.settings.messages:
                    if key[0] == "p2p":
                        buf = torch.ones(nbytes // FP32, device=self.device)
                        self.ping_pong(buf)       # warm-up
                        sweep.append((nbytes, [self.ping_pong(buf) for _ in range(calls)]))
                    elif self.rank < key[1]:
                        run, size = self.collective(key[0], nbytes, key[1])
                        run()
                        sweep.append((size, [run() for _ in range(calls)]))
                runs[key].append(sweep)
                self.barrier()
        return runs

    def besides(self) -> dict:
        """{("p2p", 2) or (collective, ranks): [[(bytes, [extra seconds per call]) per size] per
        repeat]} of ranks 0 and 1 exchanging messages, and of each collective, beside a round of
        the fixed costs' synthetic units (a micro-batch's worth of small tasks, as a step runs
        them beside its hand-offs and collectives)."""
        compute = self.round
        runs = {("p2p", 2): [], **{(op, g): [] for g in self.groups for op in COLLECTIVES}}
        calls = self.settings.beside_calls
        for _ in range(self.settings.repeats):
            for op, g in runs:
                if self.rank < g and op == "p2p":
                    runs[(op, g)].append([(nbytes, [self.exchange_beside(nbytes, compute, calls)])
                                          for nbytes, _ in self.settings.messages])
                elif self.rank < g:
                    runs[(op, g)].append([self.beside(op, nbytes, g, compute, calls)
                                          for nbytes, _ in self.settings.messages])
                self.barrier()
        return runs

    def sharing(self) -> dict:
        """{"matmul" | "memory": [(alone s, together s) per repeat]} of rank 0's calls; alone is
        the mean of a run before and one after the ranks' run together (the machine's other
        load drifts: a ratio against one side would carry the drift)."""
        ops = Operands(self.device)
        n, seconds = self.settings.sharing_shape, self.settings.sharing_seconds
        calls = {"matmul": gemm(ops, n, n, n, "nt"), "memory": memory_op(ops, "add", 1 << 22)[0]}
        tasks = self.round
        out = {key: [] for key in [*calls, "load", "tasks"]}
        for _ in range(self.settings.repeats):
            for key, call in calls.items():
                before = self._alone(call, seconds)
                together = per_call(call, self.sync, seconds)
                self.barrier()
                after = self._alone(call, seconds)
                out[key].append(((before + after) / 2 if self.rank == 0 else None, together))
            # per_call's fastest loop is the unpreempted speed; a long task is preempted as the
            # machine's load has it, which one continuous window sees. Interpreter-bound work loses
            # more to it than a GEMM does (2026-12-05, a 1-minute load of 3.2: a GEMM's window 1.26x
            # its fastest loop, the synthetic units' round 1.58x), hence a figure of each.
            out["load"].append((self._alone(calls["matmul"], seconds), self._window(calls["matmul"])))
            out["tasks"].append((self._alone(tasks, seconds), self._window(tasks)))
        out["busy"] = self.busy()
        return out

    def busy(self) -> list:
        """[(alone s, busy s) per repeat] of rank 0's round of the fixed costs' synthetic units in
        a step's order (as [sharing].tasks): alone, its unpreempted time while the others wait;
        busy, its mean over a window of rounds while every rank runs them. Ranks sharing the
        cores take time from each other, and the machine's other processes from them all;
        [sharing].matmul and .memory (fastest loops) see only the ranks' contention for cache
        and memory. No messages run beside it: a rank's collectives are priced in its compute
        stream where its ranks take every core (Platform.collectives_in_compute_stream); with
        gloo's threads busy beside the compute this figure counted them twice (two ranks of
        `small` ran their tasks as fast as one rank did, 2026-12-05, idle, where it said 1.33)."""
        call = self.round
        once = per_call(call, self.sync, self.settings.sharing_seconds) if self.rank == 0 else 0.0
        count = torch.tensor([math.ceil(self.settings.load_seconds / once) if self.rank == 0 else 0])
        self.wait(dist.broadcast(count, 0, async_op=True), "the broadcast of the busy window's length")
        pairs = []
        for _ in range(self.settings.repeats):
            alone = self._alone(call, self.settings.sharing_seconds)
            start = time.perf_counter()
            for _ in range(int(count.item())):
                call()
            self.sync()
            pairs.append((alone, (time.perf_counter() - start) / int(count.item())))
            self.barrier()
        return pairs

    def _window(self, call) -> float | None:
        """Rank 0's mean seconds per call over one continuous window while the others wait."""
        mean = None
        if self.rank == 0:
            call()
            self.sync()
            calls, start = 0, time.perf_counter()
            while time.perf_counter() - start < self.settings.load_seconds:
                call()
                calls += 1
            self.sync()
            mean = (time.perf_counter() - start) / calls
        self.barrier()
        return mean

    def _alone(self, call, seconds: float) -> float | None:
        """Rank 0's seconds per call while the other ranks wait (at a barrier, asleep)."""
        alone = per_call(call, self.sync, seconds) if self.rank == 0 else None
        self.barrier()
        return alone


def _rank_main(settings: Settings, rank: int, world: int, store_path: str, results) -> None:
    """A rank's process: join, measure, hand rank 0's figures to the parent."""
    torch.set_num_threads(settings.threads)
    keep_freed_memory()         # as a training rank runs (ratc.dist.worker)
    try:
        if settings.device == "cuda":
            torch.cuda.set_device(rank)
        timeout = datetime.timedelta(seconds=settings.timeout_s)
        store = dist.FileStore(store_path, world)
        store.set_timeout(timeout)      # a rank that never joins ends the rendezvous too
        dist.init_process_group(settings.backend, store=store, rank=rank, world_size=world, timeout=timeout)
        try:
            me = _Rank(settings, rank, world)
            payload = {"messages": me.messages(), "beside": me.besides(), "sharing": me.sharing()}
            me.barrier()
        finally:
            dist.destroy_process_group()
        results.put((rank, "ok", payload if rank == 0 else None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which ends the others
        results.put((rank, "error", str(exc) or type(exc).__name__))
        raise SystemExit(1) from None


def measure_ranks(settings: Settings, progress) -> dict:
    """Rank 0's raw samples of messages, collectives and sharing, from `settings.ranks` processes."""
    if settings.device == "cuda" and settings.ranks > torch.cuda.device_count():
        raise CalibrationError(f"--ranks {settings.ranks} with NCCL needs {settings.ranks} GPUs; "
                               f"this machine has {torch.cuda.device_count()}")
    ctx = multiprocessing.get_context("fork" if settings.device == "cpu" else "spawn")
    results = ctx.Queue()
    progress(f"{settings.ranks} ranks: messages, collectives (alone and beside compute) and sharing "
             f"({settings.backend})")
    with tempfile.TemporaryDirectory(prefix="ratc-calibrate-") as tmp:
        procs = [ctx.Process(target=_rank_main, args=(settings, r, settings.ranks, os.path.join(tmp, "store"),
                                                      results), daemon=True) for r in range(settings.ranks)]
        for p in procs:
            p.start()
        try:
            return _collect(procs, results, settings)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join()


def _collect(procs: list, results, settings: Settings) -> dict:
    """Rank 0's payload once every rank has reported; the first failure, death or overrun ends it."""
    # generous: a wait is bounded by the timeout, and there are a few hundred of them per run
    deadline = time.monotonic() + 20 * settings.timeout_s
    done, payload = set(), None
    while len(done) < len(procs):
        try:
            rank, status, got = results.get(timeout=0.1)
        except queue.Empty:
            dead = _dead(procs, done)
            if dead is not None:
                raise CalibrationError(f"{dead} before reporting; the other ranks were ended") from None
            if time.monotonic() > deadline:
                raise CalibrationError(f"the ranks did not finish within {20 * settings.timeout_s:g} s; "
                                       "they were ended") from None
            continue
        if status == "error":
            # a rank that died makes its peers fail at once: name it as the cause
            time.sleep(0.2)
            dead = _dead(procs, done | {rank})
            cause = f"{dead}, and then rank {rank} failed" if dead is not None else f"rank {rank} failed"
            raise CalibrationError(f"{cause}: {got}; the other ranks were ended")
        done.add(rank)
        payload = got if rank == 0 else payload
    return payload


def _dead(procs: list, reported: set) -> str | None:
    """'rank R exited with status S' for the first rank that exited with an error without a
    report (a rank that exits 0 has put its report first: the queue delivers it), or None."""
    dead = [r for r, p in enumerate(procs) if r not in reported and p.exitcode not in (None, 0)]
    return f"rank {dead[0]} exited with status {procs[dead[0]].exitcode}" if dead else None

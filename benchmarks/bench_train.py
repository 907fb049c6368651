"""Functional-executor speed: one training step of the tiny LLaMA across P=4 stages x D=2 replicas.

    python benchmarks/bench_train.py [--runs 10] [--threads 1] [--zero 2] [--act-policy fsr]

Target: one step <= 1 s. Reports the median (and min/max) wall time of a step over --runs
steps after one warm-up step, its median CPU time (what the step costs on a machine shared
with other work), the number of tasks executed per step, and where the time
goes per life op (handlers timed individually in a separate profiled step).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ACTS = {"fsr": "fsr", "checkpoint": "ckpt", "full-save": "full"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="examples/llama.py")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--pp", type=int, default=4)
    p.add_argument("--dp", type=int, default=2)
    p.add_argument("--zero", type=int, default=2)
    p.add_argument("--act-policy", default="fsr", choices=tuple(ACTS))
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--micro-batch-size", type=int, default=2)
    a = p.parse_args()

    import torch
    torch.set_num_threads(a.threads)
    from ratc.vm.functional.session import Session, TrainConfig

    s = Session(TrainConfig(model=a.model, P=a.pp, D=a.dp, Z=a.zero, act=ACTS[a.act_policy],
                            M=a.micro_batches, b=a.micro_batch_size, reference=False))
    ex = s.executor
    s.step(0)
    times, cpu = [], []
    for i in range(1, a.runs + 1):
        t, c = time.perf_counter(), time.process_time()
        s.step(i)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)

    per_op, count = defaultdict(float), defaultdict(int)
    for name, fn in list(ex.handlers.items()):
        def timed(p_, op, ins, fn=fn, name=name):
            t = time.perf_counter()
            try:
                return fn(p_, op, ins)
            finally:
                per_op[name] += time.perf_counter() - t
                count[name] += 1
        ex.handlers[name] = timed
    s.step(a.runs + 1)

    med = statistics.median(times)
    print(f"tiny LLaMA, P={a.pp} D={a.dp} Z={a.zero} {a.act_policy}, M={a.micro_batches} b={a.micro_batch_size}, "
          f"{a.threads} thread(s): {sum(count.values())} tasks per step")
    print(f"step time over {a.runs} runs: median {med * 1e3:.0f} ms (min {min(times) * 1e3:.0f}, "
          f"max {max(times) * 1e3:.0f}); CPU time median {statistics.median(cpu) * 1e3:.0f} ms; "
          f"target <= 1000 ms: {'met' if med <= 1.0 else 'MISSED'}")
    total = sum(per_op.values())
    print(f"{'op':18} {'tasks':>6} {'ms':>8} {'share':>6}")
    for name in sorted(per_op, key=per_op.get, reverse=True):
        print(f"{name:18} {count[name]:6d} {per_op[name] * 1e3:8.1f} {per_op[name] / total:6.1%}")
    return 0 if med <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())

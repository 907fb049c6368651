"""Benchmark: print and parse of a 100,000-op module (target >= 50,000 ops/s each).

    python benchmarks/bench_ir.py [--ops 100000] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from ratc.ir import Module, OpaqueType, Operation, TensorType, parse_module, print_module


def build(n_ops: int) -> Module:
    """A schedule-like module: per-layer tasks with a few attributes and operand chains."""
    m = Module("bench", {"stages": 4})
    act = TensorType([1, 2048, 4096], "f16")
    tok = OpaqueType("life", "token")
    prev = []
    for i in range(n_ops):
        kind = ("fwd", "bwd", "send", "recv")[i % 4]
        op = Operation(f"bench.{kind}", prev[-2:], [act if i % 3 else tok],
                       {"layer": i % 80, "mb": (i // 80) % 64, "stage": i % 4, "name": f"t{i % 97}",
                        "cost": 1.5e-3 * (i % 7)})
        m.body.append(op)
        prev.append(op.result)
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    module = build(args.ops)
    print_times, parse_times = [], []
    for _ in range(args.runs):
        t = time.perf_counter()
        text = print_module(module)
        print_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        again = parse_module(text, "<bench>")
        parse_times.append(time.perf_counter() - t)
        assert len(again.body.ops) == args.ops
    p, q = statistics.median(print_times), statistics.median(parse_times)
    print(f"ops={args.ops} runs={args.runs} text={len(text) / 1e6:.1f} MB")
    print(f"print: median {p:.3f} s = {args.ops / p:,.0f} ops/s")
    print(f"parse: median {q:.3f} s = {args.ops / q:,.0f} ops/s")


if __name__ == "__main__":
    main()

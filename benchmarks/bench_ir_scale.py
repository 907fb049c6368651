"""Benchmark: IR print and parse time and memory as the layer count grows (target: <= 5x per 4x).

    python benchmarks/bench_ir_scale.py [--layers 1000 4000 16000] [--runs 3] [--hand-laid-out]

Each layer is built as a life schedule's layer is: the same value names (%x, %w, %dx,
...) in every layer, and one region per layer, so the printer must rename every value it
prints. Peak memory per input byte is measured with tracemalloc over the parse alone.
--hand-laid-out adds a comment after the first line, which sends the text through the
general (whole-text Lark) parser instead of the per-line memoized one.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

from ratc.ir import Block, Module, OpaqueType, Operation, TensorType, parse_module, print_module

# The value names one layer of a life schedule repeats (see tests/golden/life).
_LAYER_NAMES = ("w", "x", "saved", "view", "x", "dx", "acc", "bucket", "bfree", "opt")


def build_layers(layers: int) -> Module:
    """A module of `layers` life-like layers: one `bench.layer` op with a region each."""
    m = Module("scale", {"layers": layers})
    act = TensorType([1, 2048, 4096], "f16")
    tok = OpaqueType("life", "token")
    prev = None
    for i in range(layers):
        layer = Operation("bench.layer", [prev] if prev is not None else [], [tok],
                          {"index": i, "name": f"layers.{i}"}, result_names=["done"],
                          region=Block())
        body = []
        for j, hint in enumerate(_LAYER_NAMES):
            operands = body[-2:] if j % 3 else ([prev] if prev is not None else [])
            op = Operation(f"bench.t{j}", operands, [act if j % 2 else tok],
                           {"layer": i, "mb": j, "cost": 1.5e-3 * j}, result_names=[hint])
            body.append(op.result)
            layer.region.append(op)
        m.body.append(layer)
        prev = layer.result
    return m


def measure(layers: int, runs: int, general: bool = False) -> dict:
    """Median print and parse seconds, text size and parse peak bytes per input byte."""
    module = build_layers(layers)
    print_times, parse_times = [], []
    text = ""
    for _ in range(runs):
        t = time.perf_counter()
        text = print_module(module)
        print_times.append(time.perf_counter() - t)
        if general:
            text = text.replace("\n", " // laid out by hand\n", 1)
        t = time.perf_counter()
        parse_module(text, "<bench>")
        parse_times.append(time.perf_counter() - t)
    tracemalloc.start()
    again = parse_module(text, "<bench>")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(again.body.ops) == layers
    size = len(text.encode())
    return {"layers": layers, "bytes": size, "print": statistics.median(print_times),
            "parse": statistics.median(parse_times), "peak_per_byte": peak / size}


def table(rows: list[dict]) -> str:
    """The markdown table: times, the ratio to the previous size, memory per input byte."""
    out = ["| layers | IR size | print s | x prev | parse s | x prev | parse peak B/B |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    prev = None
    for r in rows:
        pr = f"{r['print'] / prev['print']:.2f}" if prev else "-"
        qr = f"{r['parse'] / prev['parse']:.2f}" if prev else "-"
        out.append(f"| {r['layers']:,} | {r['bytes'] / 1e6:.1f} MB | {r['print']:.3f} | {pr} | "
                   f"{r['parse']:.3f} | {qr} | {r['peak_per_byte']:.0f} |")
        prev = r
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[1000, 4000, 16000])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hand-laid-out", action="store_true", help="parse through the general path")
    args = ap.parse_args()
    print(table([measure(n, args.runs, args.hand_laid_out) for n in args.layers]))


if __name__ == "__main__":
    main()

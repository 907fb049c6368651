"""One rank's operators: the GEMM grid, memory-bound operators, and the fixed costs of an
operator and of a pair of compute tasks, in fp32 as `ratc launch` runs them."""

from __future__ import annotations

import torch

from ratc.calibrate.settings import Settings
from ratc.calibrate.stats import figure, per_call

FP32 = 4
ROW = 1024      # softmax rows: the attention scores' last dimension at a small model's length


def synchronizer(device: torch.device):
    """What waits for the device's queued work (a GPU runs operators asynchronously)."""
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


class Operands:
    """Tensors by shape, made once and reused across the grid (deterministic values)."""

    def __init__(self, device: torch.device):
        self.device, self.made = device, {}

    def __call__(self, *shape: int) -> torch.Tensor:
        if shape not in self.made:
            gen = torch.Generator().manual_seed(len(self.made))
            self.made[shape] = torch.randn(*shape, generator=gen).to(self.device)
        return self.made[shape]


def gemm(ops: Operands, m: int, n: int, k: int, layout: str):
    """A call that runs the (m, n, k) GEMM with its operands in `layout`."""
    out = torch.empty(m, n, device=ops.device)
    if layout == "nt":          # forward: y = x @ w.T (torch.nn.functional.linear)
        a, b = ops(m, k), ops(n, k).t()
    elif layout == "nn":        # input gradient: dx = dy @ w
        a, b = ops(m, k), ops(k, n)
    else:                       # weight gradient: dw = dy.T @ x
        a, b = ops(k, m).t(), ops(k, n)
    return lambda: torch.mm(a, b, out=out)


def memory_op(ops: Operands, op: str, elements: int):
    """(a call of the memory-bound operator over `elements` values, bytes it reads and writes)."""
    pair, out = ops(2, elements), torch.empty(elements, device=ops.device)
    x, y = pair[0], pair[1]
    if op == "add":
        return (lambda: torch.add(x, y, out=out)), 3 * FP32 * elements
    if op == "copy":
        return (lambda: out.copy_(x)), 2 * FP32 * elements
    if op == "softmax":
        rows, rows_out = x.view(-1, ROW), out.view(-1, ROW)
        return (lambda: torch.softmax(rows, -1, out=rows_out)), 2 * FP32 * elements
    return (lambda: torch.ops.aten.silu.out(x, out=out)), 2 * FP32 * elements


CHAIN = 17      # nodes of the longer traced graph whose extra time per node is `dispatch`


class _Chain(torch.nn.Module):
    """`nodes` multiplications by a parameter in a chain: a traced graph of that many operators."""

    def __init__(self, nodes: int):
        super().__init__()
        self.nodes = nodes
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        for _ in range(self.nodes):
            x = x * self.w
        return x


def unit_call(device: torch.device, nodes: int):
    """A call that runs a unit of a `nodes`-operator fx graph as the executor runs one: the
    graph through functional_call with a view of a flat parameter vector, on a leaf input under
    autograd, then torch.autograd.grad for the input and the parameter, the gradient flattened."""
    graph = torch.fx.symbolic_trace(_Chain(nodes))
    flat, x, seed = (torch.ones(1, device=device) for _ in range(3))

    def run():
        leaf = x.detach().requires_grad_(True)
        w = flat.detach()[:1].requires_grad_(True)
        with torch.enable_grad():
            out = torch.func.functional_call(graph, {"w": w}, (leaf,))
        grads = torch.autograd.grad([out], [leaf, w], [seed])
        return torch.cat([grads[1].reshape(-1)])
    return run


def per_node(one: list, chain: list) -> list:
    """Per repeat, the extra seconds of each further node of the chain: an operator's fixed
    cost forward and backward in a traced graph (floored at 1 ns: a noisy repeat of a figure
    that must be positive)."""
    return [max((c - o) / (CHAIN - 1), 1e-9) for o, c in zip(one, chain)]


def run_repeats(calls: dict, settings: Settings, sync, progress) -> dict:
    """{key: [seconds per call, one per repeat]}: every call once per repeat, the repeats
    outermost, so that each figure's runs spread over the whole measurement and its spread
    shows the machine's load changing, not only one moment's timer noise."""
    samples = {key: [] for key in calls}
    for r in range(settings.repeats):
        progress(f"operators: run {r + 1} of {settings.repeats} ({len(calls)} benchmarks)")
        for key, call in calls.items():
            samples[key].append(per_call(call, sync, settings.min_seconds))
    return samples


def measure_compute(settings: Settings, cache_bytes: int, progress) -> dict:
    """The single-rank figures: [[matmul]] and [[memory]] rows, and [compute]'s fixed costs."""
    device = torch.device(settings.device)
    ops = Operands(device)
    dims = settings.matmul_dims
    shapes = [(m, n, k, lay) for lay in settings.layouts for m in dims for n in dims for k in dims]
    calls = {s: gemm(ops, *s) for s in shapes}
    # 256 KB tensors (an add's three fit a 1 MiB L2, or else the last level), and tensors twice
    # the last-level cache (in whole rows): the first stay in cache, the second stream from memory
    sizes = (64 * ROW, -(-2 * cache_bytes // (FP32 * ROW)) * ROW)
    moved = {}
    for op in settings.memory_ops:
        for elements in sizes:
            calls[(op, elements)], moved[(op, elements)] = memory_op(ops, op, elements)
    calls.update(task=unit_call(device, 1), chain=unit_call(device, CHAIN))
    times = run_repeats(calls, settings, synchronizer(device), progress)
    add_small, add_large = ("add", sizes[0]), ("add", sizes[1])
    return {
        "matmul": [(s, figure(s[0] * s[1] * s[2] / t for t in times[s])) for s in shapes],
        "memory": [(key[0], moved[key], figure(times[key])) for key in moved],
        "dispatch": figure(per_node(times["task"], times["chain"])),
        "task": figure(times["task"]),
        "cache_bandwidth": figure(moved[add_small] / t for t in times[add_small]),
        "memory_bandwidth": figure(moved[add_large] / t for t in times[add_large]),
    }

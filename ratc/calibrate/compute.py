"""One rank's operators: the GEMM grid, memory-bound operators, the fixed costs of a compute
task, an operator and a parameter, and the optimizer's step, in fp32 as `ratc launch` runs them."""

from __future__ import annotations

import math

import torch

from ratc.calibrate.settings import Settings
from ratc.calibrate.stats import figure, per_call
from ratc.planner.host_exec import UPDATE_TRAFFIC

FP32 = 4
ROW = 1024      # softmax rows: the attention scores' last dimension at a small model's length


def synchronizer(device: torch.device):
    """What waits for the device's queued work (a GPU runs operators asynchronously)."""
    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


class Operands:
    """Tensors by shape, made once and reused across the grid (deterministic values), each
    starting `offset` elements into its own allocation."""

    def __init__(self, device: torch.device, offset: int = 0):
        self.device, self.made, self.offset = device, {}, offset

    def __call__(self, *shape: int) -> torch.Tensor:
        if shape not in self.made:
            gen = torch.Generator().manual_seed(len(self.made))
            n = math.prod(shape)
            self.made[shape] = torch.randn(n + self.offset, generator=gen).to(self.device)[self.offset:].view(shape)
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


CHAIN = 17      # nodes of the longer traced chains whose extra time per node is a fixed cost
BLOCKS = 5      # blocks of the longer block stack (the shorter has one)


class _Chain(torch.nn.Module):
    """`nodes` multiplications by one parameter in a chain: a traced graph of that many operators."""

    def __init__(self, nodes: int):
        super().__init__()
        self.nodes = nodes
        self.w = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        for _ in range(self.nodes):
            x = x * self.w
        return x


class _Held(torch.nn.Module):
    """A submodule holding one parameter that it multiplies by (as a layer's weights are held)."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        return x * self.weight


class _Params(torch.nn.Module):
    """`_Chain` with each multiplication by its own parameter, held two modules deep (as in
    layers.N.mlp.up_proj.weight): its extra time over `_Chain` is the per-parameter work."""

    def __init__(self, nodes: int):
        super().__init__()
        self.held = torch.nn.ModuleList(torch.nn.ModuleList([_Held()]) for _ in range(nodes))

    def forward(self, x):
        for h in self.held:
            x = h[0](x)
        return x


class _Projection(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.eye(width))

    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight)


class _Block(torch.nn.Module):
    """One of each kind of operator a transformer layer's trace runs, on a few elements:
    OPERATORS of them (a root-mean-square scaling, a projection, a head split, a rotation by
    slices, a softmax, a gated activation, a residual) and PARAMETERS parameters."""

    OPERATORS, PARAMETERS = 20, 2

    def __init__(self, width: int = 4):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(width))
        self.proj = _Projection(width)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.scale      # 6 operators
        y = self.proj(h)                                                               # 1
        b, t, c = y.shape
        y = y.view(b, t, 2, c // 2).transpose(1, 2)                                    # 2
        y = torch.cat((-y[..., 1:], y[..., :1]), dim=-1) + y                           # 5
        y = torch.softmax(y, -1).transpose(1, 2).reshape(b, t, c)                      # 3
        return x + torch.nn.functional.silu(y) * y                                     # 3


class _Stack(torch.nn.Module):
    def __init__(self, blocks: int):
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block() for _ in range(blocks))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def block_stack(blocks: int) -> torch.nn.Module:
    """A stack of `blocks` blocks of a layer's kinds of operators, on a few elements."""
    return _Stack(blocks)


def synthetic_unit(module: torch.nn.Module, device: torch.device):
    """(the executor's Unit of a traced module reading `x`, its flat parameter vector)."""
    from ratc.vm.functional.units import Unit

    graph = torch.fx.symbolic_trace(module).to(device)
    named = list(graph.named_parameters())
    shapes = [p.shape for _, p in named]
    offsets = [sum(s.numel() for s in shapes[:i]) for i in range(len(shapes))]
    unit = Unit(index=0, name="synthetic", module=graph, inputs=["x"], outputs=["out"], input_grad=[True],
                param_names=[n for n, _ in named], param_shapes=shapes, numel=sum(s.numel() for s in shapes),
                offsets=offsets, trainable=[True] * len(named), inplace=False)
    return unit, torch.cat([p.detach().reshape(-1) for _, p in named])


def unit_calls(module: torch.nn.Module, shape: tuple, device: torch.device) -> tuple:
    """(a Forward, a Forward and its Backward) of the module as the executor runs a unit
    (ratc.vm.functional.executor): its Unit's views of a flat parameter vector as leaves, the
    graph through functional_call on a leaf input under autograd; then torch.autograd.grad for
    the input and the parameters, and the parameters' gradients flattened."""
    unit, flat = synthetic_unit(module, device)
    x = torch.ones(*shape, device=device)

    def forward():
        leaf = x.detach().requires_grad_(True)
        params = [v.requires_grad_(True) for v in unit.views(flat.detach())]
        with torch.enable_grad():
            return leaf, params, unit.run(params, [leaf])

    def both():
        leaf, params, outs = forward()
        grads = torch.autograd.grad(list(outs), [leaf, *params], [torch.ones_like(o) for o in outs])
        return unit.flat_grad(list(grads[1:]))
    return forward, both


def update_call(elements: int, device: torch.device) -> tuple:
    """(a call of the executor's UpdateShard on a shard of `elements`: its fp32 AdamW step
    (ratc.vm.functional.shards) on a copy of the gradient, as the handler makes one; the
    shard's UnitState; its gradient)."""
    from ratc.vm.functional.shards import AdamW, UnitState

    gen = torch.Generator().manual_seed(0)
    # random values: a constant shard runs the step's arithmetic several times slower here
    state = UnitState(torch.randn(elements, generator=gen).to(device), 0, 1, 0, AdamW(), None, ())
    grad = (1e-3 * torch.randn(elements, generator=gen)).to(device)
    return (lambda: state.step(grad.clone())), state, grad


def per_node(one: list, longer: list, nodes: int) -> list:
    """Per repeat, the extra seconds of each of `nodes` further nodes (floored at 1 ns: a noisy
    repeat of a figure that must be positive)."""
    return [max((c - o) / nodes, 1e-9) for o, c in zip(one, longer)]


def backward_part(forward: list, both: list) -> list:
    """Per repeat, a Backward's seconds: the Forward-and-Backward call's less the Forward's."""
    return [max(b - f, 1e-9) for f, b in zip(forward, both)]


def run_repeats(calls: dict, settings: Settings, sync, progress, renew=None) -> dict:
    """{key: [seconds per call, one per repeat]}: every call once unrecorded (a cold first
    measurement: lazy initialisation, caches, a clock still rising), then once per repeat, the
    repeats outermost, so that each figure's runs spread over the whole measurement and its
    spread shows the machine's load changing, not only one moment's timer noise. `renew(r)`,
    if given, remakes some calls before repeat r on operands placed otherwise: where a GEMM's
    operands lie moves its rate by a percent or two, more than a run's fastest loop varies,
    and two calibrations' operands lie apart; so a figure's runs sample it too."""
    for call in calls.values():
        per_call(call, sync, settings.min_seconds)
    samples = {key: [] for key in calls}
    for r in range(settings.repeats):
        progress(f"operators: run {r + 1} of {settings.repeats} ({len(calls)} benchmarks)")
        if renew is not None and r:
            calls.update(renew(r))
        for key, call in calls.items():
            samples[key].append(per_call(call, sync, settings.min_seconds))
    return samples


def fixed_cost_calls(device: torch.device) -> dict:
    """The synthetic units whose Forwards and Backwards give the fixed costs, as two calls each."""
    units = {"task": (_Chain(1), (1,)), "chain": (_Chain(CHAIN), (1,)), "params": (_Params(CHAIN), (1,)),
             "block": (_Stack(1), (1, 2, 4)), "blocks": (_Stack(BLOCKS), (1, 2, 4))}
    calls = {}
    for key, (module, shape) in units.items():
        calls[(key, "forward")], calls[(key, "both")] = unit_calls(module, shape, device)
    return calls


def fixed_costs(times: dict) -> dict:
    """[compute]'s fixed costs from the synthetic units' samples: a one-operator unit's tasks;
    per further parameter (held by its own submodule) the chain of them over the chain of one;
    per further operator the block stack's extra blocks, less their parameters' work."""
    def split(key):
        return times[(key, "forward")], backward_part(times[(key, "forward")], times[(key, "both")])
    task, chain, params, block, blocks = (split(k) for k in ("task", "chain", "params", "block", "blocks"))
    out = {"task_forward": figure(task[0]), "task_backward": figure(task[1])}
    for i, way in enumerate(("forward", "backward")):
        per_param = per_node(chain[i], params[i], CHAIN - 1)
        per_block = per_node(block[i], blocks[i], BLOCKS - 1)
        out[f"operator_{way}"] = figure(max((b - _Block.PARAMETERS * p) / _Block.OPERATORS, 1e-9)
                                        for b, p in zip(per_block, per_param))
        out[f"parameter_{way}"] = figure(per_param)
    return out


def measure_compute(settings: Settings, cache_bytes: int, progress) -> dict:
    """The single-rank figures: [[matmul]] and [[memory]] rows, and [compute]'s fixed costs."""
    device = torch.device(settings.device)
    ops = Operands(device)
    dims = settings.matmul_dims
    shapes = [(m, n, k, lay) for lay in settings.layouts for m in dims for n in dims for k in dims]

    def gemms(r: int = 0) -> dict:
        # run r's operands start r cache lines (16 fp32) into their allocations
        fresh = Operands(device, 16 * r)
        return {s: gemm(fresh, *s) for s in shapes}
    calls = gemms()
    # 256 KB tensors (an add's three fit a 1 MiB L2, or else the last level), and tensors twice
    # the last-level cache (in whole rows): the first stay in cache, the second stream from memory
    sizes = (64 * ROW, -(-2 * cache_bytes // (FP32 * ROW)) * ROW)
    moved = {}
    for op in settings.memory_ops:
        for elements in sizes:
            calls[(op, elements)], moved[(op, elements)] = memory_op(ops, op, elements)
    # the update of a shard whose AdamW state (master, gradient and its copy, two moments: 20 B
    # an element) is twice the last-level cache: in a training step a unit's optimizer state
    # is not touched between its updates, so it streams from memory however small (a shard
    # updated again and again, as a loop of calls would, stays in cache and runs 2-3x faster)
    elements = -(-2 * cache_bytes // (5 * FP32))
    calls[("update", elements)], moved[("update", elements)] = update_call(elements, device)[0], \
        UPDATE_TRAFFIC * elements
    calls.update(fixed_cost_calls(device))
    times = run_repeats(calls, settings, synchronizer(device), progress, renew=gemms)
    add_small, add_large = ("add", sizes[0]), ("add", sizes[1])
    return {
        "matmul": [(s, figure(s[0] * s[1] * s[2] / t for t in times[s])) for s in shapes],
        "memory": [(key[0], moved[key], figure(times[key])) for key in moved],
        **fixed_costs(times),
        "cache_bandwidth": figure(moved[add_small] / t for t in times[add_small]),
        "memory_bandwidth": figure(moved[add_large] / t for t in times[add_large]),
    }

"""One rank's operators: the GEMM grid, memory-bound operators, the fixed costs of a compute
task, an operator and a parameter, the executor's loop between tasks, and the optimizer's
step, in fp32 as `ratc launch` runs them."""

from __future__ import annotations

import itertools
import math
import multiprocessing
import time

import torch

from ratc.calibrate import machine
from ratc.calibrate.loop import SIZES as LOOP_SIZES
from ratc.calibrate.loop import loop_executor, loop_figures, loop_repeat
from ratc.calibrate.settings import Settings
from ratc.calibrate.stats import CalibrationError, figure, per_call
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


class Rotation:
    """Operands that run cold: for each shape, separately allocated copies spanning several
    private caches, a new one each call. In a training step a GEMM's weight (its saved input,
    in a weight gradient) was last touched a unit's work or more ago and comes from beyond the
    core's private cache, through TLB misses on its own pages: under torch.profiler a `ratc
    train` step of `tiny` ran its GEMMs at 1.15-1.2x the time of a loop of calls on one
    operand (2026-12-05), and copies spanning 8 MiB (COLD x this machine's 1 MiB L2) give
    1.16x; spanning 16 MiB or more, 1.3-1.4x (memory). Copies cut from one large pool run
    nearly as fast as one operand (its huge pages, and the prefetcher streaming on from one
    copy into the next), hence separate allocations."""

    def __init__(self, device: torch.device, span: int):
        self.device, self.span, self.made = device, span, {}

    def copies(self, *shape: int) -> list:
        """At least two tensors of `shape`, together at least `span` bytes (deterministic values)."""
        if shape not in self.made:
            gen = torch.Generator().manual_seed(len(self.made))
            count = max(2, -(-self.span // (FP32 * math.prod(shape))))
            self.made[shape] = [torch.randn(shape, generator=gen).to(self.device) for _ in range(count)]
        return self.made[shape]


def gemm(ops: Operands, m: int, n: int, k: int, layout: str, cold: Rotation | None = None):
    """A call that runs the (m, n, k) GEMM with its operands in `layout`; with `cold`, its
    second operand (the weight forward and in the input gradient, the saved input in the
    weight gradient) is the rotation's next copy each call."""
    out = torch.empty(m, n, device=ops.device)
    second = (n, k) if layout == "nt" else (k, n)
    seconds = cold.copies(*second) if cold is not None else [ops(*second)]
    if layout == "nt":          # forward: y = x @ w.T (torch.nn.functional.linear)
        a, bs = ops(m, k), [w.t() for w in seconds]
    elif layout == "nn":        # input gradient: dx = dy @ w
        a, bs = ops(m, k), seconds
    else:                       # weight gradient: dw = dy.T @ x
        a, bs = ops(k, m).t(), seconds
    turn = itertools.cycle(bs)
    return lambda: torch.mm(a, next(turn), out=out)


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
SEQUENCE_ROUNDS = 40   # rounds of the fixed costs' sequence per repeat
COLD = 8        # private caches' worth of second GEMM operands each [[matmul]] row rotates through


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


def unit_pair(module: torch.nn.Module, shape: tuple, device: torch.device) -> tuple:
    """(a Forward, the Backward of a Forward's result) of the module as the executor runs a
    unit (ratc.vm.functional.executor): its Unit's views of a flat parameter vector as
    leaves, the graph through functional_call on a leaf input under autograd; then
    torch.autograd.grad for the input and the parameters, and the parameters' gradients
    flattened."""
    unit, flat = synthetic_unit(module, device)
    x = torch.ones(*shape, device=device)

    def forward():
        leaf = x.detach().requires_grad_(True)
        params = [v.requires_grad_(True) for v in unit.views(flat.detach())]
        with torch.enable_grad():
            return leaf, params, unit.run(params, [leaf])

    def backward(state):
        leaf, params, outs = state
        grads = torch.autograd.grad(list(outs), [leaf, *params], [torch.ones_like(o) for o in outs])
        return unit.flat_grad(list(grads[1:]))
    return forward, backward


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


def run_repeats(calls: dict, settings: Settings, sync, progress, renew=None, sequence=None) -> dict:
    """{key: [seconds per call, one per repeat]}: every call once unrecorded (a cold first
    measurement: lazy initialisation, caches, a clock still rising), then once per repeat, the
    repeats outermost, so that each figure's runs spread over the whole measurement and its
    spread shows the machine's load changing, not only one moment's timer noise. `renew(r)`,
    if given, remakes some calls before repeat r on operands placed otherwise: where a GEMM's
    operands lie moves its rate by a percent or two, more than a run's fastest loop varies,
    and two calibrations' operands lie apart; so a figure's runs sample it too. `sequence()`,
    if given, runs once per repeat after the calls and adds its {key: seconds} to the samples
    (sequence_repeat: the fixed costs, whose runs must spread over the measurement too)."""
    for call in calls.values():
        per_call(call, sync, settings.min_seconds)
    samples = {key: [] for key in calls}
    for r in range(settings.repeats):
        progress(f"operators: run {r + 1} of {settings.repeats} ({len(calls)} benchmarks)")
        if renew is not None and r:
            calls.update(renew(r))
        for key, call in calls.items():
            samples[key].append(per_call(call, sync, settings.min_seconds))
        if sequence is not None:
            for key, seconds in sequence().items():
                samples.setdefault(key, []).append(seconds)
    return samples


def fixed_cost_units(device: torch.device) -> dict:
    """{key: (Forward, Backward)} of the synthetic units whose tasks give the fixed costs."""
    units = {"task": (_Chain(1), (1,)), "chain": (_Chain(CHAIN), (1,)), "params": (_Params(CHAIN), (1,)),
             "block": (_Stack(1), (1, 2, 4)), "blocks": (_Stack(BLOCKS), (1, 2, 4))}
    return {key: unit_pair(module, shape, device) for key, (module, shape) in units.items()}


def sequence_repeat(units: dict, sync, rounds: int = SEQUENCE_ROUNDS, before=None) -> dict:
    """{(key, "forward" | "backward"): seconds}, one repeat's figures: the units run as a step
    runs a micro-batch's units, every Forward in order and then every Backward in reverse, each
    call timed alone, for `rounds` rounds (each starting at another unit), a figure the
    fastest of its rounds: every round runs after other tasks, so the fastest keeps what that
    costs and leaves out the rounds the scheduler preempted, which [sharing].tasks prices
    apart (a median carried a burst of other load into the figure itself, and two calibrations
    then disagreed). A task runs after other units' tasks, not after itself: in a `ratc train`
    step of `tiny` (2026-12-05) a unit's Forward run twice in a row took 0.105 ms (the
    embedding) to 0.86 ms (a layer) the second time and 0.30 to 1.06 ms the first, when the
    tasks before it had taken the caches, and a loop of calls of one task finds them warm (a
    one-operator unit's Forward 24 us in a loop, 50 us in a sequence, on an idle machine).
    `before()`, if given, runs untimed before every call (an eviction: the [[cold]] rows)."""
    keys = list(units)
    times = {(key, way): [] for key in keys for way in ("forward", "backward")}
    before = before or (lambda: None)
    for r in range(rounds):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        states = {}
        for key in order:
            before()
            start = time.perf_counter()
            states[key] = units[key][0]()
            sync()
            times[(key, "forward")].append(time.perf_counter() - start)
        for key in reversed(order):
            before()
            start = time.perf_counter()
            units[key][1](states.pop(key))
            sync()
            times[(key, "backward")].append(time.perf_counter() - start)
    return {k: min(seconds) for k, seconds in times.items()}


def cold_sequences(units: dict, sync, evictions: tuple, rounds: int) -> dict:
    """{("cold", evicted bytes, key, way): seconds}: sequence_repeat again for each size, every
    call after a read of that many bytes of a CPU buffer (the caches a step's other tasks take: its
    weights, gradients and activations pass through them between two runs of one unit's task;
    on an idle 2-core EPYC a one-operator Forward took 47 us warm, 55 after 2 MiB, 70 after 16,
    132 after 32, the last level's size, 152 after 64 and 312 after 128, 2026-12-05)."""
    sweep = torch.ones(max(evictions) // FP32)
    out = {}
    for nbytes in evictions:
        part = sweep[:nbytes // FP32]
        out.update({("cold", nbytes, *k): v for k, v in
                    sequence_repeat(units, sync, rounds, lambda part=part: part.sum()).items()})
    return out


def _child_main(fn, send) -> None:
    try:
        torch.set_num_threads(1)
        send.send(("ok", fn()))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        send.send(("error", str(exc) or type(exc).__name__))


def forked(fn, timeout_s: float, what: str):
    """fn()'s (picklable) result, run in a child process forked from this one with one thread,
    as torch's DataLoader runs its forked workers (the parent's OpenMP pool does not survive a
    fork; one thread never enters it)."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child_main, args=(fn, send), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(timeout_s):
            raise CalibrationError(f"{what}: the child process {child.pid} sent nothing within {timeout_s:g} s")
        try:
            status, result = receive.recv()
        except EOFError:
            raise CalibrationError(f"{what}: the child process {child.pid} died "
                                   f"(exit code {child.join(timeout_s) or child.exitcode})") from None
    finally:
        if child.is_alive():
            child.join(timeout_s)
        if child.is_alive():
            child.kill()
            child.join()
        receive.close()
    if status != "ok":
        raise CalibrationError(f"{what}: {result}")
    return result


def step_round(units: dict):
    """A call running the units as a step's micro-batch does: every Forward in order, then every
    Backward in reverse (untimed: sequence_repeat times them call by call)."""
    def call():
        states = [(backward, forward()) for forward, backward in units.values()]
        for backward, state in reversed(states):
            backward(state)
    return call


def fixed_costs(times: dict) -> dict:
    """[compute]'s fixed costs from the synthetic units' samples (sequence_repeat): a one-operator
    unit's tasks; per further parameter (held by its own submodule) the chain of them over the
    chain of one; per further operator the block stack's extra blocks, less their parameters'
    work."""
    def split(key):
        return times[(key, "forward")], times[(key, "backward")]
    task, chain, params, block, blocks = (split(k) for k in ("task", "chain", "params", "block", "blocks"))
    out = {"task_forward": figure(task[0]), "task_backward": figure(task[1])}
    for i, way in enumerate(("forward", "backward")):
        per_param = per_node(chain[i], params[i], CHAIN - 1)
        per_block = per_node(block[i], blocks[i], BLOCKS - 1)
        out[f"operator_{way}"] = figure(max((b - _Block.PARAMETERS * p) / _Block.OPERATORS, 1e-9)
                                        for b, p in zip(per_block, per_param))
        out[f"parameter_{way}"] = figure(per_param)
    return out


def measure_compute(settings: Settings, cache_bytes: int, private_bytes: int, progress) -> dict:
    """The single-rank figures: [[matmul]] and [[memory]] rows, and [compute]'s fixed costs."""
    device = torch.device(settings.device)
    ops = Operands(device)
    dims = settings.matmul_dims
    shapes = [(m, n, k, lay) for lay in settings.layouts for m in dims for n in dims for k in dims]

    def gemms(r: int = 0) -> dict:
        # run r's operands start r cache lines (16 fp32) into their allocations; the second
        # operands rotate through COLD private caches' worth of copies
        fresh, cold = Operands(device, 16 * r), Rotation(device, COLD * private_bytes)
        return {s: gemm(fresh, *s, cold=cold) for s in shapes}
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
    sync = synchronizer(device)

    def sequence() -> dict:
        # each repeat in a process of its own, on synthetic units made anew: a task's fixed
        # cost moves by a few percent from one process to the next (where the interpreter's
        # and the graphs' objects lie), as a training rank's does; run back to back in one
        # process, two quick calibrations' fixed costs had spreads of 0.1-1 % and medians 2-6 %
        # apart (4 pairs in 7 disagreed on three of the six figures). A CUDA context cannot
        # be forked: on GPUs the repeats run in this process.
        def one():
            units = fixed_cost_units(device)
            return {**sequence_repeat(units, sync), **cold_sequences(units, sync, evictions, settings.cold_rounds),
                    **loop_repeat(loops)}
        return one() if device.type == "cuda" else forked(one, settings.timeout_s, "the fixed costs")
    # the executor's loop runs on the CPU whatever the device: it is the interpreter's
    progress("operators: compiling the executor-loop programs")
    loops = [loop_executor(width, seq) for width, seq in LOOP_SIZES]
    # (the CPU's caches, on a GPU machine too: a task's fixed costs are its interpreter's)
    evictions = settings.evictions(machine.private_cache(), machine.last_level_cache()[0])
    times = run_repeats(calls, settings, sync, progress, renew=gemms, sequence=sequence)
    add_small, add_large = ("add", sizes[0]), ("add", sizes[1])
    return {
        "matmul": [(s, figure(s[0] * s[1] * s[2] / t for t in times[s])) for s in shapes],
        "memory": [(key[0], moved[key], figure(times[key])) for key in moved],
        **fixed_costs(times),
        **loop_figures(times),
        "cold": [(n, fixed_costs({k[2:]: v for k, v in times.items() if k[:2] == ("cold", n)}))
                 for n in evictions],
        "cache_bandwidth": figure(moved[add_small] / t for t in times[add_small]),
        "memory_bandwidth": figure(moved[add_large] / t for t in times[add_large]),
    }

"""The executor's loop between tasks: what a step spends outside its tasks' handlers.

Between two tasks the functional executor (ratc.vm.functional.executor, one interpreter for
`ratc train` and `ratc launch`'s ranks) looks up the next op and its operands, records the
task's times, stores its results and drops the values it read last; after a Backward that
drops the micro-batch's autograd graph of the unit, whose release grows with the activations
it saved. None of it is inside a task's handler, so the synthetic units' tasks ([compute]'s
fixed costs) leave it out. It is measured here as the runtime's trace shows it: a small
synthetic model (an embedding, LAYERS decoder-shaped layers, a head and its loss) compiled
for one rank and run by the real executor, the time from each task's end to the next task's
start, at two layer sizes (SIZES) for the release's growth with the saved bytes.
"""

from __future__ import annotations

import statistics

import torch

from ratc.calibrate.stats import figure

LAYERS = 4
HEADS, VOCAB = 2, 64
# (width, sequence) of the two synthetic models: their layers save 74 KB and 1.06 MB of activations
# in fp32 per sequence, sizes apart from examples/llama.py's presets' (tiny 0.65 MB, small 2.9 MB)
SIZES = ((32, 32), (160, 96))
MICRO_BATCHES = 8
STEPS = 3                   # measured steps per repeat, after one unmeasured
FORWARD_KINDS = ("life.fwd", "life.recover")


class _Norm(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))


class _Layer(torch.nn.Module):
    """A decoder layer's shape of work at a small width: two norms, seven projections each
    held by its own submodule, a rotation by slices, causal attention, a gated MLP."""

    def __init__(self, w: int):
        super().__init__()
        self.norm1, self.norm2 = _Norm(w), _Norm(w)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(w, w, bias=False) for _ in range(4))
        self.gate, self.up = torch.nn.Linear(w, 2 * w, bias=False), torch.nn.Linear(w, 2 * w, bias=False)
        self.down = torch.nn.Linear(2 * w, w, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        h = self.norm1(x)
        q, k, v = (proj(h).view(b, t, HEADS, c // HEADS).transpose(1, 2) for proj in (self.q, self.k, self.v))
        q, k = (y + torch.cat((-y[..., c // HEADS // 2:], y[..., :c // HEADS // 2]), dim=-1) for y in (q, k))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, c))
        h = self.norm2(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class LoopModel(torch.nn.Module):
    """forward(input_ids, labels) -> loss, with LAYERS decoder-shaped layers of `width`."""

    def __init__(self, width: int):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, width)
        self.layers = torch.nn.ModuleList(_Layer(width) for _ in range(LAYERS))
        self.head = torch.nn.Linear(width, VOCAB, bias=False)

    def forward(self, input_ids, labels):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return torch.nn.functional.cross_entropy(self.head(x).flatten(0, 1), labels.flatten())


def loop_executor(width: int, seq: int) -> tuple:
    """(the functional executor of LoopModel's one-rank program, a call giving step i's batch,
    the fp32 bytes a layer's Backward releases: what its Forward saved, as the planner counts it)."""
    from ratc.frontend.trace import trace_model
    from ratc.lifecycle.compile import CompileOptions, compile_program
    from ratc.planner.host_exec import host_bytes
    from ratc.planner.opcost import elem_bytes, saved_by
    from ratc.platform import load_platform
    from ratc.step.config import Candidate
    from ratc.vm.functional.executor import FunctionalExecutor
    from ratc.vm.functional.units import flat_params, split_model

    torch.manual_seed(0)
    model = LoopModel(width)
    profile = trace_model(model, seq, name="executor-loop")
    eb = elem_bytes(profile.dtype)
    saved = host_bytes(sum(saved_by(op, eb, "paper") for op in profile.layers[0].ops), eb)
    cand = Candidate(P=1, D=1, T=1, Z=0, b=1, A=MICRO_BATCHES, act="full", pref="deadline")
    # (the platform only places the program's state tasks; no figure of it is read here)
    program = compile_program(profile, cand, load_platform("mt3000"), CompileOptions(memory_limit=False))
    units = split_model(model)
    executor = FunctionalExecutor(program, units, [flat_params(u, model) for u in units.units])
    tokens = torch.randint(0, VOCAB, (MICRO_BATCHES, seq), generator=torch.Generator().manual_seed(0))
    return executor, lambda i: {"input_ids": tokens.roll(i, 0), "labels": tokens.roll(i, 0)}, saved


def gaps_after(tasks: list, layers: range) -> dict:
    """{"forward": [...], "backward": [...]}: seconds from each Forward's or Recover's end, and
    each Backward's of a unit in `layers`, to the next task's start, of one step's (op name,
    unit, start ns, end ns) records in program order."""
    out: dict = {"forward": [], "backward": []}
    for (name, unit, _, end), (_, _, start, _) in zip(tasks, tasks[1:]):
        if name in FORWARD_KINDS:
            out["forward"].append((start - end) / 1e9)
        elif name == "life.bwd" and unit in layers:
            out["backward"].append((start - end) / 1e9)
    return out


def measure_loop(executor, batch, steps: int = STEPS) -> dict:
    """{"forward" | "backward": seconds}: the median gap after a Forward (or Recover), and after a
    decoder layer's Backward, over `steps` steps after an unmeasured one, each task's times
    recorded as the runtime records them (an on_task callback appending to a list)."""
    tasks: list = []
    executor.on_task = lambda p, op, start, end: tasks.append((op.name, op.attributes.get("unit"), start, end))
    executor.step(batch(0))
    gaps: dict = {"forward": [], "backward": []}
    layers = range(1, len(executor.units.units) - 1)
    try:
        for i in range(1, steps + 1):
            tasks.clear()
            executor.step(batch(i))
            for way, seconds in gaps_after(tasks, layers).items():
                gaps[way].extend(seconds)
    finally:
        executor.on_task = None
    return {way: statistics.median(seconds) for way, seconds in gaps.items()}


def loop_repeat(executors: list) -> dict:
    """One repeat: {("loop", saved bytes, "forward" | "backward"): seconds} of each (executor,
    batch, saved bytes)."""
    return {("loop", saved, way): seconds for executor, batch, saved in executors
            for way, seconds in measure_loop(executor, batch).items()}


def loop_figures(times: dict) -> dict:
    """[compute]'s loop_forward, loop_backward and release_bandwidth from the repeats' samples
    (loop_repeat): the gap after a Forward, the two sizes' mean; the gap after a Backward as a line in
    the bytes it releases, through the two sizes (its slope floored at nothing to release)."""
    sizes = sorted({key[1] for key in times if key[0] == "loop"})
    small, large = sizes[0], sizes[-1]
    fwd = [(a + b) / 2 for a, b in zip(times[("loop", small, "forward")], times[("loop", large, "forward")])]
    per_byte = [max((b - a) / (large - small), 1e-15)
                for a, b in zip(times[("loop", small, "backward")], times[("loop", large, "backward")])]
    base = [max(a - slope * small, 1e-9) for a, slope in zip(times[("loop", small, "backward")], per_byte)]
    return {"loop_forward": figure(fwd), "loop_backward": figure(base),
            "release_bandwidth": figure(1 / slope for slope in per_byte)}

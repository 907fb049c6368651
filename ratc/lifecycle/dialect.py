"""The life dialect: per-stage training programs whose state objects are SSA values.

    life.plan @plan {A = 4, P = 2, Z = 2, act = "fsr", ...} { life.unit {index = 1, ...} ... }
    life.pipeline @step {plan = @plan, schedule = "1f1b", ...} {
      life.stage @s0 {stage = 0, units = [0, 1, 2]} {
        %w1 = life.param {unit = 1, sizes = [...]} : !life.param
        %x1_m0 = life.fwd(%w1) ... ; %dx = life.bwd(...) ; %g1 = life.grad_sync(...) ...
        life.step_end(%v0, %v1, %v2)
      }
    }

After `codegen`, module-level `life.kernel @gemm_...` ops hold the generated kernels and
each Forward/Backward/Recover names the kernels it calls (`kernels`, `calls`) and its
duration in cycles (`cycles`).

Ops inside a stage are in issue order; each task carries its duration (`dur`, seconds), its
resource (`res`), its priority (`prio`, 0 = most urgent) and the bytes of each result
(`sizes`). A task with `inplace = true` writes its last result into its last operand's
buffer. memory-plan adds each result's lifetime tier (`tier`) and buffer slot (`buf`), and
on the op that reads a buffer last, the slots freed after it (`frees`). Op verify hooks
check that each task has exactly the dependencies its role needs (so dropping one is an
error; under ZeRO >= 2 a Backward also reads the token of the reduce that freed the
bucket buffer it reuses, two buffers per stage); the stage and pipeline hooks check ordering, completeness,
send/recv matching and that the stages cannot deadlock (ratc.lifecycle.checks).
"""

from __future__ import annotations

import math

from ratc.ir.registry import Dialect
from ratc.ir.verifier import VerifyError
from ratc.lifecycle import checks
from ratc.step.config import ACT_POLICIES, ZERO_STAGES, schedule_shape_error
from ratc.step.schedules import rank_of, virtual_stage
from ratc.step.plan import Plan
from ratc.step.rules import syncs_by_reduce_scatter
from ratc.step.unit_costs import RECOVER_WORK, UnitCosts

LIFE = Dialect("life", "training-state lifecycles: per-stage scheduled programs")
_ACT = "|".join(ACT_POLICIES)

# Attributes every task may carry: cost inputs, scheduling and memory-plan results.
_TASK = {"dur": "float", "res": "compute|ddr|link", "prio": "int", "sizes": "list<int>",
         "inplace": "bool?", "tier": "list<str>?", "buf": "list<int>?", "frees": "list<int>?"}
# `corun`: seconds a Recover co-running with this task (fsr) adds to it; `dur` and `cycles` include them.
_COSTED = {"compute": "float", "ddr": "float", "workspace": "bytes", "kernels": "list<symref>?", "calls": "list<int>?",
           "cycles": "int?", "corun": "float?"}
# `stream`: a co-running Recover that fills the memory its host Backward frees, and the
# headroom over that Backward's recovery buffer it needs (instead of a buffer of its own).
_PLACED = {"placement": "corun|bwd?", "window": "float?", "exposed": "float?", "stream": "bytes?"}
_DEADLINE = {"release": "float?", "deadline": "float?", "start": "float?", "exposed": "float?"}


def _check(op):
    return checks.check_task(op)


def _check_stage(op):
    return checks.check_stage(op)


def _check_pipeline(op):
    return checks.check_pipeline(op)


# A kernel list entry (fwd_kernels, bwd_kernels): [kind, *shape, calls per micro-batch].
# (m, n, k), (heads, seq, head_dim, kv_heads)
KERNEL_DIMS = {"gemm": 3, "attn_bwd": 4, "flash_bwd": 4, "flash_fwd": 4}


def _finite(x) -> bool:
    return 0 <= x < math.inf        # (false for NaN too)


def _check_unit(op):
    a = op.attributes
    for key in ("fwd", "bwd", "sync", "reduce", "update", "prefetch", "gather", "fwd_compute", "fwd_ddr",
                "bwd_compute", "bwd_ddr", "fwd_other", "bwd_other", "tie", "core_fwd", "core_compute", "core_ddr",
                "core_other"):
        if key in a and not _finite(a[key]):
            raise VerifyError(f"'{op.name}' attribute '{key}' must be finite and not negative, got {a[key]}", op)
    if a.get("keep") == "selective" and a.get("decoder") is True:
        missing = [k for k in RECOVER_WORK["selective"].values() if k not in a]
        if missing:
            raise VerifyError(f"'{op.name}' #{a.get('index')} keeps selectively but has no {missing[0]} "
                              "(the attention core's costs its Recover runs)", op)
    for key in ("fwd_phases", "bwd_phases", "core_phases"):
        ph = a.get(key, [])
        if len(ph) % 2 or not all(_finite(x) for x in ph):
            raise VerifyError(f"'{op.name}' attribute '{key}' must list finite, non-negative (compute, DDR) "
                              f"second pairs", op)
    for key in ("fwd_kernels", "bwd_kernels", "core_kernels", "bwd_i_kernels", "bwd_w_kernels"):
        for entry in a.get(key, []):
            kind = entry[0] if isinstance(entry, list) and entry else None
            dims = KERNEL_DIMS.get(kind) if isinstance(kind, str) else None
            if dims is None or len(entry) != dims + 2 or \
                    not all(type(x) is int and x >= 1 for x in entry[1:]):
                raise VerifyError(f"'{op.name}' attribute '{key}': each entry must be [kind, *shape, calls] with "
                                  f"kind gemm (m, n, k), attn_bwd, flash_bwd or flash_fwd (heads, seq, head_dim, "
                                  f"kv_heads) and "
                                  f"positive "
                                  f"integers, got {entry!r}", op)
    if op.block is None or op.block.parent is None or op.block.parent.name != "life.plan":
        raise VerifyError(f"'{op.name}' must be inside life.plan", op)


def _check_counts(op, keys, low: int = 1):
    for key in keys:
        if key in op.attributes and op.attributes[key] < low:
            raise VerifyError(f"'{op.name}' {key} must be at least {low}, got {op.attributes[key]}", op)


def _check_plan(op):
    _check_counts(op, ("P", "D", "T", "b", "A", "seq_len", "v"))
    _check_counts(op, ("Z",), 0)
    a = op.attributes
    if a["Z"] not in ZERO_STAGES:
        raise VerifyError(f"'{op.name}' Z must be a ZeRO stage 0-3, got {a['Z']}", op)
    if not _finite(a["p2p"]):
        raise VerifyError(f"'{op.name}' p2p must be finite and not negative, got {a['p2p']}", op)
    # What lowering reads across units: embedding, decoder layers, head in order, on virtual
    # stages 0..P*v-1 in order (each holding one; virtual stage chunk * P + stage, v = 1
    # unless interleaved), each layer's GradSync the collective its ZeRO stage uses.
    units = [u for u in op.region.ops if u.name == "life.unit"] if op.region is not None else []
    if len(units) < 3:
        raise VerifyError(f"'{op.name}' needs at least three units (embedding, a decoder layer, head), "
                          f"got {len(units)}", op)
    sync = "reduce-scatter" if syncs_by_reduce_scatter(a["Z"]) else "all-reduce"
    last = len(units) - 1
    P, v, sched = a["P"], a.get("v", 1), a.get("sched", "1f1b")
    vs = None               # the previous unit's virtual stage
    for pos, u in enumerate(units):
        ua = u.attributes
        if ua.get("index") != pos:
            raise VerifyError(f"life.unit #{pos} has index {ua.get('index')}; units are numbered 0..{last} "
                              "in order", u)
        if type(ua.get("decoder")) is bool and ua["decoder"] != (0 < pos < last):
            raise VerifyError(f"life.unit #{pos}: decoder must be {str(not ua['decoder']).lower()} "
                              f"(unit 0 is the embedding, unit {last} the head, the others decoder layers)", u)
        if ua.get("sync_kind") not in (None, sync):
            raise VerifyError(f"life.unit #{pos}: sync_kind must be '{sync}' under ZeRO-{a['Z']}, "
                              f"got '{ua['sync_kind']}'", u)
        s, chunk = ua.get("stage"), ua.get("chunk", 0)
        if type(s) is not int or type(chunk) is not int:
            continue        # (the attribute check reports it)
        if ("chunk" in ua) != (v > 1) or not 0 <= chunk < v:
            raise VerifyError(f"life.unit #{pos}: chunk {ua.get('chunk')}: with v = {v} virtual stages per rank "
                              f"{'every unit names its chunk 0..' + str(v - 1) if v > 1 else 'units have no chunk'}",
                              u)
        allowed = (0,) if vs is None else (vs, vs + 1)
        if s >= P or virtual_stage(chunk, s, P, sched) not in allowed:
            here = " or ".join(f"stage {rank_of(x, P, sched)} chunk {x // P}" for x in allowed) if v > 1 else \
                f"stage {' or '.join(map(str, allowed))}"
            raise VerifyError(f"life.unit #{pos} is on stage {s}{f' chunk {chunk}' if v > 1 else ''}: units go on "
                              f"{'virtual ' if v > 1 else ''}stages 0..{P * v - 1} in order, every "
                              f"{'one' if v > 1 else 'stage'} holding at least one (so here {here})", u)
        vs = virtual_stage(chunk, s, P, sched)
    _check_schedule(op)
    if vs is not None and vs != P * v - 1:
        raise VerifyError(f"'{op.name}': P = {P}{f', v = {v}' if v > 1 else ''}, but its units are on "
                          f"{'virtual ' if v > 1 else ''}stages 0..{vs} only", op)
    _check_ties(op, units)


def _check_schedule(op) -> None:
    """A zero-bubble schedule interleaves v >= 2 chunks per rank (zbv: exactly 2)."""
    a = op.attributes
    sched = a.get("sched", "1f1b")
    if sched == "1f1b":
        return
    why = schedule_shape_error(sched, a.get("v", 1))
    if why:
        raise VerifyError(f"'{op.name}': {why}", op)


def _check_ties(op, units) -> None:
    """`ties`: groups of two or more trained units sharing a parameter, each unit in one group,
    each group on one stage or on distinct stages (one copy each: one tie collective a stage);
    exactly the units with a tied gradient (`tied`) are in one."""
    groups = op.attributes.get("ties", [])
    seen: set = set()
    for g in groups:
        if not isinstance(g, list) or len(g) < 2 or not all(type(i) is int and 0 <= i < len(units) for i in g) \
                or g != sorted(set(g)) or seen & set(g):
            raise VerifyError(f"'{op.name}' ties: each group must list two or more units in increasing order, "
                              f"each unit in one group only, got {g!r}", op)
        seen |= set(g)
        stages = [units[i].attributes.get("stage") for i in g]
        if len(set(stages)) not in (1, len(g)):
            raise VerifyError(f"'{op.name}' tie group {g} is on stages {stages}: its units must share one stage "
                              "or each have its own", op)
    for u in units:
        tied = "tied" in u.attributes
        if tied != (u.attributes.get("index") in seen) or (tied and u.attributes.get("frozen", False)):
            raise VerifyError(f"life.unit #{u.attributes.get('index')}: a unit has 'tied' exactly when it is trained "
                              "and in one of the plan's tie groups", u)


def _check_pipeline_counts(op):
    a = op.attributes
    stages = len(op.region.ops) if op.region is not None else 0
    for key in ("peak", "peak_at"):
        if key in a and len(a[key]) != stages:
            raise VerifyError(f"'{op.name}' {key} needs one entry per stage ({stages}), got {len(a[key])}", op)
    if a.get("fsr") and a["act"] != "fsr":
        raise VerifyError(f"'{op.name}' fsr = true needs act = \"fsr\", got \"{a['act']}\"", op)
    _check_pipeline(op)


LIFE.op("plan", "a training configuration and its per-unit costs: the lowering's input",
        symbol=True, region=True, verify=_check_plan, attrs={
            "model": "str", "platform": "str", **Plan.spec(), "seq_len": "int", "p2p": "float", "ties": "list?"})
LIFE.op("unit", "one layer (embedding, decoder layer or head) with its costs per micro-batch",
        verify=_check_unit, attrs=UnitCosts.spec())
def _check_kernel(op):
    a = op.attributes
    if a["cycles"] < 0 or a["ddr_bytes"] < 0 or not 0 <= a["mac_util"] <= 1:
        raise VerifyError(f"'{op.name}' @{op.sym_name}: cycles and ddr_bytes must not be negative and mac_util "
                          "be in 0..1", op)
    if len(a["shape"]) != KERNEL_DIMS[a["kind"]] or any(x < 1 for x in a["shape"]):
        raise VerifyError(f"'{op.name}' @{op.sym_name}: kind {a['kind']} takes a shape of "
                          f"{KERNEL_DIMS[a['kind']]} positive integers, got {a['shape']}", op)


LIFE.op("kernel", "a generated kernel that tasks call (codegen pass); its code is kernels/<symbol>.rasm",
        symbol=True, verify=_check_kernel, attrs={"kind": "gemm|attn_bwd|flash_bwd|flash_fwd", "shape": "list<int>", "cycles": "int", "mac_util": "float",
                            "ddr_bytes": "int", "tiles": "dict"})
LIFE.op("pipeline", "one training step of all pipeline stages", symbol=True, region=True,
        verify=_check_pipeline_counts, attrs={
            "plan": "symref", "act": _ACT,
            "schedule": "gpipe|1f1b|interleaved-1f1b|zb1p|zbv", "state": "bulk|layerwise?", "update": "bulk|eager|deadline?",
            "fsr": "bool?", "peak": "list<int>?", "peak_at": "list<int>?"})
LIFE.op("stage", "the ordered program of one pipeline stage", symbol=True, region=True,
        verify=_check_stage, attrs={
            "stage": "int", "units": "list<int>", "peak": "bytes?", "peak_at": "int?",
            "tiers": "dict?", "buffers": "int?"})

# Long-lived state defined at the step start.
LIFE.op("param", "a layer's parameters held by this rank (ZeRO-3: its shard)", results=["w:!life.param"],
        attrs={"unit": "int", **_TASK}, verify=_check)
LIFE.op("opt", "a layer's optimizer-state shard (fp32 master, Adam moments)", results=["s:!life.opt"],
        attrs={"unit": "int", **_TASK}, verify=_check)

# The main path. Interleaved (v > 1), a transfer names its boundary: the first unit of the
# later virtual stage.
_BOUNDARY = {"unit": "int?"}
LIFE.op("recv", "receive a boundary activation (fwd) or its gradient (bwd) from a peer stage",
        results=["x:!life.act"], verify=_check,
        attrs={"mb": "int", "dir": "fwd|bwd", "peer": "int", **_BOUNDARY, **_TASK})
LIFE.op("send", "send a boundary activation (fwd) or its gradient (bwd) to a peer stage",
        operands=["x:!life.act"], results=["t:!life.token"], verify=_check,
        attrs={"mb": "int", "dir": "fwd|bwd", "peer": "int", **_BOUNDARY, **_TASK})
LIFE.op("gather", "ZeRO-3: all-gather a layer's parameter view for one use",
        operands=["w:!life.param"], results=["v:!life.view"], verify=_check,
        attrs={"unit": "int", "mb": "int", "phase": "fwd|rec|bwd", **_TASK})
LIFE.op("fwd", "Forward(l, m): activation out, and saved activations under full-save",
        operands=["args*"], results=["outs*"], verify=_check,
        attrs={"unit": "int", "mb": "int", **_TASK, **_COSTED})
LIFE.op("recover", "Recover(l, m): recompute a layer's saved activations from its checkpoint and "
                   "parameters, or (keep = selective) its attention core's from what its Forward saved",
        operands=["args*"], results=["r:!life.rec"], verify=_check,
        attrs={"unit": "int", "mb": "int", **_TASK, **_COSTED, **_PLACED})
LIFE.op("bwd", "Backward(l, m): input gradient out, and the layer's gradient accumulated",
        operands=["args*"], results=["outs*"], verify=_check,
        attrs={"unit": "int", "mb": "int", **_TASK, **_COSTED})
# Zero-bubble schedules (plan sched = "zb1p") split each Backward in two tasks.
LIFE.op("bwd_i", "I(l, m): a Backward's input-gradient part -- the gradient the previous layer waits for "
                 "-- and its weighted GEMMs' output gradients, kept for its W",
        operands=["args*"], results=["outs*"], verify=_check,
        attrs={"unit": "int", "mb": "int", **_TASK, **_COSTED})
LIFE.op("bwd_w", "W(l, m): a Backward's weight-gradient part, from the GEMM output gradients its I kept, "
                 "the layer's output gradient and saved activations; the layer's gradient accumulated",
        operands=["args*"], results=["outs*"], verify=_check,
        attrs={"unit": "int", "mb": "int", **_TASK, **_COSTED})

# The state chain (paper Eq. 2): GradSync -> UpdateShard -> PrefetchW per layer.
LIFE.op("reduce", "ZeRO >= 2: reduce-scatter one micro-batch's gradient bucket into the shard; "
                  "the token frees the bucket buffer",
        operands=["args*"], results=["outs*"], verify=_check,
        attrs={"unit": "int", "mb": "int", **_TASK})
LIFE.op("grad_sync", "GradSync(l): the collective completing a layer's accumulated gradient "
                     "(ZeRO >= 2: also a token freeing the last bucket's buffer)",
        operands=["args*"], results=["outs*"], verify=_check,
        attrs={"unit": "int", "kind": "all-reduce|reduce-scatter", **_TASK})
LIFE.op("tie_sum", "TieSum(l): a tied parameter's synchronized gradient summed over its copies (the "
                   "other copies' on this stage, the operands before the unit's own; an all-reduce "
                   "between `stages` when they are several), before UpdateShard",
        operands=["args*"], results=["outs*"], verify=_check,
        attrs={"unit": "int", "stages": "list<int>", **_TASK})
LIFE.op("update", "UpdateShard(l): the optimizer step on this rank's shard",
        operands=["g:!life.grad", "s:!life.opt", "w:!life.param"], results=["w:!life.param"],
        verify=_check, attrs={"unit": "int", **_TASK, **_DEADLINE})
LIFE.op("prefetch", "PrefetchW(l): all-gather the updated shards into the next step's view",
        operands=["w:!life.param"], results=["v:!life.view"], verify=_check,
        attrs={"unit": "int", **_TASK, **_DEADLINE})
LIFE.op("step_end", "the step boundary: hands each layer's parameter view to the next step",
        operands=["views*"], verify=_check)

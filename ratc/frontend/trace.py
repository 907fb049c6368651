"""trace_model: a torch module to a ModelProfile (pre, decoder layer templates, post)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import torch
from torch import nn

from ratc.errors import RatcError
from ratc.frontend import opcosts
from ratc.frontend.capture import Node, capture
from ratc.frontend.layers import find_layer_container, only_first_layers, signature
from ratc.frontend.profile import LayerProfile, ModelProfile, OpProfile

DTYPE_NAMES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32",
               torch.float64: "f64", torch.int64: "i64", torch.int32: "i32", torch.bool: "i1",
               torch.int8: "i8", torch.uint8: "u8"}
NORM_CLASS = re.compile(r"norm$", re.IGNORECASE)
KINDS = {"linear": "matmul", "matmul": "matmul", "attention": "attention", "embedding": "embedding",
         "cross_entropy": "loss", "softmax": "softmax", "log_softmax": "softmax",
         "rms_norm": "norm", "layer_norm": "norm"}
LEAVES = ("input", "param", "buffer", "const")


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


@dataclass
class _Op:
    """An OpProfile under construction (saved bytes still accumulate)."""

    name: str
    kind: str
    out: object
    cost: opcosts.Cost
    node: Node                      # the node whose value the op produces
    operands: list[Node]            # tensor inputs in call order
    saved: int = 0
    inputs: tuple[str, ...] = ()


@dataclass
class _Part:
    """The nodes of one part of the model (pre, one decoder layer, post)."""

    name: str
    root: str                       # module path op names are relative to
    nodes: list[Node] = field(default_factory=list)
    ops: list[_Op] = field(default_factory=list)
    args: list[Node] = field(default_factory=list)     # tensors read from outside the part


def _layer_of(node: Node, layer_paths: set[str]) -> str | None:
    return next((path for path, _ in node.scope if path in layer_paths), None)


def _partition(nodes: list[Node], layer_paths: list[str]) -> tuple[_Part, list[_Part], _Part]:
    paths = set(layer_paths)
    layers = {p: _Part(p, p) for p in layer_paths}
    pre, post = _Part("embedding", ""), _Part("head", "")
    seen_layer = False
    pending: list[Node] = []        # non-layer ops after some layer: post, unless a layer follows
    for n in nodes:
        if n.op in LEAVES:
            continue
        path = _layer_of(n, paths)
        if path is None:
            (pending if seen_layer else pre.nodes).append(n)
            continue
        seen_layer = True
        costly = [p for p in pending if opcosts.node_cost(p) is not None]
        if costly:
            raise RatcError(f"op '{costly[0].name}' ({costly[0].op}) runs between decoder layers "
                            "outside any layer; ratc needs every op to belong to the embedding, a layer or the head")
        pending.clear()
        layers[path].nodes.append(n)
    post.nodes = pending
    missing = [p for p in layer_paths if not layers[p].nodes]
    if missing:
        raise RatcError(f"decoder layer '{missing[0]}' ran no ops during tracing")
    return pre, [layers[p] for p in layer_paths], post


def _relative(path: str, root: str) -> str:
    if root and path.startswith(root + "."):
        return path[len(root) + 1:]
    return "" if path == root else path


def _norm_module(node: Node, root: str) -> tuple[str, str] | None:
    """The innermost norm module (path, class) enclosing a node inside its part."""
    for path, cls in reversed(node.scope):
        if path != root and NORM_CLASS.search(cls):
            return path, cls
    return None


def _build_ops(part: _Part) -> None:
    """Costs for every op of a part; the ops of a norm module become one fused norm op."""
    names: dict[str, int] = {}

    def add(base_name: str, kind: str, node: Node, operands: list[Node], cost: opcosts.Cost):
        count = names.get(base_name, 0)
        names[base_name] = count + 1
        name = base_name if count == 0 else f"{base_name}.{count}"
        part.ops.append(_Op(name, kind, node.out, cost, node, [a for a in operands if a.out is not None]))

    i, nodes = 0, part.nodes
    while i < len(nodes):
        n = nodes[i]
        norm = _norm_module(n, part.root) if n.op not in ("rms_norm", "layer_norm") else None
        if norm is not None:
            group = [n]
            while i + 1 < len(nodes) and _norm_module(nodes[i + 1], part.root) == norm:
                i += 1
                group.append(nodes[i])
            members = set(group)
            inputs = [a for g in group for a in g.args if a not in members]
            acts = [a for a in inputs if a.op not in ("param", "buffer", "const")
                    and a.out is not None and a.out.dtype.is_floating_point]
            weights = list({id(a): a for a in inputs if a.op == "param"}.values())
            outs = [g for g in group if g.out is not None]
            if not acts or not outs:
                raise RatcError(f"cannot analyse norm module '{norm[0]}': no tensor input or output")
            # LayerNorm subtracts the mean; RMSNorm does not
            kind = "rms" if "rms" in norm[1].lower() or not any(g.op == "sub" for g in group) else "layer"
            add(_relative(norm[0], part.root), "norm", outs[-1], [acts[0], *weights],
                opcosts.norm_cost(kind, acts[0], weights, outs[-1].out))
        else:
            cost = opcosts.node_cost(n)
            if cost is not None:
                scope = _relative(n.scope[-1][0], part.root) if n.scope else ""
                if n.op in ("linear", "embedding", "rms_norm", "layer_norm") and scope:
                    base_name = scope        # a module op is named after its module
                else:
                    base_name = f"{scope}.{n.op}" if scope else n.op
                kind = KINDS.get(n.op, "elementwise" if n.op in opcosts.ELEMENTWISE_FLOPS
                                 or n.op in opcosts.REDUCTION_OPS else "other")
                add(base_name, kind, n, n.args, cost)
        i += 1


def _attribute_saves(parts: list[_Part]) -> None:
    """Sum saved bytes per op, counting each saved tensor once.

    A saved tensor that needs a gradient (or is a model input) counts in the part that saves
    it, as in Korthikanti et al.; a constant shared by layers (rotary tables, masks) counts
    once, in the part that produced it.
    """
    owner: dict[Node, _Op] = {}
    part_of: dict[Node, _Part] = {}
    for part in parts:
        for op in part.ops:
            owner[op.node] = op
        for n in part.nodes:
            part_of[n] = part
    shared: set = set()
    for part in parts:
        seen: set = set()
        for op in part.ops:
            for key, size in op.cost.saves:
                node = key if isinstance(key, Node) else None
                if node is not None and node.op in ("param", "buffer", "const"):
                    continue
                local = node is None or node.on_grad_path or node.op == "input" or part_of.get(node) is part
                if local:
                    if key not in seen:
                        seen.add(key)
                        op.saved += size
                elif key not in shared and node in owner:
                    shared.add(key)
                    owner[node].saved += size


def _wire(part: _Part, params: dict[int, str], module: nn.Module) -> None:
    """Name each op's operands: ops of the part, its own parameters, or "$i" for args[i]."""
    produced = {op.node: op.name for op in part.ops}
    for op in part.ops:
        names = []
        for a in op.operands:
            if a.op == "param" and id(module.get_parameter(a.target)) in params:
                names.append(params[id(module.get_parameter(a.target))])
                continue
            if a.op in ("const", "buffer"):
                continue
            b = opcosts.base(a)
            if b in produced:
                names.append(produced[b])
                continue
            if b not in part.args:
                part.args.append(b)
            names.append(f"${part.args.index(b)}")
        op.inputs = tuple(dict.fromkeys(names))


def _mark_rope(part: _Part) -> None:
    """Relabel the pointwise ops that apply position tables (rotary cos/sin) as `rope`.

    Seeds are pointwise ops reading a constant float table from outside the layer; then,
    to a fixpoint, ops fed only by rope ops (x*cos + rot(x)*sin) and pure data movement
    (neg, cat of rotate_half) whose consumers are all rope ops join them.
    """
    tables = {f"${i}" for i, a in enumerate(part.args) if a.out.dtype.is_floating_point and not a.on_grad_path}
    if not tables:
        return
    pointwise = [op for op in part.ops if op.kind in ("elementwise", "other")]
    consumers: dict[str, list[str]] = {}
    for op in part.ops:
        for name in op.inputs:
            consumers.setdefault(name, []).append(op.name)
    rope = {op.name for op in pointwise if tables & set(op.inputs)}
    changed = bool(rope)
    while changed:
        changed = False
        for op in pointwise:
            if op.name in rope:
                continue
            fed = [i for i in op.inputs if not i.startswith("$")]
            feeds = consumers.get(op.name, [])
            if (fed and all(i in rope for i in fed)) or \
                    (op.node.op in ("neg", "cat", "slice") and feeds and all(c in rope for c in feeds)):
                rope.add(op.name)
                changed = True
    for op in part.ops:
        if op.name in rope:
            op.kind = "rope"


def _input_bytes(part: _Part) -> int:
    """Bytes of the per-sequence tensors a part reads from outside: its checkpoint."""
    inside = set(part.nodes)
    found = {}
    for n in part.nodes:
        for a in n.args:
            if a in inside or a.op in ("param", "buffer", "const"):
                continue
            if a.on_grad_path or a.op == "input":
                b = opcosts.base(a)
                found[b] = opcosts.nbytes(b)
    return sum(found.values())


def _profile(part: _Part, name: str, repeat: int, params: list[tuple[str, torch.Tensor]],
             module: nn.Module, tied: tuple[tuple[str, str], ...] = ()) -> LayerProfile:
    _wire(part, {id(p): n for n, p in params}, module)
    if part.root:                   # decoder layers; pre/post build the tables, not apply them
        _mark_rope(part)
    ops = tuple(OpProfile(
        name=op.name, kind=op.kind, out_shape=tuple(op.out.shape), dtype=dtype_name(op.out.dtype),
        fwd_flops=op.cost.fwd, bwd_input_flops=op.cost.bwd_input, bwd_weight_flops=op.cost.bwd_weight,
        bytes_read=op.cost.read, bytes_written=op.cost.written, saved_bytes=op.saved,
        gemm=op.cost.gemm, attention=op.cost.attention, inputs=op.inputs,
        grad=op.node.requires_grad) for op in part.ops)
    return LayerProfile(name=name, repeat=repeat, ops=ops, param_count=sum(p.numel() for _, p in params),
                        param_bytes=sum(p.numel() * p.element_size() for _, p in params),
                        input_bytes=_input_bytes(part),
                        params=tuple((n, tuple(p.shape), dtype_name(p.dtype)) for n, p in params),
                        frozen=tuple(n for n, p in params if not p.requires_grad), tied=tied,
                        args=tuple((tuple(a.out.shape), dtype_name(a.out.dtype)) for a in part.args))


def _outer_params(module: nn.Module, part: _Part, layer_params: set[int],
                  first_name: dict[int, str]) -> tuple[list[tuple[str, torch.Tensor]], tuple[tuple[str, str], ...]]:
    """Parameters a part uses that belong to no decoder layer, and the (name, tie key) of
    those an earlier part already uses (a tied embedding and LM head: each holds a copy).
    `first_name` maps each parameter seen so far to its name in its first user."""
    found, tied = [], []
    for n in part.nodes:
        for a in n.args:
            if a.op != "param":
                continue
            p = module.get_parameter(a.target)
            if id(p) in layer_params:
                raise RatcError(f"the {part.name} reads parameter '{a.target}' of a decoder layer; ratc ties "
                                "parameters between the embedding and the head only")
            if any(q is p for _, q in found):
                continue
            found.append((a.target, p))
            if id(p) in first_name:
                tied.append((a.target, first_name[id(p)]))
            else:
                first_name[id(p)] = a.target
    return found, tuple(tied)


def _check_layer_params(module: nn.Module, part: _Part, mod: nn.Module) -> None:
    """A decoder layer may read only its own parameters (ties reach the embedding and head only)."""
    own = {id(p) for p in mod.parameters()}
    for n in part.nodes:
        for a in n.args:
            if a.op == "param" and id(module.get_parameter(a.target)) not in own:
                raise RatcError(f"decoder layer '{part.name}' reads parameter '{a.target}', which is not its own; "
                                "ratc ties parameters between the embedding and the head only")


def _merge_layers(profiles: list[LayerProfile], container: str) -> tuple[LayerProfile, ...]:
    """Consecutive layers (or templates) with identical costs become one template whose
    repeat is their total, named by the range of layer indices it covers."""
    def key(lp):
        return (lp.ops, lp.params, lp.frozen, lp.args, lp.input_bytes)

    runs: list[list[LayerProfile]] = []
    for lp in profiles:
        if runs and key(runs[-1][0]) == key(lp):
            runs[-1].append(lp)
        else:
            runs.append([lp])
    out, start = [], 0
    for run in runs:
        repeat = sum(lp.repeat for lp in run)
        out.append(dataclasses.replace(run[0], name=f"{container}[{start}:{start + repeat}]", repeat=repeat))
        start += repeat
    return tuple(out)


def trace_model(module: nn.Module, seq_len: int, *, name: str = "model", method: str = "auto",
                replicate: bool = True) -> ModelProfile:
    """Trace module(input_ids, labels) for one sequence of seq_len tokens into a ModelProfile.

    method: "fx" (torch.fx.symbolic_trace), "export" (torch.export, strict=False) or
    "auto" (fx, then export). With replicate, structurally identical decoder layers are
    traced once and the template repeated.
    """
    if seq_len < 2:
        raise RatcError(f"sequence length must be at least 2, got {seq_len}")
    container, layer_paths = find_layer_container(module)
    layer_mods = [module.get_submodule(p) for p in layer_paths]
    layer_params = {id(p) for m in layer_mods for p in m.parameters()}
    if len(layer_params) != sum(1 for m in layer_mods for _ in m.parameters()):
        raise RatcError(f"decoder layers of '{container}' share parameters; ratc ties parameters between the "
                        "embedding and the head only")
    identical = replicate and len(layer_mods) > 1 and len({signature(m) for m in layer_mods}) == 1
    # Behind a frozen embedding the first layer's input needs no gradient, the others' do:
    # trace two layers then, and repeat the second.
    frozen_before = any(not p.requires_grad for p in module.parameters() if id(p) not in layer_params)
    n_traced = 2 if frozen_before and len(layer_mods) > 2 else 1
    nodes = tracer = None
    if identical:
        try:
            with only_first_layers(module, container, n_traced):
                nodes, tracer = capture(module, seq_len, method)
            traced_paths = layer_paths[:n_traced]
        except RatcError:
            nodes = None                      # the forward may index layers by count: trace all
    if nodes is None:
        nodes, tracer = capture(module, seq_len, method)
        traced_paths = layer_paths
    pre, layers, post = _partition(nodes, traced_paths)
    parts = [pre, *layers, post]
    for part in parts:
        _build_ops(part)
    _attribute_saves(parts)

    for part, mod in zip(layers, layer_mods):
        _check_layer_params(module, part, mod)
    first_name: dict[int, str] = {}
    pre_params, _ = _outer_params(module, pre, layer_params, first_name)
    post_params, post_tied = _outer_params(module, post, layer_params, first_name)
    unused = [n for n, p in module.named_parameters() if id(p) not in layer_params and id(p) not in first_name]
    post_params += [(n, module.get_parameter(n)) for n in unused]
    # the first holder of a tied parameter lists it as tied too, under its own name
    keys = {key for _, key in post_tied}
    pre_tied = tuple((n, n) for n, _ in pre_params if n in keys)
    # (traced layers once each; with replication the last traced one stands for the rest)
    repeats = [1] * len(layers)
    repeats[-1] += len(layer_paths) - len(layers)
    templates = _merge_layers([_profile(lp, lp.name, r, list(m.named_parameters()), module)
                               for lp, m, r in zip(layers, layer_mods, repeats)], container)
    emb = next((op for op in pre.ops if op.kind == "embedding"), None)
    if emb is None:
        raise RatcError("no token embedding found before the first decoder layer")
    weight = emb.node.args[0].out
    unknown = sorted({n.op for n in nodes if not opcosts.is_known(n.op)})
    return ModelProfile(
        name=name, seq_len=seq_len, vocab=weight.shape[0], hidden=weight.shape[1],
        dtype=dtype_name(weight.dtype),
        pre=_profile(pre, "embedding", 1, pre_params, module, pre_tied),
        layers=templates,
        post=_profile(post, "head", 1, post_params, module, post_tied),
        meta={"tracer": tracer, "layer_container": container, "traced_layers": len(traced_paths),
              "unmodeled_ops": unknown, "unused_params": unused})

"""A traced model as a graph-dialect module and back (ratc.ir.dialects.graph), without loss
except the tracer's meta notes."""

from __future__ import annotations

import re

from ratc.frontend.profile import LayerProfile, ModelProfile, OpProfile
from ratc.ir.attributes import ByteSize
from ratc.ir.core import Block, Module, Operation
from ratc.ir.dialects.graph import ROLES
from ratc.ir.types import TensorType
from ratc.ir.verifier import VerifyError

_HINT = re.compile(r"[^A-Za-z0-9_.$-]")


def _hint(name: str) -> str:
    return _HINT.sub("_", name)


def _layer_op(layer: LayerProfile, role: str, sym: str) -> Operation:
    """One graph.layer op: args, params, then the costed ops wired by their inputs."""
    body = Block()
    values = {}
    for i, (shape, dtype) in enumerate(layer.args):
        values[f"${i}"] = body.append(Operation("graph.arg", (), [TensorType(shape, dtype)], {"index": i},
                                                result_names=[f"arg{i}"])).result
    frozen, tied = set(layer.frozen), dict(layer.tied)
    for name, shape, dtype in layer.params:
        attrs = {"name": name, "frozen": True} if name in frozen else {"name": name}
        if name in tied:
            attrs["tied"] = tied[name]
        values[name] = body.append(Operation("graph.param", (), [TensorType(shape, dtype)], attrs,
                                             result_names=[_hint(name)])).result
    for op in layer.ops:
        attrs = {"name": op.name, "fwd_flops": op.fwd_flops, "bwd_input_flops": op.bwd_input_flops,
                 "bwd_weight_flops": op.bwd_weight_flops, "bytes_read": ByteSize(op.bytes_read),
                 "bytes_written": ByteSize(op.bytes_written), "saved": ByteSize(op.saved_bytes)}
        if not op.grad:
            attrs["no_grad"] = True
        if op.gemm is not None:
            attrs.update(m=op.gemm[0], n=op.gemm[1], k=op.gemm[2])
        if op.attention is not None:
            attrs.update(heads=op.attention[0], kv_heads=op.attention[1], seq=op.attention[2],
                         head_dim=op.attention[3])
        operands = [values[i] for i in op.inputs]
        values[op.name] = body.append(Operation(f"graph.{op.kind}", operands, [TensorType(op.out_shape, op.dtype)],
                                                attrs, result_names=[_hint(op.name)])).result
    # what leaves the layer: every op result nothing inside it reads
    used = {name for op in layer.ops for name in op.inputs}
    body.append(Operation("graph.output", [values[op.name] for op in layer.ops if op.name not in used], ()))
    attrs = {"name": layer.name, "role": role, "repeat": layer.repeat, "param_count": layer.param_count,
             "param_bytes": ByteSize(layer.param_bytes), "input_bytes": ByteSize(layer.input_bytes)}
    return Operation("graph.layer", (), (), attrs, sym_name=sym, region=body)


def module_from_profile(profile: ModelProfile) -> Module:
    """The graph-dialect module of a traced model."""
    attrs = {"seq_len": profile.seq_len, "vocab": profile.vocab, "hidden": profile.hidden,
             "dtype": profile.dtype, "num_layers": profile.num_layers, "param_count": profile.param_count}
    ops = [_layer_op(profile.pre, "pre", "embedding")]
    count = len(profile.layers)
    ops += [_layer_op(t, "decoder", "decoder" if count == 1 else f"decoder_{i}") for i, t in enumerate(profile.layers)]
    ops.append(_layer_op(profile.post, "post", "head"))
    return Module(_hint(profile.name), attrs, ops)


def _layer_profile(op: Operation) -> LayerProfile:
    names = {}
    args, params, frozen, tied, ops = [], [], [], [], []
    for inner in op.region.ops:
        if inner.name == "graph.output":
            continue            # derived: the ops' results nothing else reads
        out = inner.result
        if inner.name == "graph.arg":
            names[out] = f"${inner.attributes['index']}"
            args.append((inner.attributes["index"], (out.type.shape, out.type.dtype)))
        elif inner.name == "graph.param":
            names[out] = inner.attributes["name"]
            params.append((inner.attributes["name"], out.type.shape, out.type.dtype))
            if inner.attributes.get("frozen", False):
                frozen.append(inner.attributes["name"])
            if "tied" in inner.attributes:
                tied.append((inner.attributes["name"], inner.attributes["tied"]))
        else:
            a = inner.attributes
            names[out] = a["name"]
            ops.append(OpProfile(
                name=a["name"], kind=inner.name.partition(".")[2], out_shape=out.type.shape, dtype=out.type.dtype,
                fwd_flops=a["fwd_flops"], bwd_input_flops=a["bwd_input_flops"], bwd_weight_flops=a["bwd_weight_flops"],
                bytes_read=int(a["bytes_read"]), bytes_written=int(a["bytes_written"]), saved_bytes=int(a["saved"]),
                gemm=(a["m"], a["n"], a["k"]) if "m" in a else None,
                attention=(a["heads"], a["kv_heads"], a["seq"], a["head_dim"]) if "heads" in a else None,
                inputs=tuple(names[v] for v in inner.operands), grad=not a.get("no_grad", False)))
    a = op.attributes
    return LayerProfile(name=a["name"], repeat=a["repeat"], ops=tuple(ops), param_count=a["param_count"],
                        param_bytes=int(a["param_bytes"]), input_bytes=int(a["input_bytes"]),
                        params=tuple(params), frozen=tuple(frozen), tied=tuple(tied),
                        args=tuple(t for _, t in sorted(args)))


def profile_from_module(module: Module) -> ModelProfile:
    """The ModelProfile a graph-dialect module describes (the inverse of module_from_profile)."""
    layers = [op for op in module.body.ops if op.name == "graph.layer"]
    by_role = {r: [op for op in layers if op.attributes["role"] == r] for r in ROLES}
    if len(by_role["pre"]) != 1 or len(by_role["post"]) != 1 or not by_role["decoder"]:
        raise VerifyError("a graph module needs one 'pre' layer, one 'post' layer and at least one 'decoder' layer")
    a = module.attributes
    for key, kind in (("seq_len", int), ("vocab", int), ("hidden", int), ("dtype", str)):
        if type(a.get(key)) is not kind:
            raise VerifyError(f"a graph module needs its model's '{key}' ({kind.__name__}) among its "
                              f"attributes, got {a.get(key)!r}", None)
    return ModelProfile(name=module.name or "model", seq_len=a["seq_len"], vocab=a["vocab"], hidden=a["hidden"],
                        dtype=a["dtype"], pre=_layer_profile(by_role["pre"][0]),
                        layers=tuple(_layer_profile(op) for op in by_role["decoder"]),
                        post=_layer_profile(by_role["post"][0]))

"""The graph dialect: a traced model as layer templates of costed ops (the frontend's output).

    module @llama2-7b {dtype = "f16", hidden = 4096, ...} {
      graph.layer @decoder {name = "layers[0:32]", repeat = 32, role = "decoder", ...} {
        %arg0 = graph.arg {index = 0} : tensor<1x2048x4096xf16>
        %self_attn.q_proj.weight = graph.param {name = "self_attn.q_proj.weight"} : tensor<4096x4096xf16>
        %self_attn.q_proj = graph.matmul(%input_layernorm, %self_attn.q_proj.weight) {m = 2048, ...}
        ...

Costs are per sequence (micro-batch 1) as in ratc.frontend.profile; module_from_profile
and profile_from_module convert both ways without loss (except the tracer's meta notes).
"""

from __future__ import annotations

import math
import re

from ratc.frontend.profile import LayerProfile, ModelProfile, OpProfile
from ratc.ir.attributes import ByteSize
from ratc.ir.core import Block, Module, Operation
from ratc.ir.registry import Dialect
from ratc.ir.types import TensorType
from ratc.ir.verifier import VerifyError

GRAPH = Dialect("graph", "a traced model: layer templates of costed ops")

# no_grad: the op's output needs no gradient (off the gradient path, or behind frozen
# inputs), so it has no backward
COST_ATTRS = {"name": "str", "fwd_flops": "int", "bwd_input_flops": "int", "bwd_weight_flops": "int",
              "bytes_read": "bytes", "bytes_written": "bytes", "saved": "bytes", "no_grad": "bool?"}
ROLES = ("pre", "decoder", "post")


def _nonnegative(op: Operation) -> None:
    for key in ("fwd_flops", "bwd_input_flops", "bwd_weight_flops"):
        if op.attributes[key] < 0:
            raise VerifyError(f"'{op.name}' attribute '{key}' must not be negative", op)


def _verify_matmul(op: Operation) -> None:
    _nonnegative(op)
    m, n, k = (op.attributes[x] for x in "mnk")
    shape = op.results[0].type.shape if isinstance(op.results[0].type, TensorType) else ()
    if not shape or shape[-1] != n or math.prod(shape[:-1]) != m:
        raise VerifyError(f"'{op.name}' result {op.results[0].type} must hold m = {m} rows of n = {n} "
                          "(its last dimension n, the others multiplying to m)", op)
    if op.attributes["fwd_flops"] not in (2 * m * n * k, 2 * m * n * k + m * n):
        raise VerifyError(f"'{op.name}' fwd_flops must be 2*m*n*k = {2 * m * n * k} "
                          f"(+ m*n with a bias), got {op.attributes['fwd_flops']}", op)


def _verify_attention(op: Operation) -> None:
    _nonnegative(op)
    heads, kv = op.attributes["heads"], op.attributes["kv_heads"]
    if kv <= 0 or heads % kv:
        raise VerifyError(f"'{op.name}' heads ({heads}) must be a multiple of kv_heads ({kv})", op)


def _verify_layer(op: Operation) -> None:
    if op.attributes["repeat"] < 1:
        raise VerifyError(f"'{op.name}' repeat must be at least 1", op)
    ops = op.region.ops
    for inner in ops:
        if inner.dialect != "graph" or inner.name == "graph.layer":
            raise VerifyError(f"'{op.name}' may only hold graph ops other than graph.layer, "
                              f"found '{inner.name}'", inner)
    if not ops or ops[-1].name != "graph.output":
        raise VerifyError(f"'{op.name}' @{op.sym_name} must end with graph.output (the values it hands on)", op)
    frozen = sum(math.prod(p.results[0].type.shape) for p in ops
                 if p.name == "graph.param" and p.attributes.get("frozen", False)
                 and isinstance(p.results[0].type, TensorType))
    if frozen > op.attributes["param_count"]:
        raise VerifyError(f"'{op.name}' @{op.sym_name} has {frozen} frozen parameter elements, more than its "
                          f"param_count {op.attributes['param_count']}", op)


def _verify_output(op: Operation) -> None:
    layer = op.block.parent if op.block is not None else None
    if layer is None or layer.name != "graph.layer" or layer.region.ops[-1] is not op:
        raise VerifyError("'graph.output' must be the last op of a graph.layer", op)


GRAPH.op("layer", "a layer template (embedding, decoder layer or head) repeated `repeat` times",
         attrs={"name": "str", "role": "|".join(ROLES), "repeat": "int", "param_count": "int",
                "param_bytes": "bytes", "input_bytes": "bytes"},
         symbol=True, region=True, verify=_verify_layer)
# The terminator: what a layer hands on (the next layer's input, the loss). It keeps the
# layer's dataflow alive for generic passes such as dce, as a region's terminator does in MLIR.
GRAPH.op("output", "the layer's results: the values it hands on to the next layer (its terminator)",
         operands=["outputs:tensor*"], verify=_verify_output)
def _verify_arg(op: Operation) -> None:
    if op.attributes["index"] < 0:
        raise VerifyError(f"'{op.name}' index must not be negative, got {op.attributes['index']}", op)


GRAPH.op("arg", "a tensor the layer reads from outside (its checkpoint, a model input, a shared table)",
         results=["out:tensor"], attrs={"index": "int"}, pure=True, verify=_verify_arg)
GRAPH.op("param", "a parameter held by the layer (frozen: requires_grad=False, so no gradient or optimizer "
         "state; tied: a copy of the parameter of that name shared with another layer)",
         results=["out:tensor"], attrs={"name": "str", "frozen": "bool?", "tied": "str?"}, pure=True)
GRAPH.op("matmul", "a GEMM: x W^T or a product of activations", operands=["inputs:tensor*"],
         results=["out:tensor"], attrs={**COST_ATTRS, "m": "int", "n": "int", "k": "int"},
         pure=True, verify=_verify_matmul)
GRAPH.op("attention", "softmax(QK^T/sqrt(d) + mask) V with materialized probabilities",
         operands=["inputs:tensor*"], results=["out:tensor"],
         attrs={**COST_ATTRS, "heads": "int", "kv_heads": "int", "seq": "int", "head_dim": "int"},
         pure=True, verify=_verify_attention)
for _kind, _summary in (("norm", "a fused RMSNorm/LayerNorm"), ("elementwise", "a pointwise or reduction op"),
                        ("rope", "rotary position embedding"), ("embedding", "a token-embedding gather"),
                        ("softmax", "a softmax or log-softmax"), ("loss", "the training loss"),
                        ("other", "a copy, index or creation op")):
    GRAPH.op(_kind, _summary, operands=["inputs:tensor*"], results=["out:tensor"], attrs=dict(COST_ATTRS),
             pure=True, verify=_nonnegative)


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

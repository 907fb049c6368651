"""The graph dialect: a traced model as layer templates of costed ops (the frontend's output).

    module @llama2-7b {dtype = "f16", hidden = 4096, ...} {
      graph.layer @decoder {name = "layers[0:32]", repeat = 32, role = "decoder", ...} {
        %arg0 = graph.arg {index = 0} : tensor<1x2048x4096xf16>
        %self_attn.q_proj.weight = graph.param {name = "self_attn.q_proj.weight"} : tensor<4096x4096xf16>
        %self_attn.q_proj = graph.matmul(%input_layernorm, %self_attn.q_proj.weight) {m = 2048, ...}
        ...

Costs are per sequence (micro-batch 1) as in ratc.frontend.profile; ratc.frontend.graph_ir
converts a profile to this dialect and back without loss (except the tracer's meta notes).
"""

from __future__ import annotations

import math

from ratc.ir.core import Operation
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

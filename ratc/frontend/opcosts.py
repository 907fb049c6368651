"""Cost formulas per op kind: FLOPs (2 per MAC), DDR bytes and what autograd saves.

Every formula here is written out with its source in docs/frontend.md ("Cost model").
Counts are for the traced shapes, i.e. one sequence when traced at batch 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ratc.errors import RatcError
from ratc.frontend.capture import Node, TensorInfo

# Ops that only re-describe memory (or are folded into their consumer's addressing).
VIEW_OPS = frozenset({
    "view", "reshape", "_unsafe_view", "transpose", "t", "permute", "unsqueeze", "squeeze",
    "expand", "expand_as", "slice", "select", "getitem", "alias", "detach", "contiguous",
    "flatten", "unflatten", "split", "chunk", "unbind", "narrow", "as_strided", "clone",
    "lift_fresh_copy", "repeat_interleave_view",
})
# Ops with no tensor result or that only read metadata.
META_OPS = frozenset({"getattr", "size", "dim", "_assert_tensor_metadata", "sym_size", "numel",
                      "floordiv", "_assert_scalar", "sym_constrain_range_for_size", "eq_int"})
# FLOPs per output element in the forward pass.
ELEMENTWISE_FLOPS = {
    "add": 1, "sub": 1, "mul": 1, "div": 1, "neg": 1, "pow": 1, "rsqrt": 1, "sqrt": 1,
    "exp": 1, "log": 1, "cos": 1, "sin": 1, "abs": 1, "reciprocal": 1, "clamp": 1,
    "relu": 1, "sigmoid": 4, "tanh": 4, "silu": 4, "gelu": 8,
    "where": 1, "masked_fill": 1, "eq": 1, "ne": 1, "lt": 1, "le": 1, "gt": 1, "ge": 1,
    "__and__": 1, "__or__": 1, "logical_and": 1, "logical_not": 1, "bitwise_and": 1,
    "triu": 1, "tril": 1, "cumsum": 1, "diff": 1,
}
# Ops that move or create data without arithmetic.
COPY_OPS = frozenset({"cast", "cat", "stack", "repeat", "index", "gather", "pad", "constant_pad_nd",
                      "full_like", "zeros_like", "ones_like", "new_ones", "new_zeros", "new_full",
                      "arange", "full", "zeros", "ones", "empty", "scalar_tensor", "outer_view"})
REDUCTION_OPS = frozenset({"mean", "sum", "amax", "max", "min", "amin"})
# Which operands autograd keeps, from tools/autograd/derivatives.yaml.
SAVES_RESULT = frozenset({"rsqrt", "sqrt", "exp", "sigmoid", "tanh", "relu", "softmax", "log_softmax"})
SAVES_SELF = frozenset({"pow", "silu", "gelu", "cos", "sin", "log", "abs", "reciprocal", "clamp"})
# Extremum reductions route the gradient to where the extremum was: amax/amin and a whole-
# tensor max/min keep their input and result; max/min over a dim keep the indices they return.
EXTREMA = frozenset({"amax", "amin", "max", "min"})
# Pass-through backward: gradients flow unchanged (no FLOPs).
GRAD_PASSTHROUGH = frozenset({"add", "sub", "neg", "cast", "cat", "stack", "repeat", "pad",
                              "constant_pad_nd", "index", "gather"})
NORM_FLOPS = {"rms": (4, 7, 2), "layer": (7, 9, 3)}   # per element: fwd, bwd-input, bwd-weight
NORM_STATS = {"rms": 1, "layer": 2}                    # saved float32 statistics per row (rstd; mean, rstd)
SOFTMAX_FLOPS = (5, 4)                                 # per score: fwd, bwd
CROSS_ENTROPY_FLOPS = (5, 2)                           # per logit: fwd (log-softmax + pick), bwd
STATS_BYTES = 4                                        # bytes of one float32 statistic


@dataclass
class Cost:
    """Costs of one op; `saves` lists (key, bytes) so tensors saved twice count once."""

    fwd: int = 0
    bwd_input: int = 0
    bwd_weight: int = 0
    read: int = 0
    written: int = 0
    saves: list = field(default_factory=list)
    gemm: tuple[int, int, int] | None = None
    attention: tuple[int, int, int, int] | None = None


def is_noop_cast(node: Node) -> bool:
    return node.op == "cast" and bool(node.args) and node.args[0].out == node.out


def base(node: Node) -> Node:
    """The node that owns the storage a view (or a cast to the same dtype) reads."""
    while node.args and ((node.op in VIEW_OPS and not (node.op == "getitem" and len(node.args[0].outs) > 1))
                         or is_noop_cast(node)):
        node = node.args[0]
    return node


def nbytes(node: Node) -> int:
    return node.out.nbytes if node.out else 0


def _tensor_args(node: Node) -> list[Node]:
    return [a for a in node.args if a.out is not None]


def _grad_args(node: Node) -> list[Node]:
    return [a for a in node.args if a.requires_grad]


def _save(node: Node) -> tuple:
    b = base(node)
    return (b, nbytes(b))


def linear_cost(node: Node) -> Cost:
    """y = x W^T (+ b): a GEMM with M = tokens, N = out features, K = in features."""
    x, w = node.args[0], node.args[1]
    bias = node.args[2] if len(node.args) > 2 else None
    n_out, k = w.out.shape
    m = x.out.numel // k
    c = Cost(fwd=2 * m * n_out * k + (m * n_out if bias is not None else 0), gemm=(m, n_out, k))
    c.bwd_input = 2 * m * n_out * k if x.requires_grad else 0
    c.bwd_weight = 2 * m * n_out * k if w.requires_grad else 0
    if bias is not None and bias.requires_grad:
        c.bwd_weight += m * n_out      # the bias gradient sums the output gradient over tokens
    c.read = x.out.nbytes + w.out.nbytes + (bias.out.nbytes if bias is not None else 0)
    c.written = nbytes(node)
    if w.requires_grad:
        c.saves.append(_save(x))
    return c


def matmul_cost(node: Node) -> Cost:
    """a @ b between activations (batched): 2*B*M*N*K, backward one GEMM per operand."""
    a, b = node.args[0], node.args[1]
    k = a.out.shape[-1]
    n = b.out.shape[-1]
    m = node.out.numel // n
    flops = 2 * m * n * k
    c = Cost(fwd=flops, gemm=(m, n, k), read=a.out.nbytes + b.out.nbytes, written=nbytes(node))
    for x, other in ((a, b), (b, a)):
        if x.requires_grad:
            target = "bwd_weight" if x.op == "param" else "bwd_input"
            setattr(c, target, getattr(c, target) + flops)
            if other.op != "param":
                c.saves.append(_save(other))
    return c


def attention_cost(node: Node) -> Cost:
    """softmax(Q K^T / sqrt(d) + mask) V with the score and probability matrices materialized.

    Costs follow the paper's attention backward (Algorithm 1), which reloads the forward
    probabilities P: the forward writes S = QK^T and P = softmax(S) to DDR, and P is
    saved for backward together with Q, K and V (K and V at their KV-head count).
    """
    # shapes from the operands as passed; sizes from their storage (K/V before any GQA expand)
    q, k_view, v_view = node.args[0], node.args[1], node.args[2]
    k, v = base(k_view), base(v_view)
    mask = node.args[3] if node.kwargs.get("has_mask") and len(node.args) > 3 else None
    *_, heads, s_q, d = (1,) * (4 - len(q.out.shape)) + q.out.shape
    s_k, dv = k_view.out.shape[-2], v_view.out.shape[-1]
    batch = q.out.numel // (heads * s_q * d)
    kv_heads = k.out.numel // (batch * s_k * d)
    scores = batch * heads * s_q * s_k
    score_bytes = scores * q.out.dtype.itemsize
    mm = 2 * scores * d + 2 * scores * dv
    c = Cost(fwd=mm + SOFTMAX_FLOPS[0] * scores, attention=(heads, kv_heads, s_q, d))
    c.read = q.out.nbytes + k.out.nbytes + v.out.nbytes + 2 * score_bytes + (mask.out.nbytes if mask is not None else 0)
    c.written = 2 * score_bytes + nbytes(node)
    if any(x.requires_grad for x in (q, k, v)):     # (behind frozen layers nothing is)
        c.bwd_input = 2 * mm + SOFTMAX_FLOPS[1] * scores
        c.saves += [_save(q), _save(k), _save(v), ((node, "probabilities"), score_bytes)]
    return c


def norm_cost(kind: str, x: Node, weights: list[Node], out: TensorInfo) -> Cost:
    """A fused RMSNorm/LayerNorm over the last dimension; saves its input and per-row stats."""
    fwd, bwd_in, bwd_w = NORM_FLOPS[kind]
    elems = x.out.numel
    stats = elems // x.out.shape[-1] * NORM_STATS[kind]
    c = Cost(fwd=fwd * elems, bwd_input=bwd_in * elems if x.requires_grad else 0,
             bwd_weight=bwd_w * elems if any(w.requires_grad for w in weights) else 0)
    c.read = x.out.nbytes + sum(w.out.nbytes for w in weights)
    c.written = out.nbytes + stats * STATS_BYTES
    if x.requires_grad or any(w.requires_grad for w in weights):
        c.saves += [_save(x), ((x, "norm-stats", out), stats * STATS_BYTES)]
    return c


def embedding_cost(node: Node) -> Cost:
    """A row gather; its backward scatter-adds one gradient row per token."""
    w, ids = node.args[0], node.args[1]
    c = Cost(read=ids.out.nbytes + nbytes(node), written=nbytes(node))
    if w.requires_grad:            # a frozen table needs no backward, so keeps nothing
        c.bwd_weight = node.out.numel
        c.saves.append(_save(ids))
    return c


def cross_entropy_cost(node: Node) -> Cost:
    """log_softmax + nll_loss over the logits; saves the log-probabilities and the targets."""
    logits, target = node.args[0], node.args[1]
    elems = logits.out.numel
    c = Cost(fwd=CROSS_ENTROPY_FLOPS[0] * elems,
             bwd_input=CROSS_ENTROPY_FLOPS[1] * elems if logits.requires_grad else 0)
    c.read = logits.out.nbytes + target.out.nbytes
    c.written = elems * logits.out.dtype.itemsize + nbytes(node)
    c.saves += [((node, "log-probabilities"), elems * logits.out.dtype.itemsize), _save(target)]
    return c


def softmax_cost(node: Node) -> Cost:
    x = node.args[0]
    elems = node.out.numel
    c = Cost(fwd=SOFTMAX_FLOPS[0] * elems, bwd_input=SOFTMAX_FLOPS[1] * elems if x.requires_grad else 0,
             read=x.out.nbytes, written=nbytes(node))
    if x.requires_grad:
        c.saves.append(_save(node))
    return c


def elementwise_cost(node: Node) -> Cost:
    """Pointwise, copy and reduction ops: read every input, write the output once."""
    args = _tensor_args(node)
    out_elems = node.out.numel
    c = Cost(read=sum(a.out.nbytes for a in args), written=nbytes(node))
    op = node.op
    if op in REDUCTION_OPS:
        c.fwd = sum(a.out.numel for a in args)
    elif op in ELEMENTWISE_FLOPS:
        c.fwd = ELEMENTWISE_FLOPS[op] * out_elems
    # a comparison's (boolean) result has no gradient, so nothing flows back through it
    grads = _grad_args(node) if node.out.dtype.is_floating_point else []
    if op in REDUCTION_OPS:
        c.bwd_input = out_elems * len(grads) if op in ("mean", "sum") else 0
    elif op not in GRAD_PASSTHROUGH and op in ELEMENTWISE_FLOPS:
        c.bwd_input = c.fwd * len(grads)
    if not grads:
        return c
    if op in EXTREMA:
        indices = node.outs[1:]
        c.saves += ([((node, "indices"), sum(t.nbytes for t in indices))] if indices
                    else [_save(args[0]), _save(node)])
    elif op in SAVES_RESULT:
        c.saves.append(_save(node))
    elif op in SAVES_SELF:
        c.saves.append(_save(args[0]))
    elif op == "mul":
        for a, other in ((args[0], args[-1]), (args[-1], args[0])):
            if a.requires_grad and other is not a:     # x * scalar keeps nothing
                c.saves.append(_save(other))
    elif op == "div":
        a, b = args[0], args[-1]
        if len(args) == 2:
            c.saves.append(_save(b))
            if b.requires_grad:
                c.saves.append(_save(a))
    elif op in ("where", "masked_fill"):
        cond = args[0] if op == "where" else args[-1]
        if not cond.out.dtype.is_floating_point:
            c.saves.append(_save(cond))
    return c


def _check_nonempty(node: Node) -> None:
    """A costed op on a tensor without elements (a size of 0 in the model's config, such as
    intermediate_size = 0) has no meaningful cost: every per-element formula divides by it."""
    for t in (node, *_tensor_args(node)):
        if t.out.numel == 0:
            where = f" in {node.scope[-1][0]} ({node.scope[-1][1]})" if node.scope else ""
            raise RatcError(f"op '{node.name}' ({node.op}){where}: tensor '{t.name}' of shape "
                            f"{list(t.out.shape)} has no elements; a model with a size of 0 (e.g. "
                            "intermediate_size = 0) cannot be trained")


def node_cost(node: Node) -> Cost | None:
    """Costs of a single (non-norm-group) node; None for views and metadata ops."""
    op = node.op
    if op in VIEW_OPS or op in META_OPS or node.out is None:
        return None
    if is_noop_cast(node):
        return None
    _check_nonempty(node)
    if op == "linear":
        return linear_cost(node)
    if op == "matmul":
        return matmul_cost(node)
    if op == "attention":
        return attention_cost(node)
    if op == "embedding":
        return embedding_cost(node)
    if op == "cross_entropy":
        return cross_entropy_cost(node)
    if op in ("softmax", "log_softmax"):
        return softmax_cost(node)
    if op in ("rms_norm", "layer_norm"):
        x = node.args[0]
        return norm_cost("rms" if op == "rms_norm" else "layer", x, node.args[1:], node.out)
    return elementwise_cost(node)


def is_known(op: str) -> bool:
    """Whether the op has a dedicated formula (others are costed as generic elementwise)."""
    return (op in VIEW_OPS or op in META_OPS or op in ELEMENTWISE_FLOPS or op in COPY_OPS
            or op in REDUCTION_OPS or op in SAVES_RESULT or op in SAVES_SELF
            or op in ("linear", "matmul", "attention", "embedding", "cross_entropy", "rms_norm",
                      "layer_norm", "input", "param", "buffer", "const"))

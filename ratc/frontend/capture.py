"""Capture a module as a flat list of normalized ops, via torch.fx or torch.export."""

from __future__ import annotations

import contextlib
import io
import logging
import math
import operator
from dataclasses import dataclass, field

import torch
from torch import nn

from ratc.errors import RatcError

# Canonical names for the spellings the same op has in torch.fx (Python functions,
# methods, modules) and in torch.export (aten overloads).
ALIASES = {
    "truediv": "div", "iadd": "add", "imul": "mul", "rsub": "sub",
    "float": "cast", "half": "cast", "bfloat16": "cast", "double": "cast", "to": "cast",
    "_to_copy": "cast", "type_as": "cast", "type": "cast",
    "_softmax": "softmax", "_log_softmax": "log_softmax", "cross_entropy_loss": "cross_entropy",
    "scaled_dot_product_attention": "attention",
    "_scaled_dot_product_flash_attention_for_cpu": "attention",
    "_scaled_dot_product_efficient_attention": "attention",
    "_scaled_dot_product_flash_attention": "attention",
    "mm": "matmul", "bmm": "matmul",
}
# Leaf modules symbolic_trace keeps as call_module nodes, mapped to the op they compute.
MODULE_OPS = {
    nn.Linear: "linear", nn.Embedding: "embedding", nn.SiLU: "silu", nn.GELU: "gelu",
    nn.ReLU: "relu", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid", nn.LayerNorm: "layer_norm",
    nn.RMSNorm: "rms_norm", nn.Softmax: "softmax", nn.Identity: "alias",
    nn.CrossEntropyLoss: "cross_entropy",
}


@dataclass(frozen=True)
class TensorInfo:
    """Shape and dtype of one traced tensor."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclass(eq=False)
class Node:
    """One op of the captured graph in a form independent of the tracer that produced it."""

    name: str
    op: str                                   # canonical op name, or input | param | buffer | const
    scope: tuple[tuple[str, str], ...]        # enclosing modules (path, class name), outermost first
    outs: tuple[TensorInfo, ...]
    args: list = field(default_factory=list)  # Node inputs in call order (params included)
    kwargs: dict = field(default_factory=dict)  # non-tensor attributes that change costs
    target: str = ""                          # parameter/buffer name for leaves
    requires_grad: bool = False               # gets a gradient (frozen parameters give none)
    # ... had every parameter been trainable: what the hidden stream is, apart from tables
    # and masks, however many parameters a model file freezes (the layer structure)
    on_grad_path: bool = False

    @property
    def out(self) -> TensorInfo | None:
        return self.outs[0] if self.outs else None


def _infos(value) -> tuple[TensorInfo, ...]:
    """The tensors in a traced value (FakeTensor, TensorMetadata or a nest of them)."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)) and not hasattr(value, "shape"):
        return tuple(i for v in value for i in _infos(v))
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or not isinstance(dtype, torch.dtype):
        return ()
    return (TensorInfo(tuple(int(d) for d in shape), dtype),)


def _class_name(cls) -> str:
    return cls.__name__ if isinstance(cls, type) else str(cls).rsplit(".", 1)[-1].rstrip("'>")


def _scope(fx_node, extra: tuple[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    stack = fx_node.meta.get("nn_module_stack") or {}
    scope = tuple((path, _class_name(cls)) for path, cls in stack.values())
    if extra and (not scope or scope[-1][0] != extra[0]):
        scope += (extra,)
    return scope


def _canonical(fx_node) -> str:
    target = fx_node.target
    if fx_node.op == "call_method":
        name = target
    elif isinstance(target, torch._ops.OpOverload):
        name = target._opname
    else:
        name = getattr(target, "__name__", str(target))
    return ALIASES.get(name, name)


class _Builder:
    """Turns fx nodes into Nodes, resolving params/buffers and grad requirements."""

    def __init__(self):
        self.nodes: list[Node] = []
        self.by_fx: dict = {}

    def add(self, node: Node, fx_node=None) -> Node:
        if node.op not in ("input", "param", "buffer", "const"):
            # metadata reads (x.dtype, x.shape) and integer/bool results carry no gradient
            floating = node.out is not None and node.out.dtype.is_floating_point
            node.requires_grad = floating and any(a.requires_grad for a in node.args if a.out is not None)
            node.on_grad_path = floating and any(a.on_grad_path for a in node.args if a.out is not None)
        elif node.op == "param":
            node.on_grad_path = True
        self.nodes.append(node)
        if fx_node is not None:
            self.by_fx[fx_node] = node
        return node

    def arg_nodes(self, fx_node) -> tuple[list[Node], dict]:
        """Tensor inputs of an fx node in call order, and its plain keyword values."""
        found: list[Node] = []

        def visit(a):
            if isinstance(a, torch.fx.Node):
                if a in self.by_fx:
                    found.append(self.by_fx[a])
            elif isinstance(a, (list, tuple)):
                for x in a:
                    visit(x)
            elif isinstance(a, dict):
                for x in a.values():
                    visit(x)
            elif isinstance(a, slice):
                visit((a.start, a.stop, a.step))

        visit(fx_node.args)
        visit(fx_node.kwargs)
        plain = {k: v for k, v in fx_node.kwargs.items()
                 if isinstance(v, (bool, int, float, str)) or v is None}
        return found, plain


def _attention_kwargs(fx_node, canonical: str) -> dict:
    """is_causal and whether a mask was given, for both the functional and the aten form."""
    if canonical != "attention":
        return {}
    args = list(fx_node.args)
    kw = dict(fx_node.kwargs)
    mask = kw.get("attn_mask", args[3] if len(args) > 3 else None)
    causal = kw.get("is_causal", args[5] if len(args) > 5 else False)
    return {"is_causal": bool(causal), "has_mask": isinstance(mask, torch.fx.Node)}


def from_fx(gm: torch.fx.GraphModule, root: nn.Module) -> list[Node]:
    """Normalize a symbolic_trace graph whose nodes carry _ShapeRecorder's shapes."""
    b = _Builder()
    params = dict(root.named_parameters(remove_duplicate=False))
    for n in gm.graph.nodes:
        outs = n.meta.get("ratc_outs", ())
        if n.op == "placeholder":
            b.add(Node(n.name, "input", (), outs, target=n.target), n)
        elif n.op == "get_attr":
            kind = "param" if n.target in params else "const"
            node = Node(n.name, kind, _scope(n), outs, target=n.target,
                        requires_grad=kind == "param" and params[n.target].requires_grad)
            b.add(node, n)
        elif n.op == "call_module":
            mod = gm.get_submodule(n.target)
            op = next((v for k, v in MODULE_OPS.items() if type(mod) is k), None)
            if op is None:    # export traces through it to aten ops instead
                raise TypeError(f"no cost formula for leaf module '{n.target}' ({type(mod).__name__})")
            args, kw = b.arg_nodes(n)
            for pname, p in mod.named_parameters(recurse=False):
                fqn = f"{n.target}.{pname}"
                args.append(b.add(Node(f"{n.name}_{pname}", "param", (), _infos(p),
                                       target=fqn, requires_grad=p.requires_grad)))
            if op == "embedding":
                args = [args[-1], args[0]]      # aten order: (weight, indices)
            b.add(Node(n.name, op, _scope(n, (n.target, type(mod).__name__)), outs, args, kw), n)
        elif n.op in ("call_function", "call_method"):
            canonical = _canonical(n)
            args, kw = b.arg_nodes(n)
            kw.update(_attention_kwargs(n, canonical))
            b.add(Node(n.name, canonical, _scope(n), outs, args, kw), n)
    return b.nodes


def from_export(ep) -> list[Node]:
    """Normalize a torch.export ExportedProgram (aten ops, FakeTensor 'val' metadata)."""
    b = _Builder()
    kind_names = {"PARAMETER": "param", "BUFFER": "buffer", "USER_INPUT": "input"}
    kinds = {spec.arg.name: (kind_names.get(spec.kind.name, "const"), spec.target or spec.arg.name)
             for spec in ep.graph_signature.input_specs}
    for n in ep.graph_module.graph.nodes:
        outs = _infos(n.meta.get("val"))
        if n.op == "placeholder":
            kind, target = kinds.get(n.name, ("input", n.name))
            trained = kind == "param" and getattr(ep.state_dict.get(target), "requires_grad", True)
            b.add(Node(n.name, kind, (), outs, target=target, requires_grad=trained), n)
        elif n.op == "get_attr":
            b.add(Node(n.name, "const", (), outs, target=str(n.target)), n)
        elif n.op == "call_function":
            canonical = "getitem" if n.target is operator.getitem else _canonical(n)
            args, kw = b.arg_nodes(n)
            kw.update(_attention_kwargs(n, canonical))
            b.add(Node(n.name, canonical, _scope(n), outs, args, kw), n)
    return b.nodes


class _ShapeRecorder(torch.fx.Interpreter):
    """Runs an fx graph (on meta tensors, normally) and keeps each node's output shapes."""

    def run_node(self, n):
        result = super().run_node(n)
        n.meta["ratc_outs"] = _infos(result)
        return result


def example_inputs(module: nn.Module, seq_len: int, batch: int = 1) -> dict[str, torch.Tensor]:
    """Token ids and labels for the protocol's forward(input_ids, labels), on the module's device."""
    first = next(iter(module.parameters()), None)
    device = first.device if first is not None else torch.device("meta")
    ids = torch.zeros(batch, seq_len, dtype=torch.long, device=device)
    return {"input_ids": ids, "labels": ids}


def capture(module: nn.Module, seq_len: int, method: str = "auto", batch: int = 1) -> tuple[list[Node], str]:
    """Trace module(input_ids, labels) and return its normalized ops and the tracer used."""
    inputs = example_inputs(module, seq_len, batch)
    errors = []
    if method in ("auto", "fx"):
        try:
            gm = torch.fx.symbolic_trace(module)
            with torch.no_grad():
                out = _ShapeRecorder(gm).run(*[inputs[p] for p in _placeholders(gm)])
            nodes = from_fx(gm, module)
        except Exception as exc:  # noqa: BLE001 - any tracer failure means "try export"
            errors.append(f"torch.fx.symbolic_trace: {type(exc).__name__}: {_first_line(exc)}")
        else:
            _check_loss(out)
            return nodes, "fx"
    if method in ("auto", "export"):
        try:
            with _quiet_torch_logs():
                ep = torch.export.export(module, (), inputs, strict=False)
            nodes = from_export(ep)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"torch.export: {type(exc).__name__}: {_first_line(exc)}")
        else:
            (output,) = [n for n in ep.graph_module.graph.nodes if n.op == "output"]
            _check_loss([a.meta.get("val") if isinstance(a, torch.fx.Node) else a
                         for a in torch.utils._pytree.tree_leaves(output.args)])
            return nodes, "export"
    if not errors:
        raise RatcError(f"unknown trace method {method!r} (expected auto, fx or export)")
    raise RatcError("cannot trace the model; " + "; ".join(errors))


def _check_loss(out) -> None:
    """The protocol's forward returns the training loss: a one-element tensor (first, for a
    Hugging Face model's output, whose logits follow)."""
    leaves = torch.utils._pytree.tree_leaves(out)
    if leaves and isinstance(leaves[0], torch.Tensor) and leaves[0].numel() == 1:
        return
    got = ", ".join(f"a tensor of shape {tuple(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
                    for t in leaves) or "nothing"
    raise RatcError(f"forward(input_ids, labels) must return the scalar training loss, got {got}")


@contextlib.contextmanager
def _quiet_torch_logs():
    """Silence torch while exporting: a failed export prints its partial graph to stderr."""
    logger = logging.getLogger("torch")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


def _placeholders(gm) -> list[str]:
    names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
    unknown = [n for n in names if n not in ("input_ids", "labels")]
    if unknown:
        raise TypeError(f"forward takes {names}, expected (input_ids, labels)")
    return names


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"

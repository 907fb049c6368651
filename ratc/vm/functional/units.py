"""Split a real PyTorch model into executable units: embedding (0), decoder layers (1..L), head (L+1).

The model is traced once with torch.fx; every node is assigned to the unit that computes
it (decoder layers from `nn_module_stack`, everything before the first layer to the
pre-unit, everything after the last layer to the post-unit). Each unit becomes its own
GraphModule whose inputs are the values it reads from earlier units or from the data
(`input_ids`, `labels`) and whose outputs are the values later units read. Each unit owns
one flat parameter vector (the object ZeRO shards); a parameter several units read (a tied
embedding and LM head) has a copy in each, at the end of its vector, and the units form a
tie group whose gradients the program's TieSum adds up.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
import torch.fx
from torch import nn

from ratc.errors import RatcError
from ratc.frontend.layers import find_layer_container

_METADATA_METHODS = frozenset({"size", "dim", "numel", "stride"})
DATA_INPUTS = ("input_ids", "labels")      # what the batch gives forward (ratc.vm.functional.data)


def _recomputed(attention, args, kwargs):
    """An attention call whose internals autograd does not keep: torch's non-reentrant
    checkpoint saves its operands (Q, K, V, mask) and re-runs it when the Backward needs them."""
    from torch.utils.checkpoint import checkpoint
    return checkpoint(attention, *args, use_reentrant=False, **kwargs)


def recomputed_attention(*args, **kwargs):
    """F.scaled_dot_product_attention, recomputed in backward (_recomputed)."""
    return _recomputed(torch.nn.functional.scaled_dot_product_attention, args, kwargs)


def recomputed_aten_attention(*args, **kwargs):
    """aten.scaled_dot_product_attention (a torch.export graph's), recomputed in backward."""
    return _recomputed(torch.ops.aten.scaled_dot_product_attention.default, args, kwargs)


# The attention calls a unit's graph may hold (what the frontend costs as its attention
# core), and what a selective unit calls instead.
ATTENTION_CALLS = {torch.nn.functional.scaled_dot_product_attention: recomputed_attention,
                   torch.ops.aten.scaled_dot_product_attention.default: recomputed_aten_attention}


@dataclass
class Unit:
    """One unit: its graph, the names of the values it reads and writes, and its parameters."""

    index: int
    name: str
    module: torch.fx.GraphModule
    inputs: list[str]                 # value names in call order (data placeholders included)
    outputs: list[str]                # value names in return order
    input_grad: list[bool]            # whether each input carries a gradient
    param_names: list[str]
    param_shapes: list[torch.Size]
    numel: int = 0
    offsets: list[int] = field(default_factory=list)
    trainable: list[bool] = field(default_factory=list)   # False = frozen (requires_grad=False)
    inplace: bool = True              # whether an op may write into an input (then it runs on copies)
    segments: tuple[int, ...] = ()    # (untied, tied) element counts when it holds tied copies
    _selective: torch.fx.GraphModule | None = field(default=None, repr=False, compare=False)

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """The unit's parameters as shaped views of one flat vector (no copies)."""
        return [flat[o:o + s.numel()].view(s) for s, o in zip(self.param_shapes, self.offsets)]

    def frozen_mask(self) -> torch.Tensor | None:
        """Per element of the flat vector, whether it is frozen; None when every parameter trains."""
        return self.mask_of([not t for t in self.trainable])

    def mask_of(self, chosen: list[bool]) -> torch.Tensor | None:
        """Per element of the flat vector, whether its parameter is among `chosen`; None if none is."""
        if not any(chosen):
            return None
        return torch.cat([torch.full((s.numel(),), c) for s, c in zip(self.param_shapes, chosen)])

    def flat_grad(self, grads) -> torch.Tensor:
        """Per-parameter gradients (None = zero) concatenated in the flat layout."""
        if not self.param_shapes:
            return torch.zeros(0)
        return torch.cat([g.reshape(-1) if g is not None else torch.zeros(s.numel())
                          for g, s in zip(grads, self.param_shapes)])

    def run(self, params: list[torch.Tensor], args: list, selective: bool = False) -> tuple:
        """Execute the unit with the given parameter tensors; always returns a tuple. With
        `selective`, autograd keeps none of its attention cores' internals (only their
        operands): the Backward recomputes them (selective recomputation)."""
        module = self.module if not selective else self.selective_module()
        out = torch.func.functional_call(module, dict(zip(self.param_names, params)), tuple(args))
        return out if isinstance(out, tuple) else (out,)

    def selective_module(self) -> torch.fx.GraphModule:
        """The unit's graph with every attention call under torch's non-reentrant checkpoint."""
        if self._selective is None:
            graph = torch.fx.Graph()
            out = graph.graph_copy(self.module.graph, {})
            graph.output(out)
            for node in graph.nodes:
                if node.op == "call_function" and node.target in ATTENTION_CALLS:
                    node.target = ATTENTION_CALLS[node.target]
            self._selective = torch.fx.GraphModule(self.module, graph)
        return self._selective


@dataclass
class UnitSet:
    """All units of a model in forward order, and the name of the loss value."""

    units: list[Unit]
    loss: str
    defaults: dict = field(default_factory=dict)    # placeholders of defaulted forward arguments -> default
    ties: list = field(default_factory=list)        # groups of unit indices sharing parameters

    def producer(self) -> dict[str, int]:
        """Value name -> index of the unit that computes it."""
        return {v: u.index for u in self.units for v in u.outputs}


def _layer_of(node, layer_paths: list[str]) -> int | None:
    stack = node.meta.get("nn_module_stack") or {}
    for path, _cls in stack.values():
        for i, lp in enumerate(layer_paths):
            if path == lp or path.startswith(lp + "."):
                return i
    return None


def _referenced_params(node, model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(qualified name, parameter) pairs a call_module/get_attr node touches."""
    if node.op == "call_module":
        sub = model.get_submodule(node.target)
        return [(f"{node.target}.{n}", p) for n, p in sub.named_parameters(remove_duplicate=False)]
    if node.op == "get_attr":
        obj = getattr(model.get_submodule(node.target.rpartition(".")[0]), node.target.rpartition(".")[2])
        return [(node.target, obj)] if isinstance(obj, nn.Parameter) else []
    return []


def _assign(graph: torch.fx.Graph, layer_paths: list[str]) -> dict:
    """fx node -> unit index; placeholders and get_attr get None (they belong to their users)."""
    nodes = list(graph.nodes)
    layer_idx = {n: _layer_of(n, layer_paths) for n in nodes}
    last_layer_pos = max((i for i, n in enumerate(nodes) if layer_idx[n] is not None), default=-1)
    if last_layer_pos < 0:
        raise RatcError("no traced op belongs to a decoder layer")
    post = len(layer_paths) + 1
    unit: dict = {}
    for pos, n in enumerate(nodes):
        if n.op in ("placeholder", "get_attr", "output"):
            unit[n] = None
            continue
        producers = [unit[a] for a in n.all_input_nodes if unit.get(a) is not None]
        if layer_idx[n] is not None:
            u = layer_idx[n] + 1
        elif pos > last_layer_pos:
            u = post
        else:
            u = max(producers, default=0)
        if any(p > u for p in producers):
            raise RatcError(f"op '{n.name}' of unit {u} reads a value of a later unit; "
                            "the model's layers must run in order")
        unit[n] = u
    return unit


def _requires_grad(graph: torch.fx.Graph, model: nn.Module) -> dict:
    """Which fx values depend on a trainable parameter (so carry a gradient)."""
    params = dict(model.named_parameters())
    grad: dict = {}
    for n in graph.nodes:
        if n.op == "placeholder":
            grad[n] = False
        elif n.op == "get_attr":
            grad[n] = n.target in params and params[n.target].requires_grad
        elif n.op == "call_module":
            grad[n] = any(p.requires_grad for p in model.get_submodule(n.target).parameters()) or \
                any(grad[a] for a in n.all_input_nodes)
        elif (n.op == "call_function" and n.target is getattr) or \
                (n.op == "call_method" and n.target in _METADATA_METHODS):
            grad[n] = False   # shape/dtype reads carry no gradient
        else:
            grad[n] = any(grad[a] for a in n.all_input_nodes)
        # An in-place op (x.add_(y), relu(x, inplace=True)) writes its result into its first
        # argument: from here on that value carries the result's gradient, for every reader.
        if _writes_in_place(n, model) and grad[n] and n.args and isinstance(n.args[0], torch.fx.Node):
            grad[n.args[0]] = True
    return grad


def _writes_in_place(n: torch.fx.Node, model: nn.Module) -> bool:
    """Whether the op writes into its first argument (x.add_(y), F.relu(x, inplace=True), nn.ReLU(inplace=True))."""
    if n.op == "call_method":
        return n.target.endswith("_") and not n.target.endswith("__")
    if n.op == "call_module":
        return getattr(model.get_submodule(n.target), "inplace", False) is True
    return n.op == "call_function" and n.kwargs.get("inplace") is True


def _check_supported(model: nn.Module) -> None:
    """Refuse what per-unit execution cannot reproduce exactly, naming the module."""
    from torch.nn.utils import parametrize

    for name, mod in model.named_modules():
        where = f"'{name}'" if name else "the model"
        if isinstance(mod, nn.Embedding) and mod.max_norm is not None:
            raise RatcError(f"{where}: nn.Embedding(max_norm=...) renormalizes its weight in place during "
                            "forward; ratc train updates parameters only in UpdateShard (drop max_norm)")
        if isinstance(mod, (nn.Embedding, nn.EmbeddingBag)) and mod.sparse:
            raise RatcError(f"{where}: sparse gradients (sparse=True) are not supported; AdamW takes dense ones")
        if isinstance(mod, nn.modules.dropout._DropoutNd) and mod.p > 0:
            raise RatcError(f"{where}: dropout p={mod.p}: checkpoint and FSR recompute a layer, and ratc train "
                            "does not replay the random state, so a recomputed mask would differ (use p=0)")
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            raise RatcError(f"{where}: {type(mod).__name__} normalizes over the batch: a micro-batch's statistics "
                            "are not the global batch's that PyTorch's reference step sees, and each "
                            "recomputation would update the running statistics again (use LayerNorm or RMSNorm)")
        if parametrize.is_parametrized(mod):
            raise RatcError(f"{where}: parametrized parameters (weight_norm, spectral_norm, ...) are not "
                            "supported; ratc trains plain nn.Parameters")


def split_model(model: nn.Module) -> UnitSet:
    """Trace `model(input_ids, labels) -> loss` and cut it into units."""
    _check_supported(model)
    _container, layer_paths = find_layer_container(model)
    # Forward arguments with a default that the batch does not give (attention_mask=None)
    # keep it, as the reference's model(input_ids=..., labels=...) call does.
    concrete = {name: p.default for name, p in inspect.signature(model.forward).parameters.items()
                if p.default is not inspect.Parameter.empty and name not in DATA_INPUTS}
    try:
        traced = torch.fx.symbolic_trace(model, concrete_args=concrete or None)
    except Exception as exc:  # noqa: BLE001 - any tracing failure is the model's
        raise RatcError(f"torch.fx could not trace the model for the functional executor: {exc}") from None
    graph = traced.graph
    unit_of = _assign(graph, layer_paths)
    grad = _requires_grad(graph, model)
    n_units = len(layer_paths) + 2
    output_node = next(n for n in graph.nodes if n.op == "output")
    loss_node = output_node.args[0]
    if not isinstance(loss_node, torch.fx.Node) or unit_of.get(loss_node) != n_units - 1:
        raise RatcError("the model's forward must return one scalar loss computed after the last layer")

    owner, holders = _parameter_holders(graph, model, unit_of, grad)
    ties = _tie_groups(holders)
    tie_key = {pid: owner[pid][0] for pid, us in holders.items() if len(us) > 1}
    order = {n: i for i, n in enumerate(graph.nodes)}
    units = [_unit(model, graph, u, unit_of, order, grad, loss_node, tie_key,
                   "embedding" if u == 0 else "head" if u == n_units - 1 else layer_paths[u - 1])
             for u in range(n_units)]
    # (fx keeps a placeholder, holding the default, for each concrete argument; a unit reading it gets that)
    defaults = {n.name: n.args[0] for n in graph.nodes if n.op == "placeholder" and n.args}
    return UnitSet(units=units, loss=loss_node.name, defaults=defaults, ties=ties)


def _parameter_holders(graph, model, unit_of: dict, grad: dict) -> tuple[dict, dict]:
    """({parameter identity: (first name, unit)}, {parameter identity: units reading it});
    a unit reading another's parameter only for its shape is refused."""
    owner: dict[int, tuple[str, int]] = {}
    holders: dict[int, set] = {}
    for n in graph.nodes:
        for name, param in _referenced_params(n, model):
            users = {unit_of[u] for u in n.users} if n.op == "get_attr" else {unit_of[n]}
            for u in users:
                first, v = owner.setdefault(id(param), (name, u))
                holders.setdefault(id(param), set()).add(u)
                reads = [x for x in n.users if unit_of[x] == u] if n.op == "get_attr" else []
                if v != u and reads and all(not grad.get(x, True) for x in reads):
                    raise RatcError(f"parameter '{first}' of unit {v} is read by unit {u} (as '{name}') only for "
                                    "its shape; use the size from the model's config instead")
    return owner, holders


def _unit(model, graph, u: int, unit_of: dict, order: dict, grad: dict, loss_node, tie_key: dict,
          unit_name: str) -> Unit:
    """Unit u as its own GraphModule: the nodes assigned to it, reading what earlier units
    computed (placeholders) and returning what later ones read."""
    members = [n for n in graph.nodes if unit_of.get(n) == u]
    member_set = set(members)
    ext = []
    for n in members:
        for a in n.all_input_nodes:
            if a.op == "get_attr" or a in member_set or a in ext:
                continue
            ext.append(a)
    ext.sort(key=order.__getitem__)
    later = [n for n in members
             if any(unit_of.get(user) is not None and unit_of[user] > u for user in n.users)
             or n is loss_node]
    g = torch.fx.Graph()
    env = {}
    for a in ext:
        env[a] = g.placeholder(a.name)
    for n in members:
        for a in n.all_input_nodes:
            if a.op == "get_attr" and a not in env:
                env[a] = g.node_copy(a, env.__getitem__)
        env[n] = g.node_copy(n, env.__getitem__)
    g.output(tuple(env[n] for n in later))
    gm = torch.fx.GraphModule(model, g)
    # a tied parameter's copy goes at the end, the copies in one order in every unit
    named = sorted(gm.named_parameters(), key=lambda np_: (id(np_[1]) in tie_key, tie_key.get(id(np_[1]), "")))
    names = [name for name, _ in named]
    shapes = [p.shape for _, p in named]
    trainable = [p.requires_grad for _, p in named]
    tied = sum(p.numel() for _, p in named if id(p) in tie_key)
    offsets, total = [], 0
    for s in shapes:
        offsets.append(total)
        total += s.numel()
    return Unit(index=u, name=unit_name, module=gm,
                inputs=[a.name for a in ext], outputs=[n.name for n in later],
                input_grad=[grad[a] for a in ext],
                param_names=names, param_shapes=shapes, numel=total, offsets=offsets,
                trainable=trainable, inplace=any(_writes_in_place(n, model) for n in members),
                segments=(total - tied, tied) if tied else ())


def _tie_groups(holders: dict) -> list[list[int]]:
    """The groups of units sharing parameters (one group per set of units), each unit in one."""
    groups = sorted({tuple(sorted(us)) for us in holders.values() if len(us) > 1})
    seen: set = set()
    for g in groups:
        if seen & set(g):
            raise RatcError(f"units {list(g)} share a parameter, and one of them shares another with other units; "
                            "ratc sums tied gradients over one group of units per unit")
        seen |= set(g)
    return [list(g) for g in groups]


def flat_params(unit: Unit, model: nn.Module) -> torch.Tensor:
    """The model's current values of a unit's parameters as one flat float tensor."""
    params = dict(model.named_parameters(remove_duplicate=False))     # a tied parameter under each name
    if not unit.param_names:
        return torch.zeros(0)
    return torch.cat([params[n].detach().reshape(-1) for n in unit.param_names]).clone()

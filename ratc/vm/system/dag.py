"""The simulated program's task DAG as a networkx graph, written as GraphML or DOT."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ratc.errors import RatcError
from ratc.gcpause import gc_paused
from ratc.vm.system.engine import Timeline

if TYPE_CHECKING:       # (networkx is imported where a graph is built: `ratc run` without --dag needs none)
    import networkx as nx

# suffix -> format of `ratc run --dag FILE`
DAG_FORMATS = {".graphml": "graphml", ".dot": "dot", ".gv": "dot"}


def resource_label(resource: tuple, symmetric: bool) -> str:
    """'s0.compute' (one replica stands for all) or 's0r1.compute' (explicit replicas)."""
    stage, replica, name = resource
    return f"s{stage}.{name}" if symmetric else f"s{stage}r{replica}.{name}"


def task_graph(tl: Timeline) -> nx.DiGraph:
    """Nodes: task indices with the task's attributes and simulated times (cycles); edges:
    dependencies (a task -> the tasks that wait for it). Attribute values are scalars, so
    the graph writes as GraphML as it is."""
    import networkx as nx

    prog = tl.program
    g = nx.DiGraph(clock_hz=float(prog.clock), stages=prog.stages, replicas=prog.replicas,
                   steps=prog.steps, symmetric=prog.symmetric)
    start, end = tl.start, tl.end
    labels: dict = {}           # resources tuple -> its label (tasks share a few hundred tuples)
    for rs in {t.resources for t in prog.tasks}:
        labels[rs] = " ".join(resource_label(r, prog.symmetric) for r in rs)
    # (many small long-lived dicts: cyclic GC would re-scan them all and free nothing)
    with gc_paused():
        g.add_nodes_from((i, {"name": t.name, "kind": t.kind, "stage": t.stage, "replica": t.replica,
                              "step": t.step, "layer": t.layer, "micro_batch": t.micro_batch,
                              "resources": labels[t.resources], "duration": t.duration,
                              "start": start[i], "end": end[i]}) for i, t in enumerate(prog.tasks))
        # (a dependency named twice is one edge)
        g.add_edges_from((d, i) for i, t in enumerate(prog.tasks) for d in t.deps)
    return g


def dag_format(path: str | Path) -> str:
    """The format a --dag path asks for by its suffix; RatcError for any other suffix."""
    form = DAG_FORMATS.get(Path(path).suffix.lower())
    if form is None:
        raise RatcError(f"--dag {path}: unknown format; name the file *.graphml (GraphML) or *.dot / *.gv (DOT)")
    return form


def dag_text(g: nx.DiGraph, form: str) -> str:
    """The graph as GraphML or DOT text (byte-identical for the same graph)."""
    import networkx as nx

    with gc_paused():
        return "\n".join(nx.generate_graphml(g)) + "\n" if form == "graphml" else dot_text(g)


def _dot_value(v) -> str:
    """A DOT attribute value: integers bare, everything else a quoted, escaped string (a
    float's repr may have an exponent, which a DOT numeral cannot)."""
    if isinstance(v, bool):
        return f'"{str(v).lower()}"'
    if isinstance(v, int):
        return str(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _dot_attrs(attrs: dict) -> str:
    return ", ".join(f"{k}={_dot_value(v)}" for k, v in attrs.items())


def dot_text(g: nx.DiGraph) -> str:
    """DOT of a task graph: one line per node (labelled with its task name) and per edge,
    in node order (networkx's pydot and pygraphviz writers need packages ratc does not use)."""
    lines = ["digraph tasks {", f"  graph [{_dot_attrs(g.graph)}];", "  node [shape=box];"]
    for n, attrs in g.nodes(data=True):
        lines.append(f"  {n} [label={_dot_value(attrs.get('name', n))}, {_dot_attrs(attrs)}];")
    for u, v in g.edges():
        lines.append(f"  {u} -> {v};")
    lines.append("}")
    return "\n".join(lines) + "\n"

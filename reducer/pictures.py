"""The two pictures of a bundle: the minimal graph with the failing tensors in red, and the reduction
(nodes left against checks run). matplotlib's Agg backend renders them without a display."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import onnx

FAIL_COLOUR = "#d62728"
NODE_COLOUR = "#dbe8f6"
TENSOR_COLOUR = "#f2f2f2"
READABLE_NODES = 50  # up to this many boxes, full-size labels; beyond, smaller ones
LABELLED_NODES = 400  # beyond this, op types only


def _figure(size: tuple[float, float]):
    """A figure on the Agg canvas, without pyplot: no backend machinery to import, no global state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def _short(text: str, limit: int = 32) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def _shape(shapes: dict[str, list], name: str) -> str:
    shape = shapes.get(name)
    return "" if shape is None else "[" + ",".join(str(d) for d in shape) + "]"


def graph_of(model: onnx.ModelProto) -> nx.DiGraph:
    """Operators, graph inputs and graph outputs as boxes; an edge for every tensor passed between them."""
    graph = nx.DiGraph()
    initializers = {t.name for t in model.graph.initializer}
    producer = {}
    for info in model.graph.input:
        if info.name not in initializers:
            graph.add_node(f"in:{info.name}", kind="input", tensor=info.name)
            producer[info.name] = f"in:{info.name}"
    for index, node in enumerate(model.graph.node):
        key = f"op:{index}"
        graph.add_node(key, kind="op", op_type=node.op_type, name=node.name or f"#{index}", writes=list(node.output))
        for name in node.input:
            if name in producer:
                graph.add_edge(producer[name], key, tensor=name)
        for name in node.output:
            producer[name] = key
    for info in model.graph.output:
        graph.add_node(f"out:{info.name}", kind="output", tensor=info.name)
        if info.name in producer:
            graph.add_edge(producer[info.name], f"out:{info.name}", tensor=info.name)
    return graph


def draw_graph(model: onnx.ModelProto, failing: list[str], shapes: dict[str, list], path: Path) -> None:
    """Top to bottom, one row per topological generation; failing outputs and their producers in red."""
    graph = graph_of(model)
    for layer, keys in enumerate(nx.topological_generations(graph)):
        for key in keys:
            graph.nodes[key]["layer"] = layer
    layers = max((d["layer"] for _, d in graph.nodes(data=True)), default=0) + 1
    widest = max((sum(1 for _, d in graph.nodes(data=True) if d["layer"] == n) for n in range(layers)), default=1)
    count = graph.number_of_nodes()
    font = 9.0 if count <= READABLE_NODES else max(3.0, 9.0 * (READABLE_NODES / count) ** 0.5)
    width = min(60.0, max(6.0, 2.6 * widest * font / 9.0))
    height = min(120.0, max(3.0, 1.1 * layers * font / 9.0))
    positions = {key: (0.0, 0.0) for key in graph}
    if count > 1:  # each row centred; rows top to bottom, so that data flows downwards
        spread = nx.multipartite_layout(graph, subset_key="layer", align="horizontal", scale=max(1.0, widest / 2))
        positions = {key: (x, -float(graph.nodes[key]["layer"])) for key, (x, _) in spread.items()}
    failing = set(failing)
    red_ops = {key for key, d in graph.nodes(data=True) if d["kind"] == "op" and failing & set(d["writes"])}

    figure, axes = _figure((width, height))
    axes.set_axis_off()
    edge_colours = [FAIL_COLOUR if d["tensor"] in failing else "#555555" for *_, d in graph.edges(data=True)]
    nx.draw_networkx_edges(graph, positions, ax=axes, edge_color=edge_colours, arrows=True, arrowsize=10,
                           node_size=1800 * font / 9.0, width=1.0)
    for key, data in graph.nodes(data=True):
        x, y = positions[key]
        if data["kind"] == "op":
            label = data["op_type"] if count > LABELLED_NODES else f"{data['op_type']}\n{_short(data['name'])}"
            face, edge, weight = NODE_COLOUR, (FAIL_COLOUR if key in red_ops else "#1f4e79"), "bold"
            line = 2.5 if key in red_ops else 1.0
        else:
            tensor = data["tensor"]
            label = f"{_short(tensor)}\n{_shape(shapes, tensor)}"
            if count > LABELLED_NODES:
                label = "input" if data["kind"] == "input" else "output"
            bad = tensor in failing
            face, edge, weight, line = (FAIL_COLOUR if bad else TENSOR_COLOUR), (FAIL_COLOUR if bad else "#888888"), \
                "normal", 1.0
        colour = "white" if face == FAIL_COLOUR else "black"
        axes.text(x, y, label, ha="center", va="center", fontsize=font, color=colour, fontweight=weight,
                  bbox={"boxstyle": "round,pad=0.4" if data["kind"] == "op" else "square,pad=0.3",
                        "facecolor": face, "edgecolor": edge, "linewidth": line})
    xs = [p[0] for p in positions.values()] or [0.0]
    ys = [p[1] for p in positions.values()] or [0.0]
    axes.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    axes.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ops = sum(1 for _, d in graph.nodes(data=True) if d["kind"] == "op")
    axes.set_title(f"minimal model: {ops} node{'s' * (ops != 1)}; failing tensors in red", fontsize=10)
    figure.savefig(path, format="png", bbox_inches="tight")


def draw_reduction(history: list[dict], nodes_before: int, nodes_after: int, checks: int, path: Path) -> None:
    """Nodes left against checks run, one step per accepted reduction, labelled with its strategy."""
    xs, ys = [0], [nodes_before]
    for step in history:
        xs.append(step["checks"])
        ys.append(step["nodes"])
    xs.append(max(checks, xs[-1]))
    ys.append(nodes_after)
    figure, axes = _figure((6.4, 3.6))
    axes.step(xs, ys, where="post", color="#1f77b4", linewidth=2)
    axes.plot(xs[1:-1], ys[1:-1], "o", color="#1f77b4")
    named = None
    for step in history:  # the strategy's name where it takes over
        if step.get("strategy") != named:
            named = step.get("strategy")
            axes.annotate(named or "", (step["checks"], step["nodes"]), textcoords="offset points", xytext=(4, 4),
                          fontsize=7, color="#444444")
    if nodes_before > 20 * max(1, nodes_after):
        axes.set_yscale("log")
    axes.set_xlabel("checks run")
    axes.set_ylabel("nodes left")
    axes.set_title(f"reduction: {nodes_before} -> {nodes_after} nodes in {checks} checks", fontsize=10)
    axes.grid(True, alpha=0.3)
    figure.savefig(path, format="png", bbox_inches="tight")

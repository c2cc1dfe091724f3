"""The two pictures of a bundle: the minimal graph with the failing tensors in red, and the reduction
(nodes left against checks run). Drawn with Pillow: boxes, lines and labels need no plotting library
(matplotlib took about 1 s a bundle to import and render, most of a small reduction's wall time)."""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import networkx as nx
import onnx
from PIL import Image, ImageDraw, ImageFont

FAIL_COLOUR = "#d62728"
NODE_COLOUR = "#dbe8f6"
NODE_EDGE = "#1f4e79"
TENSOR_COLOUR = "#f2f2f2"
TENSOR_EDGE = "#888888"
LINE_COLOUR = "#1f77b4"
READABLE_NODES = 50  # up to this many boxes, full-size labels; beyond, smaller ones
LABELLED_NODES = 400  # beyond this, op types only
FONT_PX = 15
MIN_FONT_PX = 5
MAX_SIDE = 8000  # pixels: a graph too large to draw readably is drawn smaller, then cut to this


@cache
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)  # Pillow's own scalable font: no font files needed


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


def _label(data: dict, shapes: dict[str, list], count: int) -> str:
    if data["kind"] == "op":
        return data["op_type"] if count > LABELLED_NODES else f"{data['op_type']}\n{_short(data['name'])}"
    if count > LABELLED_NODES:
        return data["kind"]
    return f"{_short(data['tensor'])}\n{_shape(shapes, data['tensor'])}".strip()


def _rows(graph: nx.DiGraph) -> list[list[str]]:
    """One row per topological generation, each ordered by where its predecessors sit (fewer crossings)."""
    rows: list[list[str]] = []
    place: dict[str, float] = {}
    for generation in nx.topological_generations(graph):
        def barycentre(key: str) -> float:
            above = [place[p] for p in graph.predecessors(key) if p in place]
            return sum(above) / len(above) if above else math.inf

        row = sorted(generation, key=lambda key: (barycentre(key), key))
        for position, key in enumerate(row):
            place[key] = (position + 0.5) / len(row)
        rows.append(row)
    return rows


def _layout(graph, rows, labels, size: int):
    """Box of every node (left, top, right, bottom) and the canvas size, for labels in `size` px."""
    font, pad, gap_x, gap_y = _font(size), max(2, size // 2), size * 2, size * 3
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    extent = {}
    for key in graph:
        left, top, right, bottom = measure.multiline_textbbox((0, 0), labels[key], font=font, spacing=2,
                                                              align="center")
        extent[key] = (right - left + 2 * pad, bottom - top + 2 * pad)
    title_height = size * 3
    widths = [sum(extent[k][0] for k in row) + gap_x * (len(row) - 1) for row in rows]
    width = max(widths, default=0) + 2 * gap_x
    boxes, y = {}, title_height
    for row, row_width in zip(rows, widths, strict=True):
        height = max(extent[k][1] for k in row)
        x = (width - row_width) / 2
        for key in row:
            w, h = extent[key]
            boxes[key] = (x, y + (height - h) / 2, x + w, y + (height + h) / 2)
            x += w + gap_x
        y += height + gap_y
    return boxes, (int(width), int(y - gap_y + size * 2))


def _arrow(draw: ImageDraw.ImageDraw, start, end, colour: str, width: int, head: float) -> None:
    draw.line([start, end], fill=colour, width=width)
    angle = math.atan2(end[1] - start[1], end[0] - start[0])
    left = (end[0] - head * math.cos(angle - 0.4), end[1] - head * math.sin(angle - 0.4))
    right = (end[0] - head * math.cos(angle + 0.4), end[1] - head * math.sin(angle + 0.4))
    draw.polygon([end, left, right], fill=colour)


def draw_graph(model: onnx.ModelProto, failing: list[str], shapes: dict[str, list], path: Path) -> None:
    """Top to bottom, one row per topological generation; failing outputs and their producers in red."""
    graph = graph_of(model)
    rows = _rows(graph)
    count = graph.number_of_nodes()
    labels = {key: _label(data, shapes, count) for key, data in graph.nodes(data=True)}
    size = FONT_PX if count <= READABLE_NODES else max(MIN_FONT_PX, int(FONT_PX * (READABLE_NODES / count) ** 0.5))
    boxes, canvas = _layout(graph, rows, labels, size)
    if max(canvas) > MAX_SIDE:  # the layout scales with the font: shrink it to fit
        size = max(MIN_FONT_PX, int(size * MAX_SIDE / max(canvas)))
        boxes, canvas = _layout(graph, rows, labels, size)
    cut = max(canvas) > MAX_SIDE
    ops = sum(1 for _, d in graph.nodes(data=True) if d["kind"] == "op")
    title = f"minimal model: {ops} node{'s' * (ops != 1)}; failing tensors in red" + (" (cut to fit)" if cut else "")
    title_font = _font(max(size, 12))
    # wide enough for the title (a small graph is narrower than it), the graph centred in the extra width
    width = min(MAX_SIDE, max(200, canvas[0], int(title_font.getlength(title)) + 2 * max(size, 12)))
    shift = max(0.0, (width - canvas[0]) / 2)
    boxes = {key: (left + shift, top, right + shift, bottom) for key, (left, top, right, bottom) in boxes.items()}
    canvas = (width, max(60, min(canvas[1], MAX_SIDE)))
    image = Image.new("RGB", canvas, "white")
    draw = ImageDraw.Draw(image)
    failing_set = set(failing)
    font = _font(size)

    for source, target, data in graph.edges(data=True):
        bad = data["tensor"] in failing_set
        start = ((boxes[source][0] + boxes[source][2]) / 2, boxes[source][3])
        end = ((boxes[target][0] + boxes[target][2]) / 2, boxes[target][1])
        _arrow(draw, start, end, FAIL_COLOUR if bad else "#555555", 2 if bad else 1, max(4.0, size * 0.6))
    for key, data in graph.nodes(data=True):
        if data["kind"] == "op":
            red = bool(failing_set & set(data["writes"]))
            draw.rounded_rectangle(boxes[key], radius=max(2, size // 3), fill=NODE_COLOUR,
                                   outline=FAIL_COLOUR if red else NODE_EDGE, width=3 if red else 1)
            text_colour = "black"
        else:
            bad = data["tensor"] in failing_set
            draw.rectangle(boxes[key], fill=FAIL_COLOUR if bad else TENSOR_COLOUR,
                           outline=FAIL_COLOUR if bad else TENSOR_EDGE)
            text_colour = "white" if bad else "black"
        left, top, right, bottom = boxes[key]
        draw.multiline_text(((left + right) / 2, (top + bottom) / 2), labels[key], fill=text_colour, font=font,
                            anchor="mm", spacing=2, align="center")
    draw.text((canvas[0] / 2, size * 1.5), title, fill="black", font=title_font, anchor="mm")
    image.save(path, format="PNG", optimize=False)


def _nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    raw = max((high - low) / count, 1e-12)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    return [first + i * step for i in range(int(math.ceil((high - first) / step)) + 1)]


def _tick_text(value: float) -> str:
    return f"{value:g}" if abs(value) < 1e6 else f"{value:.0e}"


def draw_reduction(history: list[dict], nodes_before: int, nodes_after: int, checks: int, path: Path) -> None:
    """Nodes left against checks run, one step per accepted reduction, labelled with its strategy."""
    xs, ys = [0], [nodes_before]
    for step in history:
        xs.append(step["checks"])
        ys.append(step["nodes"])
    xs.append(max(checks, xs[-1]))
    ys.append(nodes_after)
    width, height, left, right, top, bottom = 960, 540, 90, 30, 56, 70
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    font, small = _font(16), _font(12)

    x_ticks = [t for t in _nice_ticks(0, max(xs[-1], 1)) if t == int(t)] or [0, 1]
    x_high = max(x_ticks[-1], 1)
    log = nodes_before > 20 * max(1, nodes_after)
    if log:
        y_low, y_high = 0, math.ceil(math.log10(max(ys + [1])) + 1e-9) or 1
        y_ticks = [10.0**p for p in range(y_low, y_high + 1)]
    else:
        y_ticks = _nice_ticks(0, max(ys + [1]))
    y_ticks_low, y_ticks_high = y_ticks[0], y_ticks[-1]

    def to_x(value: float) -> float:
        return left + (width - left - right) * value / x_high

    def to_y(value: float) -> float:
        if log:
            share = (math.log10(max(value, 1)) - math.log10(y_ticks_low)) / (
                math.log10(y_ticks_high) - math.log10(y_ticks_low))
        else:
            share = (value - y_ticks_low) / max(y_ticks_high - y_ticks_low, 1e-12)
        return height - bottom - (height - top - bottom) * share

    for tick in x_ticks:
        draw.line([(to_x(tick), top), (to_x(tick), height - bottom)], fill="#e6e6e6")
        draw.text((to_x(tick), height - bottom + 6), _tick_text(tick), fill="black", font=small, anchor="mt")
    for tick in y_ticks:
        draw.line([(left, to_y(tick)), (width - right, to_y(tick))], fill="#e6e6e6")
        draw.text((left - 6, to_y(tick)), _tick_text(tick), fill="black", font=small, anchor="rm")
    draw.rectangle([left, top, width - right, height - bottom], outline="black")

    points = []
    for i in range(len(xs)):
        if i:
            points.append((to_x(xs[i]), to_y(ys[i - 1])))
        points.append((to_x(xs[i]), to_y(ys[i])))
    draw.line(points, fill=LINE_COLOUR, width=3, joint="curve")
    for x, y in zip(xs[1:-1], ys[1:-1], strict=True):
        draw.ellipse([to_x(x) - 4, to_y(y) - 4, to_x(x) + 4, to_y(y) + 4], fill=LINE_COLOUR)
    named = None
    for step in history:  # the strategy's name where it takes over
        if step.get("strategy") != named:
            named = step.get("strategy")
            x, near_right = to_x(step["checks"]), to_x(step["checks"]) > width - right - 120
            draw.text((x - 6 if near_right else x + 6, to_y(step["nodes"]) - 6), named or "", fill="#444444",
                      font=small, anchor="rb" if near_right else "lb")

    draw.text(((left + width - right) / 2, height - 22), "checks run", fill="black", font=font, anchor="mm")
    label = Image.new("RGB", (200, 24), "white")
    ImageDraw.Draw(label).text((100, 12), "nodes left" + (" (log)" if log else ""), fill="black", font=font,
                               anchor="mm")
    image.paste(label.rotate(90, expand=True), (8, int((top + height - bottom) / 2 - 100)))
    draw.text((width / 2, 26), f"reduction: {nodes_before} -> {nodes_after} nodes in {checks} checks",
              fill="black", font=font, anchor="mm")
    image.save(path, format="PNG")

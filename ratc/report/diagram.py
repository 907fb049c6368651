"""The pipeline diagram (paper Fig. 6): each stage's tasks over time, one row per lane."""

from __future__ import annotations

from dataclasses import dataclass

from ratc.lifecycle.actions import extend, try_parse
from ratc.report.data import LANES, PipelineData
from ratc.report.style import DPI, KIND_COLOR, KIND_NAME, TAIL_COLOR, save, time_unit

ROW_INCHES = 0.24
MAX_HEIGHT_INCHES = 60.0
LABEL_CHAR_PX = 6.0       # width of one label character at the label font size
MAX_LABELS = 4000         # beyond this the boxes alone are readable, text is not
MAX_NAMED_ROWS = 80       # more rows than this: name stages, not lanes
EDGE_MIN_PX = 4.0         # boxes narrower than this are drawn without an outline
RIGHT = 0.98              # the time axis ends here (fraction of the figure width)
LEFT_INCHES = 1.0         # room for the lane names
TOP_INCHES = 0.75         # legend (two rows) and title
BOTTOM_INCHES = 0.55      # time axis and its label


@dataclass(frozen=True)
class Row:
    """One horizontal row of the diagram: a lane of a stage (or a sub-row where tasks overlap)."""

    stage: int
    lane: str
    sub: int
    intervals: tuple


def layout(data: PipelineData) -> list:
    """Rows top to bottom: stage 0 first, its lanes in LANES order; a lane whose tasks overlap
    in time (tasks of one kind on different resources) is split greedily into sub-rows so
    no two boxes of a row overlap."""
    groups: dict = {}
    for iv in data.intervals:
        groups.setdefault((iv.stage, LANES.index(iv.lane)), []).append(iv)
    rows = []
    for (stage, lane), tasks in sorted(groups.items()):
        tasks.sort(key=lambda iv: (iv.start, iv.end, iv.label))
        subs: list = []
        for iv in tasks:
            for sub in subs:
                if sub[-1].end <= iv.start:
                    sub.append(iv)
                    break
            else:
                subs.append([iv])
        rows += [Row(stage, LANES[lane], k, tuple(sub)) for k, sub in enumerate(subs)]
    return rows


def _label_runs(row: Row) -> list:
    """(label, start, end) of consecutive boxes of one task: one label (a task split into
    parts), or consecutive layers of one task, labelled with their range ('F3@1-8')."""
    runs = []           # [label, start, end, the run's Action or None]
    for iv in row.intervals:
        a = try_parse(f"{row.stage}{iv.label}")
        grown = extend(runs[-1][3], a) if runs and runs[-1][3] is not None and a is not None else None
        if grown is not None:
            runs[-1][0], runs[-1][2], runs[-1][3] = str(grown)[len(str(row.stage)):], iv.end, grown
        elif runs and runs[-1][0] == iv.label:
            runs[-1][2] = iv.end
        else:
            runs.append([iv.label, iv.start, iv.end, a])
    return [run[:3] for run in runs]


def figure(data: PipelineData, width: float = 14.0):
    """The diagram as a matplotlib Figure (Agg-compatible; no pyplot state)."""
    from matplotlib.collections import PolyCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = layout(data)
    t0 = min([iv.start for iv in data.intervals] + [data.step_start])
    t1 = max([iv.end for iv in data.intervals] + [data.step_end, t0 + 1e-9])
    unit, scale = time_unit(t1 - t0)
    height = min(MAX_HEIGHT_INCHES, TOP_INCHES + BOTTOM_INCHES + ROW_INCHES * max(len(rows), 1))
    fig = Figure(figsize=(width, height))
    left = LEFT_INCHES / width
    ax = fig.add_axes((left, BOTTOM_INCHES / height, RIGHT - left, 1 - (TOP_INCHES + BOTTOM_INCHES) / height))
    n = len(rows)
    y_of = {id(r): n - 1 - k for k, r in enumerate(rows)}
    # A white outline separates adjacent boxes, but would swallow boxes narrower than it.
    min_edged = EDGE_MIN_PX * (t1 - t0) / _axes_px(width)
    # One collection per (kind, outlined): per-row artists make large diagrams slow to draw.
    boxes: dict = {}
    for r in rows:
        lo, hi = y_of[id(r)] + 0.1, y_of[id(r)] + 0.9
        for iv in r.intervals:
            a, b = (iv.start - t0) / scale, (iv.end - t0) / scale
            boxes.setdefault((iv.kind, iv.end - iv.start >= min_edged), []).append(
                ((a, lo), (a, hi), (b, hi), (b, lo)))
    for (kind, edged), verts in sorted(boxes.items()):
        ax.add_collection(PolyCollection(verts, facecolors=KIND_COLOR[kind], edgecolors="white" if edged else "none",
                                         linewidths=0.4 if edged else 0), autolim=False)
    kinds = {kind for kind, _ in boxes}
    ax.set_xlim(0, (t1 - t0) / scale)
    ax.set_ylim(0, max(n, 1))
    _labels(ax, rows, y_of, t0, scale, width)
    _row_names(ax, rows, y_of)
    for k, r in enumerate(rows[1:], 1):
        if r.stage != rows[k - 1].stage:
            ax.axhline(y_of[id(rows[k - 1])], color="#444444", linewidth=0.6)
    tail = (data.tail_start - t0) / scale, (data.step_end - t0) / scale
    handles = [Patch(facecolor=KIND_COLOR[k], label=KIND_NAME[k]) for k in KIND_COLOR if k in kinds]
    if data.tail > 0:
        ax.axvspan(*tail, facecolor=TAIL_COLOR, alpha=0.12, hatch="//", edgecolor=TAIL_COLOR, linewidth=0)
        handles.append(Patch(facecolor=TAIL_COLOR, alpha=0.25, hatch="//",
                             label=f"exposed tail {data.tail / scale:.3g} {unit}"))
    ax.axvline(tail[1], color=TAIL_COLOR, linewidth=0.8, linestyle="--")
    if data.step_start > t0:
        ax.axvline((data.step_start - t0) / scale, color="#444444", linewidth=0.8, linestyle=":")
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(data.title, fontsize=10, pad=4)
    if handles:
        fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=min(len(handles), 5),
                   fontsize=7, frameon=False)
    return fig


def _axes_px(width: float) -> float:
    """Pixels of the time axis in a figure `width` inches wide."""
    return (width * RIGHT - LEFT_INCHES) * DPI


def _row_names(ax, rows, y_of):
    """Name each lane ('S0 F/B'), or only each stage when there are too many rows to read."""
    if len(rows) <= MAX_NAMED_ROWS:
        named = [(y_of[id(r)] + 0.5, f"S{r.stage} {r.lane}") for r in rows if r.sub == 0]
    else:
        spans: dict = {}
        for r in rows:
            y = y_of[id(r)]
            lo, hi = spans.get(r.stage, (y, y))
            spans[r.stage] = (min(lo, y), max(hi, y))
        named = [((lo + hi + 1) / 2, f"S{s}") for s, (lo, hi) in spans.items()]
    # Plain texts: a tick per row costs several artists each and dominates large diagrams.
    ax.set_yticks([])
    for y, text in named:
        ax.text(-0.005, y, text, transform=ax.get_yaxis_transform(), ha="right", va="center", fontsize=7)


def _labels(ax, rows, y_of, t0, scale, width):
    """Write each run's label inside its box when the box is wide enough to hold it."""
    lo, hi = ax.get_xlim()
    px_per_unit = _axes_px(width) / (hi - lo) if hi > lo else 0.0
    placed = 0
    for r in rows:
        for label, start, end in _label_runs(r):
            w = (end - start) / scale * px_per_unit
            if w < LABEL_CHAR_PX * len(label) + 2 or placed >= MAX_LABELS:
                continue
            ax.text(((start + end) / 2 - t0) / scale, y_of[id(r)] + 0.5, label, ha="center", va="center",
                    fontsize=6, color="white", clip_on=True)
            placed += 1


def render(data: PipelineData, fmt: str = "png", width: float = 14.0) -> bytes:
    """The diagram as PNG or SVG bytes."""
    return save(figure(data, width), fmt)

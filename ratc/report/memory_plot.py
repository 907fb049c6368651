"""Memory pictures: live bytes per stage over time by lifetime tier, and the Eq. 9 breakdown."""

from __future__ import annotations

import math

from ratc.report.data import EQ9_GROUPS, TIERS, MemoryData
from ratc.report.style import BUDGET_COLOR, GROUP_COLOR, TIER_COLOR, save, time_unit
from ratc.units import format_bytes

BYTE_UNITS = (("GB", 1e9), ("MB", 1e6), ("KB", 1e3))    # decimal, as the budgets and ratc.units write them
MAX_PANELS = 12     # beyond this only the stages with the highest peaks are drawn
COLUMNS = 4
MIN_WIDTH = 7.0     # inches: room for the title and the legend above and below one panel
# A budget this many times the highest peak would flatten the data to a line at the
# bottom: the axis then ends above the peak and the legend gives the budget instead.
BUDGET_OFF_SCALE = 4.0


def budget_on_scale(peak: float, budget: float | None) -> bool:
    """Whether the budget line is drawn (it is within BUDGET_OFF_SCALE x the highest peak)."""
    return bool(budget) and budget <= BUDGET_OFF_SCALE * peak


def byte_unit(top: float) -> tuple:
    """(name, bytes) of the unit an axis reaching `top` bytes counts in."""
    return next(((name, scale) for name, scale in BYTE_UNITS if top >= scale), ("B", 1.0))


def _budget_handle(budget: float, on_scale: bool):
    from matplotlib.lines import Line2D

    label = f"budget {format_bytes(budget)}" + ("" if on_scale else " (off scale)")
    return Line2D([], [], color=BUDGET_COLOR, linestyle="--" if on_scale else "none", label=label)


def shown_stages(data: MemoryData) -> list:
    """Stage series to draw: all, or the MAX_PANELS with the highest peaks, in stage order."""
    series = list(data.series)
    if len(series) <= MAX_PANELS:
        return series
    top = sorted(series, key=lambda s: (-s.peak(), s.stage))[:MAX_PANELS]
    return sorted(top, key=lambda s: s.stage)


def timeline_figure(data: MemoryData):
    """Small multiples: one panel per stage, tiers stacked, the budget as a dashed line."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    series = shown_stages(data)
    cols = min(COLUMNS, max(len(series), 1))
    nrows = max(1, math.ceil(len(series) / cols))
    height = 2.0 * nrows + 1.0
    width = max(MIN_WIDTH, 3.4 * cols)
    fig = Figure(figsize=(width, height))
    # Fixed margins (no tight layout): shared axes keep tick work to one axis pair.
    fig.subplots_adjust(left=0.6 / width, right=1 - 0.15 / width, top=1 - 0.45 / height, bottom=0.75 / height,
                        hspace=0.45, wspace=0.12)
    axes = fig.subplots(nrows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    for ax in axes[len(series):]:
        ax.set_visible(False)
    t0 = min((s.times[0] for s in series if s.times), default=0.0)
    t1 = max([s.times[-1] for s in series if s.times] + [data.step_end, t0 + 1e-9])
    unit, scale = time_unit(t1 - t0)
    peak = max([s.peak() for s in series] + [0.0])
    on_scale = budget_on_scale(peak, data.budget)
    top_bytes = max(peak, data.budget if on_scale else 0.0)
    bytes_unit, per = byte_unit(top_bytes)
    top = top_bytes / per * 1.08 or 1.0
    for k, s in enumerate(series):
        ax = axes[k]
        xs = [(t - t0) / scale for t in s.times] + [(t1 - t0) / scale]
        base = [0.0] * len(xs)
        for tier in TIERS:
            ys = [b / per for b in s.tiers[tier]]
            ys.append(ys[-1] if ys else 0.0)
            upper = [a + b for a, b in zip(base, ys)]
            ax.fill_between(xs, base, upper, step="post", color=TIER_COLOR[tier], linewidth=0)
            base = upper
        if on_scale:
            ax.axhline(data.budget / per, color=BUDGET_COLOR, linestyle="--", linewidth=1)
        ax.set_title(f"stage {s.stage}: peak {format_bytes(s.peak())}", fontsize=8)
        ax.tick_params(labelsize=7, labelbottom=True)
        ax.locator_params(nbins=4)
        if k % cols == 0:
            ax.set_ylabel(bytes_unit, fontsize=8)
        if k >= len(series) - cols:
            ax.set_xlabel(f"time ({unit})", fontsize=8)
    axes[0].set_xlim(0, (t1 - t0) / scale)
    axes[0].set_ylim(0, top)
    handles = [Patch(color=TIER_COLOR[t], label=f"{t}-lived") for t in TIERS]
    if data.budget:
        handles.append(_budget_handle(data.budget, on_scale))
    title = data.title
    if len(series) < len(data.series):
        title += f" ({len(series)} of {len(data.series)} stages: the highest peaks)"
    fig.suptitle(title, fontsize=10)
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    return fig


def breakdown_figure(breakdown: list, budget: float | None, title: str):
    """Stacked bars per stage: every Eq. 9 term, colored by its group (state / act / buffers)."""
    from matplotlib.colors import to_rgb
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    n = len(breakdown)
    fig = Figure(figsize=(max(7.0, min(14.0, 3.0 + 0.3 * n)), 4.2))
    ax = fig.add_axes((0.1, 0.14, 0.6, 0.76))
    names = []
    for st in breakdown:
        for name, group, _ in st.terms:
            if (name, group) not in names:
                names.append((name, group))
    shades = _shades(names, to_rgb)
    xs = [st.stage for st in breakdown]
    tallest = max((sum(b for _, _, b in st.terms) for st in breakdown), default=0.0)
    on_scale = budget_on_scale(tallest, budget)
    bytes_unit, per = byte_unit(max(tallest, budget if on_scale else 0.0))
    base = [0.0] * n
    handles = []
    for name, group in names:
        ys = [sum(b for nm, g, b in st.terms if (nm, g) == (name, group)) / per for st in breakdown]
        ax.bar(xs, ys, bottom=base, color=shades[(name, group)], width=0.8, edgecolor="white", linewidth=0.3)
        base = [a + b for a, b in zip(base, ys)]
        handles.append(Patch(color=shades[(name, group)], label=f"{group}: {name}"))
    if budget:
        if on_scale:
            ax.axhline(budget / per, color=BUDGET_COLOR, linestyle="--", linewidth=1)
        handles.append(_budget_handle(budget, on_scale))
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel(bytes_unit)
    ax.set_xticks(xs if n <= 24 else xs[::max(1, n // 24)])
    ax.set_title(title, fontsize=10)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return fig


def _shades(names, to_rgb):
    """Each term a lighter or darker shade of its Eq. 9 group's color."""
    out = {}
    for group in EQ9_GROUPS:
        members = [nm for nm in names if nm[1] == group]
        r, g, b = to_rgb(GROUP_COLOR[group])
        for k, nm in enumerate(members):
            f = 0.55 * k / max(len(members), 1)
            out[nm] = (r + (1 - r) * f, g + (1 - g) * f, b + (1 - b) * f)
    return out


def render_timeline(data: MemoryData, fmt: str = "png") -> bytes:
    return save(timeline_figure(data), fmt)


def render_breakdown(breakdown: list, budget: float | None, title: str, fmt: str = "png") -> bytes:
    return save(breakdown_figure(breakdown, budget, title), fmt)

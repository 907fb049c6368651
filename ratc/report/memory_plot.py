"""Memory pictures: live bytes per stage over time by lifetime tier, and the Eq. 9 breakdown."""

from __future__ import annotations

import math

from ratc.report.data import EQ9_GROUPS, TIERS, MemoryData
from ratc.report.style import BUDGET_COLOR, GROUP_COLOR, TIER_COLOR, save, time_unit

GB = 1e9            # decimal, as the paper's budgets and ratc.units write them
MAX_PANELS = 12     # beyond this only the stages with the highest peaks are drawn
COLUMNS = 4


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
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    series = shown_stages(data)
    cols = min(COLUMNS, max(len(series), 1))
    nrows = max(1, math.ceil(len(series) / cols))
    height = 2.0 * nrows + 1.0
    fig = Figure(figsize=(3.4 * cols, height))
    # Fixed margins (no tight layout): shared axes keep tick work to one axis pair.
    fig.subplots_adjust(left=0.07, right=0.98, top=1 - 0.45 / height, bottom=0.75 / height, hspace=0.45,
                        wspace=0.12)
    axes = fig.subplots(nrows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    for ax in axes[len(series):]:
        ax.set_visible(False)
    t0 = min((s.times[0] for s in series if s.times), default=0.0)
    t1 = max([s.times[-1] for s in series if s.times] + [data.step_end, t0 + 1e-9])
    unit, scale = time_unit(t1 - t0)
    top = max([s.peak() for s in series] + [data.budget or 0.0]) / GB * 1.08 or 1.0
    for k, s in enumerate(series):
        ax = axes[k]
        xs = [(t - t0) / scale for t in s.times] + [(t1 - t0) / scale]
        base = [0.0] * len(xs)
        for tier in TIERS:
            ys = [b / GB for b in s.tiers[tier]]
            ys.append(ys[-1] if ys else 0.0)
            upper = [a + b for a, b in zip(base, ys)]
            ax.fill_between(xs, base, upper, step="post", color=TIER_COLOR[tier], linewidth=0)
            base = upper
        if data.budget:
            ax.axhline(data.budget / GB, color=BUDGET_COLOR, linestyle="--", linewidth=1)
        ax.set_title(f"stage {s.stage}: peak {s.peak() / GB:.2f} GB", fontsize=8)
        ax.tick_params(labelsize=7, labelbottom=True)
        ax.locator_params(nbins=4)
        if k % cols == 0:
            ax.set_ylabel("GB", fontsize=8)
        if k >= len(series) - cols:
            ax.set_xlabel(f"time ({unit})", fontsize=8)
    axes[0].set_xlim(0, (t1 - t0) / scale)
    axes[0].set_ylim(0, top)
    handles = [Patch(color=TIER_COLOR[t], label=f"{t}-lived") for t in TIERS]
    if data.budget:
        handles.append(Line2D([], [], color=BUDGET_COLOR, linestyle="--", label=f"budget {data.budget / GB:.2f} GB"))
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
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n = len(breakdown)
    fig = Figure(figsize=(max(7.0, min(14.0, 3.0 + 0.3 * n)), 4.2))
    ax = fig.add_axes((0.1, 0.14, 0.64, 0.76))
    names = []
    for st in breakdown:
        for name, group, _ in st.terms:
            if (name, group) not in names:
                names.append((name, group))
    shades = _shades(names, to_rgb)
    xs = [st.stage for st in breakdown]
    base = [0.0] * n
    handles = []
    for name, group in names:
        ys = [sum(b for nm, g, b in st.terms if (nm, g) == (name, group)) / GB for st in breakdown]
        ax.bar(xs, ys, bottom=base, color=shades[(name, group)], width=0.8, edgecolor="white", linewidth=0.3)
        base = [a + b for a, b in zip(base, ys)]
        handles.append(Patch(color=shades[(name, group)], label=f"{group}: {name}"))
    if budget:
        ax.axhline(budget / GB, color=BUDGET_COLOR, linestyle="--", linewidth=1)
        handles.append(Line2D([], [], color=BUDGET_COLOR, linestyle="--", label=f"budget {budget / GB:.2f} GB"))
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("GB")
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

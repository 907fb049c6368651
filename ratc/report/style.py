"""Colors, time units and figure output shared by the report's pictures."""

from __future__ import annotations

import io

from ratc.errors import RatcError

# One color per task kind (Okabe-Ito-like, distinguishable in grayscale print too).
KIND_COLOR = {
    "forward": "#4C72B0",
    "backward": "#DD8452",
    "weight_grad": "#E8B27F",
    "recover": "#55A868",
    "send": "#9A9A9A",
    "tp_comm": "#937860",
    "gather": "#CCB974",
    "grad_sync": "#C44E52",
    "update": "#8172B3",
    "prefetch": "#2AA1B5",
}
KIND_NAME = {"forward": "Forward (F)", "backward": "Backward (B; zero bubble: its input gradient I)",
             "weight_grad": "weight gradient (W)", "recover": "Recover (R)",
             "send": "stage send", "tp_comm": "TP all-reduce", "gather": "ZeRO-3 gather", "grad_sync": "GradSync",
             "update": "UpdateShard", "prefetch": "PrefetchW"}
TIER_COLOR = {"long": "#4C72B0", "medium": "#DD8452", "short": "#55A868"}
GROUP_COLOR = {"state": "#4C72B0", "activations": "#DD8452", "buffers": "#55A868"}
TAIL_COLOR = "#C44E52"
BUDGET_COLOR = "#C44E52"

FORMATS = ("png", "svg")
DPI = 100


def time_unit(span: float) -> tuple:
    """(name, seconds per unit) that keeps a time axis of `span` seconds readable."""
    for name, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if span >= 2 * scale:
            return name, scale
    return "ns", 1e-9


def format_of(path: str, flag: str, given: str | None = None) -> str:
    """The image format a file name asks for (png without a suffix), or a clear error."""
    from pathlib import Path

    fmt = given or Path(path).suffix.lstrip(".").lower() or "png"
    if fmt not in FORMATS:
        raise RatcError(f"{flag} {path}: cannot tell the image format from the suffix; use "
                        f"{' or '.join('.' + f for f in FORMATS)}" + (", or give --format" if given is None else ""))
    return fmt


def save(fig, fmt: str) -> bytes:
    """The figure as PNG or SVG bytes, without timestamps or versions so equal inputs give equal files.

    Figures place their axes themselves: a tight bounding box would cost a second layout pass."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if fmt not in FORMATS:
        raise RatcError(f"unknown image format {fmt!r} (known: {', '.join(FORMATS)})")
    FigureCanvasAgg(fig)    # raster output through Agg, never an interactive backend
    buf = io.BytesIO()
    # no date, and no Matplotlib version: equal inputs give equal files across installs
    meta = {"Date": None, "Creator": None} if fmt == "svg" else {"Software": None}
    with matplotlib.rc_context({"svg.hashsalt": "ratc", "svg.fonttype": "none"}):
        fig.savefig(buf, format=fmt, dpi=DPI, metadata=meta)
    return buf.getvalue()

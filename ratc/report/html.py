"""The self-contained HTML report: inline CSS, images as data URIs, no external reference."""

from __future__ import annotations

import base64
from html import escape

from ratc.report.data import ReportData
from ratc.units import format_bytes, format_time

MIME = {"png": "image/png", "svg": "image/svg+xml"}

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; font-size: .9em; margin: .5em 0; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
tr.best td { font-weight: bold; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
.note { color: #555; font-size: .9em; }
#ratc-image-check { display: none; }   /* for tests and tools reading the DOM, not for the reader */
"""

# The page checks itself and writes the result into its own DOM, so a headless browser's
# DOM dump (or a reader) can tell that every embedded picture decoded, that no script
# failed and that nothing was fetched from outside the page.
CHECK_SCRIPT = """
var ratcErrors = [];
window.addEventListener('error', function (e) {
  ratcErrors.push(e.message || ('failed to load ' + (e.target && (e.target.src || e.target.href))));
}, true);
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (im) { return im.complete && im.naturalWidth > 0; }).length;
  var fetched = performance.getEntriesByType('resource').filter(function (r) {
    return r.name.indexOf('data:') !== 0;
  }).length;
  var el = document.getElementById('ratc-image-check');
  el.textContent = 'images loaded: ' + ok + '/' + imgs.length + ', errors: ' + ratcErrors.length +
                   ', external requests: ' + fetched;
  el.setAttribute('data-loaded', String(ok));
  el.setAttribute('data-total', String(imgs.length));
  el.setAttribute('data-errors', ratcErrors.join(' | '));
  el.setAttribute('data-fetched', String(fetched));
});
"""


def image_tag(data: bytes, fmt: str, alt: str) -> str:
    """An <img> whose source is the image itself, base64-encoded."""
    uri = f"data:{MIME[fmt]};base64,{base64.b64encode(data).decode('ascii')}"
    return f'<img src="{uri}" alt="{escape(alt)}">'


def _table(head: list | None, rows: list, left: int = 1, classes: list | None = None) -> str:
    th = "".join(f'<th class="l">{escape(h)}</th>' if i < left else f"<th>{escape(h)}</th>"
                 for i, h in enumerate(head or []))
    thead = f"<thead><tr>{th}</tr></thead>" if head else ""
    body = []
    for k, row in enumerate(rows):
        cls = f' class="{classes[k]}"' if classes and classes[k] else ""
        tds = "".join(f'<td class="l">{escape(str(c))}</td>' if i < left else f"<td>{escape(str(c))}</td>"
                      for i, c in enumerate(row))
        body.append(f"<tr{cls}>{tds}</tr>")
    return f"<table>{thead}<tbody>{''.join(body)}</tbody></table>"


def candidates_table(rows: list) -> str:
    """Ranked candidates: predicted (Eq. 12) and simulated step time, and the error."""
    out = []
    for r in rows:
        sim = format_time(r.simulated) if r.simulated is not None else "not simulated"
        err = f"{100 * r.error:+.2f} %" if r.error is not None else ""
        out.append([r.rank, r.label, format_time(r.predicted), sim, err,
                    f"{format_bytes(r.peak_memory)} (stage {r.peak_stage})", r.note])
    return _table(["#", "configuration", "predicted", "simulated", "error", "peak memory (Eq. 9)", "note"], out,
                  left=2,
                  classes=["best" if r.rank == 1 else "" for r in rows])


def kernels_table(rows: list) -> str:
    """Generated kernels: shape, cycles, MAC utilization, DDR bytes, calls and share of the step."""
    out = [[k.name, k.shape, f"{k.cycles:,}", f"{100 * k.mac_utilization:.2f} %",
            format_bytes(k.ddr_bytes) if k.ddr_bytes is not None else "",
            f"{k.calls:,}" if k.calls is not None else "",
            f"{100 * k.share:.2f} %" if k.share is not None else ""] for k in rows]
    return _table(["kernel", "shape", "cycles", "MAC utilization", "DDR bytes", "calls per step",
                   "share of step"], out, left=2)


def breakdown_table(breakdown: list, budget: float | None) -> str:
    """Eq. 9 per stage: state + activations + buffers = M_p, against the budget."""
    out = []
    for st in breakdown:
        fits = "" if budget is None else ("fits" if st.total <= budget else "over budget")
        out.append([f"stage {st.stage}", format_bytes(st.group("state")), format_bytes(st.group("activations")),
                    format_bytes(st.group("buffers")), format_bytes(st.total), fits])
    return _table(["stage", "M_state", "M_act", "M_buf", "M_p (Eq. 9)", "Eq. 10"], out)


def render(report: ReportData, images: dict) -> str:
    """The page; `images` maps a section key to (bytes, fmt, alt) or a list of them."""
    parts = [f"<h1>{escape(report.title)}</h1>"]
    if report.facts:
        parts.append(_table(None, [[k, v] for k, v in report.facts], left=2))
    parts += [f'<p class="note">{escape(n)}</p>' for n in report.notes]
    sections = (
        ("pipeline", "Pipeline schedule",
         "Every task of the simulated step, per stage and lane, at its simulated time (paper Fig. 6); "
         "the hatched span is the exposed finalization tail, from the last Backward to the step end."),
        ("memory", "Memory over time",
         "Bytes live on each stage during the step, by lifetime tier, with the per-cluster budget."),
        ("breakdown", "Memory breakdown (Eq. 9)",
         "The planner's per-stage terms M_p = M_state + M_act + M_buf for the chosen plan."),
    )
    for key, title, caption in sections:
        imgs = images.get(key)
        if not imgs:
            continue
        parts.append(f"<h2>{escape(title)}</h2><p class=\"note\">{escape(caption)}</p>")
        for data, fmt, alt in imgs if isinstance(imgs, list) else [imgs]:
            parts.append(f"<p>{image_tag(data, fmt, alt)}</p>")
        if key == "breakdown" and report.breakdown:
            parts.append(breakdown_table(report.breakdown, report.budget))
    if report.candidates:
        parts.append("<h2>Ranked candidates</h2><p class=\"note\">The planner's best feasible configurations "
                     "by predicted step time (Eq. 12) and the system VM's simulated step time.</p>")
        parts.append(candidates_table(report.candidates))
    if report.kernels:
        parts.append("<h2>Kernels</h2><p class=\"note\">The generated GEMM and attention-backward kernels the "
                     "program calls (timed on the kernel VM): calls per step on the stage that calls each most, "
                     "and those calls' share of the simulated step.</p>")
        parts.append(kernels_table(report.kernels))
    parts.append('<p id="ratc-image-check">images not checked (scripts off)</p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(report.title)}</title><style>{CSS}</style>"
            f"<script>{CHECK_SCRIPT}</script></head>\n<body>\n" + "\n".join(parts) + "\n</body></html>\n")

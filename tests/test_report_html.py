"""The HTML report is self-contained: every image inline, no external reference, text escaped."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser

import pytest

from ratc.report import diagram, html, memory_plot
from ratc.report.data import (CandidateRow, Interval, KernelRow, MemoryData, MemorySeries, PipelineData, ReportData,
                              StageBreakdown)
from ratc.report.summary import SCREEN_COLUMNS, SCREEN_LINES, Summary


class Collect(HTMLParser):
    """Every tag with its attributes, and the text of table cells."""

    def __init__(self):
        super().__init__()
        self.tags, self.cells, self._cell = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "td":
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "td":
            self.cells.append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def hand_report() -> tuple:
    ivs = (Interval(0, "F/B", "forward", "F0", 0.0, 1.0), Interval(0, "R", "recover", "R0", 0.5, 1.5),
           Interval(1, "F/B", "backward", "B0", 1.0, 3.0), Interval(1, "UpdateShard", "update", "UPDATE0", 3.0, 3.5))
    pipe = PipelineData("a <b> & c", 2, ivs, 0.0, 3.5, 3.0)
    mem = MemoryData("m", (MemorySeries(0, (0.0, 1.0), {"long": (5e9, 5e9), "medium": (0, 1e9), "short": (0, 0)}),),
                     budget=2e10, step_end=3.5)
    bd = [StageBreakdown(0, (("params", "state", 5e9), ("activations", "activations", 1e9)))]
    report = ReportData(title="report <script>alert(1)</script>", facts=[("plan", "P=2,D=1")],
                        pipelines=[pipe], memory=mem, breakdown=bd, budget=2e10,
                        candidates=[CandidateRow(1, "P=2,D=1,Z=0", 10.0, 8.0, 5e9, 0),
                                    CandidateRow(2, "P=1,D=2,Z=0", 12.0, None, 6e9, 0)],
                        kernels=[KernelRow("gemm_2048x4096x4096_f16", "2048x4096x4096", 123456, 0.8123,
                                           ddr_bytes=10**8, calls=4321, share=0.125)])
    images = {"pipeline": (diagram.render(pipe, "svg"), "svg", "pipeline"),
              "memory": (memory_plot.render_timeline(mem, "png"), "png", "memory"),
              "breakdown": (memory_plot.render_breakdown(bd, 2e10, "bd", "png"), "png", "breakdown")}
    return report, images


@pytest.fixture(scope="module")
def page():
    report, images = hand_report()
    text = html.render(report, images)
    parser = Collect()
    parser.feed(text)
    return text, parser


def test_every_image_is_an_inline_data_uri(page):
    _, parser = page
    imgs = [a for t, a in parser.tags if t == "img"]
    assert len(imgs) == 3
    for a in imgs:
        m = re.fullmatch(r"data:(image/png|image/svg\+xml);base64,([A-Za-z0-9+/=]+)", a["src"])
        assert m, a["src"][:60]
        data = base64.b64decode(m.group(2), validate=True)
        assert data.startswith(b"\x89PNG") if m.group(1) == "image/png" else b"<svg" in data[:400]


def test_nothing_points_outside_the_page(page):
    text, parser = page
    outside_images = re.sub(r'"data:[^"]*"', '""', text)
    assert not re.search(r"(?i)https?:|//[a-z0-9]|ftp:|url\(", outside_images)
    for tag, attrs in parser.tags:
        assert tag not in ("link", "iframe", "object", "embed")
        for key in ("href", "src"):
            assert key not in attrs or attrs[key].startswith("data:"), (tag, attrs)


def test_text_is_escaped_and_tables_hold_the_rows(page):
    text, parser = page
    assert "<script>alert(1)" not in text
    assert "report &lt;script&gt;alert(1)&lt;/script&gt;" in text
    cells = parser.cells
    assert "P=2,D=1,Z=0" in cells and "not simulated" in cells
    assert "+25.00 %" in cells               # (10 - 8) / 8
    assert "81.23 %" in cells and "123,456" in cells and "2048x4096x4096" in cells
    assert "4,321" in cells and "12.50 %" in cells


def test_candidate_error_is_relative_to_the_simulation():
    assert CandidateRow(1, "x", 9.0, 10.0, 0, 0).error == pytest.approx(-0.1)
    assert CandidateRow(1, "x", 9.0, None, 0, 0).error is None


def test_summary_fits_one_screen_and_counts_what_it_hides():
    s = Summary("a long run")
    for k in range(40):
        s.add(f"row {k}", "v" * (k * 5))
    s.note("n" * 300)
    lines = s.render().splitlines()
    assert len(lines) == SCREEN_LINES
    assert all(len(line) <= SCREEN_COLUMNS for line in lines)
    assert lines[-1].strip() == f"... {41 - (SCREEN_LINES - 2)} more lines"
    short = Summary("short").add("step time", "1.0 s").note("fine").render()
    assert short == "== short ==\n  step time  1.0 s\n  note: fine\n"

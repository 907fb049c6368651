"""The report's pictures at the sizes the report draws them: nothing clipped, and data a
reader can see (a budget far above the data does not flatten it)."""

from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from ratc.cli.main import main
from ratc.report import diagram, memory_plot
from ratc.report.html import CSS

EXAMPLE = str(Path(__file__).parents[1] / "examples" / "llama.py")

pytestmark = pytest.mark.usefixtures("one_thread")


def _report_figures(tmp_path, monkeypatch, *extra) -> dict:
    """The figures `ratc compile --report` draws for the tiny preset, by picture name."""
    figs = []

    def keep(fig, fmt):
        figs.append(fig)
        return b""

    monkeypatch.setattr(memory_plot, "save", keep)
    monkeypatch.setattr(diagram, "save", keep)
    assert main(["compile", EXAMPLE, "--preset", "tiny", "--clusters", "4", "--global-batch", "16", *extra,
                 "--report", "-o", str(tmp_path / "out")]) == 0
    return dict(zip(("pipeline", "memory", "breakdown"), figs))


@pytest.fixture(scope="module")
def figures(tmp_path_factory):
    """The report's figures for a P=1 and a P=2 program of the tiny preset."""
    with pytest.MonkeyPatch.context() as mp:
        return {P: _report_figures(tmp_path_factory.mktemp(f"p{P}"), mp, "--pipeline", str(P)) for P in (1, 2)}


def _drawn_extent(fig):
    """The box (inches) of everything drawn: titles, labels, tick labels in view, legends."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return fig.get_tightbbox(canvas.get_renderer())


@pytest.mark.parametrize("P", [1, 2])
@pytest.mark.parametrize("name", ["pipeline", "memory", "breakdown"])
def test_no_report_figure_clips_a_title_label_or_legend(figures, P, name):
    fig = figures[P][name]
    drawn, page = _drawn_extent(fig), fig.bbox_inches
    assert page.x0 - 0.01 <= drawn.x0 and drawn.x1 <= page.x1 + 0.01, (name, drawn, page)
    assert page.y0 - 0.01 <= drawn.y0 and drawn.y1 <= page.y1 + 0.01, (name, drawn, page)


def test_a_budget_far_above_the_data_leaves_the_data_the_axis_and_says_so(figures):
    # the tiny model peaks at a few MB under a 20 GB budget
    fig = figures[2]["memory"]
    ax = fig.axes[0]
    assert ax.get_ylabel() == "MB" and ax.get_ylim()[1] < 10
    assert ax.get_title().startswith("stage 0: peak ") and ax.get_title().endswith(" MB")
    assert "budget 20.00 GB (off scale)" in [t.get_text() for t in fig.legends[0].get_texts()]
    breakdown = figures[2]["breakdown"].axes[0]
    assert breakdown.get_ylabel() == "MB" and breakdown.get_ylim()[1] < 10


def test_the_budget_line_is_drawn_only_near_the_peak():
    assert memory_plot.budget_on_scale(10e9, 20e9)
    assert not memory_plot.budget_on_scale(1e9, 20e9)
    assert not memory_plot.budget_on_scale(1e9, None)
    assert memory_plot.byte_unit(20e9) == ("GB", 1e9) and memory_plot.byte_unit(5.6e6) == ("MB", 1e6)


def test_the_pages_self_check_is_kept_out_of_the_readers_way():
    assert "#ratc-image-check { display: none; }" in CSS

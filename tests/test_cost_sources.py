"""`ratc plan` and `ratc compile` price one setup with different operator costs by default
(the paper's Table 5 GEMM efficiencies; generated kernels timed on the kernel VM): each says
which, and compile also gives plan's figure for its plan, equal to what plan prints."""

import json

import pytest

from ratc.cli.main import main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("preset", ["tiny", "tiny-tied"])
def test_plan_and_compile_label_their_step_times_and_agree_on_plans_figure(preset, tmp_path, capsys):
    setup = ["--preset", preset, "--clusters", "4", "--global-batch", "16"]
    assert main(["compile", *setup, "--json", "-o", str(tmp_path / "p")]) == 0
    compiled = json.loads(capsys.readouterr().out)
    assert compiled["predicted_cost_source"] == "generated kernels timed on the kernel VM"
    assert main(["plan", *setup, "--json", "--top", "1000"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["cost_source"] == "the paper's Table 5 GEMM efficiencies"
    (same,) = [c for c in plan["top"] if c["label"] == compiled["config"]]
    assert compiled["plan_default_step_time_s"] == pytest.approx(same["step_time_s"], rel=1e-12)


def test_the_text_outputs_name_their_cost_source(tmp_path, capsys):
    setup = ["--preset", "tiny", "--clusters", "4", "--global-batch", "16"]
    assert main(["plan", *setup]) == 0
    assert "step times priced with the paper's Table 5 GEMM efficiencies" in capsys.readouterr().out
    assert main(["compile", *setup, "-o", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "(priced with generated kernels timed on the kernel VM)" in out
    assert "planner priced with the paper's Table 5 GEMM efficiencies (`ratc plan`'s default): " in out

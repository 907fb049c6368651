"""`ratc train`: losses per step, CSV and plot, checked against the PyTorch reference it prints."""

from __future__ import annotations

import csv

import pytest

from ratc.cli.main import main

MODEL = "examples/llama.py"


pytestmark = pytest.mark.usefixtures("one_thread")


def test_train_writes_csv_and_plot(tmp_path, capsys):
    out_csv, out_png = tmp_path / "loss.csv", tmp_path / "loss.png"
    code = main(["train", MODEL, "--preset", "tiny", "--steps", "3", "--pp", "2", "--dp", "2", "--zero", "3",
                 "--act-policy", "checkpoint", "--micro-batches", "2", "--micro-batch-size", "1",
                 "--csv", str(out_csv), "--plot", str(out_png)])
    assert code == 0
    text = capsys.readouterr().out
    assert "P=2 D=2 Z=3 checkpoint" in text and "max per-step relative loss deviation" in text
    rows = list(csv.DictReader(out_csv.open()))
    assert [int(r["step"]) for r in rows] == [0, 1, 2]
    for r in rows:
        ours, ref = float(r["ratc_loss"]), float(r["reference_loss"])
        assert abs(ours - ref) / ref == pytest.approx(float(r["relative_deviation"]))
        assert float(r["relative_deviation"]) <= 1e-5
        assert f"loss {ours:.6f}  pytorch {ref:.6f}" in text
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_plot_as_svg_is_deterministic(tmp_path, capsys):
    """The suffix picks the format; the same run gives the same bytes (no timestamps)."""
    paths = [tmp_path / "a.svg", tmp_path / "b.svg"]
    for path in paths:
        assert main(["train", MODEL, "--steps", "1", "--micro-batches", "1", "--micro-batch-size", "1",
                     "--plot", str(path)]) == 0
    svg = paths[0].read_text()
    assert svg.startswith("<?xml") and "<svg" in svg and "training loss" in svg
    assert "Matplotlib v" not in svg
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_train_without_reference(tmp_path, capsys):
    out_csv = tmp_path / "loss.csv"
    assert main(["train", MODEL, "--steps", "1", "--no-reference", "--micro-batches", "1",
                 "--micro-batch-size", "1", "--csv", str(out_csv)]) == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert rows[0]["reference_loss"] == "" and float(rows[0]["ratc_loss"]) > 0
    assert "pytorch" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps must be at least 1"),
    (["--steps", "1", "--pp", "9"], "P=9"),
    (["--steps", "1", "--preset", "nope"], "unknown preset 'nope'"),
    (["--steps", "1", "--micro-batches", "0"], "M must be at least 1"),
    (["--steps", "1", "--virtual-stages", "0"], "--virtual-stages must be at least 1"),
    (["--steps", "1", "--pp", "2", "--schedule", "zb1p"], "zb1p interleaves v >= 2"),
])
def test_bad_arguments_are_clear_errors(argv, message, capsys):
    assert main(["train", MODEL, *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_missing_model_file(capsys):
    assert main(["train", "no/such/model.py", "--steps", "1"]) == 1
    assert "no/such/model.py: no such file" in capsys.readouterr().err


def test_program_round_trip_and_a_corrupted_program(tmp_path, capsys):
    """--emit-program writes the executed schedule; --program runs it; a dropped Recover fails to load."""
    prog = tmp_path / "step.ir"
    small = ["--micro-batches", "2", "--micro-batch-size", "1"]
    assert main(["train", MODEL, "--steps", "1", "--pp", "2", "--dp", "2", "--zero", "2", *small,
                 "--emit-program", str(prog)]) == 0
    first = capsys.readouterr().out
    assert main(["train", MODEL, "--steps", "1", "--program", str(prog)]) == 0
    again = capsys.readouterr().out
    assert "P=2 D=2 Z=2 fsr" in again
    assert first.splitlines()[1] == again.splitlines()[1]      # same step-0 losses
    lines = prog.read_text().splitlines()
    k = next(i for i, line in enumerate(lines) if "life.recover(" in line)
    bad = tmp_path / "bad.ir"
    bad.write_text("\n".join(lines[:k] + lines[k + 1:]) + "\n")
    assert main(["train", MODEL, "--steps", "1", "--program", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:" in err and "error: use of undefined value '%rec" in err


@pytest.mark.parametrize("old, new, message", [
    ('model = "tiny"', 'model = "llama2-7b"', "the program is compiled for model 'llama2-7b' at sequence length 64, "
     "the model file builds 'tiny' at 64"),
    ("seq_len = 64", "seq_len = 128", "at sequence length 128, the model file builds 'tiny' at 64"),
    ("T = 1,", "T = 2,", "the program's plan has T=2; ratc train runs no tensor parallelism"),
])
def test_a_program_for_another_model_is_refused(tmp_path, capsys, old, new, message):
    """The executor would run any program whose unit count fits; its plan must be this model's."""
    prog = tmp_path / "step.ir"
    assert main(["train", MODEL, "--steps", "1", "--no-reference", "--emit-program", str(prog)]) == 0
    text = prog.read_text()
    assert text.count(old) == 1
    prog.write_text(text.replace(old, new))
    capsys.readouterr()
    assert main(["train", MODEL, "--steps", "1", "--program", str(prog)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.parametrize("extra, message", [
    (["--lr", "1e39"], "--lr must be positive and finite in fp32"),
    (["--seed", "-1"], "--seed must be 0..2**63-1"),
    (["--threads", "100000"], "--threads must be 1..1024"),
    (["--csv", "README.md/loss.csv"], "README.md is not a directory"),
    (["--plot", ""], "--plot needs a file name"),
    (["--plot", "loss.pdfx"], "--plot loss.pdfx: cannot tell the image format from the suffix; use .png or .svg"),
])
def test_bad_values_and_outputs_are_refused_before_training(extra, message, capsys):
    assert main(["train", MODEL, "--preset", "tiny", "--steps", "1", *extra]) == 1
    captured = capsys.readouterr()
    assert message in captured.err and "step    0" not in captured.out


def test_a_diverging_loss_is_reported_not_hidden(capsys):
    """A NaN deviation makes the summary's maximum NaN (max() alone skips it), with a warning."""
    assert main(["train", MODEL, "--preset", "tiny", "--steps", "3", "--lr", "1e30", "--micro-batches", "1"]) == 0
    captured = capsys.readouterr()
    assert "max per-step relative loss deviation nan" in captured.out
    assert "the loss is not finite from step" in captured.err


def test_a_loss_that_trains_nothing_is_an_error(tmp_path, capsys):
    """A head that detaches its logits leaves nothing for backward to train: a clear message,
    not autograd's traceback."""
    text = open(MODEL).read()
    line = "logits = self.lm_head(self.norm(x))"
    assert line in text
    path = tmp_path / "detached.py"
    path.write_text(text.replace(line, line + ".detach()", 1))
    assert main(["train", str(path), "--preset", "tiny", "--steps", "1"]) == 1
    err = capsys.readouterr().err
    assert "does not depend on any trainable parameter" in err and "Traceback" not in err


def test_a_loss_that_is_not_a_token_mean_is_flagged(capsys):
    """ratc averages micro-batch losses; a summed loss differs from step 0 on, and it says why."""
    assert main(["train", "tests/train_variants.py", "--preset", "sum_loss", "--steps", "1"]) == 0
    err = capsys.readouterr().err
    assert "warning: the step-0 losses already differ by" in err and "reduction='sum'" in err
    assert main(["train", "tests/train_variants.py", "--preset", "plain", "--steps", "1"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_one_thread_by_default(monkeypatch):
    """The reference's sums depend on torch's thread count; the default pins it."""
    import torch
    seen = []
    monkeypatch.setattr(torch, "set_num_threads", seen.append)
    assert main(["train", MODEL, "--steps", "1", "--no-reference", "--micro-batches", "1",
                 "--micro-batch-size", "1"]) == 0
    assert seen == [1]


def test_train_runs_a_zero_bubble_schedule_chosen_on_the_command_line(capsys):
    """--virtual-stages and --schedule reach the compiled program (the label says so, and the
    JSON config), and it trains as PyTorch does."""
    import json

    assert main(["train", MODEL, "--preset", "tiny", "--steps", "2", "--pp", "2", "--virtual-stages", "2",
                 "--schedule", "zbv", "--act-policy", "checkpoint", "--micro-batches", "2",
                 "--micro-batch-size", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["config"]["v"], out["config"]["sched"]) == (2, "zbv")
    assert out["max_relative_deviation"] <= 1e-5

"""`ratc opt --stats`: what a pipeline changed, in a few lines; no megabytes of IR on a terminal."""

import json
from pathlib import Path

import pytest

from ratc.cli import opt
from ratc.cli.main import main
from ratc.ir import parse_module
from ratc.ir.core import Operation
from ratc.passes.change_stats import change_stats, snapshot

GOLDEN = Path(__file__).parent / "golden" / "ir" / "cse_dce.ir"
LIFE = Path(__file__).parent / "golden" / "life" / "tiny_p2_d2_z2_fsr.ir"
LIFE_PIPELINE = "lower-to-life,schedule-1f1b,state-pipeline,update-prefetch,fsr,memory-plan"


def test_stats_of_cse_dce_count_the_ops_each_name_lost_and_print_no_ir(capsys):
    assert main(["opt", str(GOLDEN), "-p", "cse,dce", "--stats"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:-1]}
    # the golden's expected output keeps 1 const (of 3), 1 add (of 5) and both prints
    assert rows["test.const"] == ["3", "1", "-2"] and rows["test.add"] == ["5", "1", "-4"]
    assert rows["test.print"] == ["2", "2", "+0"] and rows["total"] == ["11", "5", "-6"]
    assert out.splitlines()[-1].startswith("changed: 0 ops added, 6 removed")
    assert "module @" not in out


def test_stats_as_json_are_sorted_and_match_the_text(capsys):
    assert main(["opt", str(LIFE), "-p", LIFE_PIPELINE, "--stats", "--json"]) == 0
    raw = capsys.readouterr().out
    data = json.loads(raw)
    assert raw == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert data["ops"]["life.recover"] == {"before": 0, "after": 16}
    assert data["total"]["after"] - data["total"]["before"] == data["added"] - data["removed"]


def test_stats_with_an_output_file_write_the_ir_there_and_the_summary_to_stdout(capsys, tmp_path):
    out = tmp_path / "o.ir"
    assert main(["opt", str(GOLDEN), "-p", "cse,dce", "--stats", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert out.read_text() == (GOLDEN.parent / "cse_dce.ir.expected").read_text()
    assert captured.out.startswith("ops by name") and "changed:" in captured.out


def test_change_stats_tell_moved_reattributed_added_and_removed_ops():
    module = parse_module("module @m {\n"
                          "  %a = test.const {value = 1.0} : tensor<4xf32>\n"
                          "  %b = test.const {value = 2.0} : tensor<4xf32>\n"
                          "  %c = test.const {value = 3.0} : tensor<4xf32>\n"
                          "  test.print(%a)\n"
                          "}\n", "m.ir")
    before = snapshot(module)
    a, b, c, p = module.body.ops
    c.attributes["value"] = 4.0                          # edited in place
    module.body.ops[:] = [b, c, a]                       # a moves after b and c; the print is removed
    module.body.append(Operation("test.print", [b.result]))
    stats = change_stats(before, module)
    assert (stats.added, stats.removed, stats.moved, stats.attributes_changed) == (1, 1, 1, 1)
    assert stats.before == {"test.const": 3, "test.print": 1} == stats.after


def test_a_megabyte_of_ir_is_refused_on_a_terminal_unless_asked_with_dash_o(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    monkeypatch.setattr(opt, "TERMINAL_IR_LIMIT", 100)
    assert main(["opt", str(GOLDEN), "-p", "cse"]) == 1
    err = capsys.readouterr().err
    assert "too much for a terminal: write it with -o FILE, print a summary with --stats, or print it anyway " \
           "with -o -" in err
    assert main(["opt", str(GOLDEN), "-p", "cse", "-o", "-"]) == 0
    assert "module @golden" in capsys.readouterr().out


def test_json_without_stats_is_refused(capsys):
    assert main(["opt", str(GOLDEN), "--json"]) == 1
    assert "--json applies to --stats" in capsys.readouterr().err


@pytest.mark.parametrize("readme_line", [
    line for line in (Path(__file__).parents[1] / "README.md").read_text().replace("\\\n", " ").splitlines()
    if line.startswith("ratc opt ")])
def test_readme_opt_examples_write_a_file_or_a_summary(readme_line):
    words = readme_line.split("#")[0].split()
    assert "--stats" in words or "-o" in words, readme_line
    assert "--print-ir-after-all" not in words or "-o" in words or "2>" in readme_line, readme_line

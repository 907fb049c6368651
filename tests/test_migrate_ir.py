"""tools/migrate_ir.py: IR printed by an earlier ratc rewritten into today's form."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from migrate_ir import main, migrate  # noqa: E402

OLD = ('  life.pipeline @step {M = 4, P = 2, Z = 2, act = "fsr", budget = 20GB, fsr = true, plan = @plan} {\n'
       '    life.stage @s0 {budget = 7, stage = 0} {\n')


def test_the_pipeline_loses_its_copy_of_the_budget_and_nothing_else_changes():
    assert migrate(OLD) == ('  life.pipeline @step {M = 4, P = 2, Z = 2, act = "fsr", fsr = true, plan = @plan} {\n'
                            '    life.stage @s0 {budget = 7, stage = 0} {\n')
    assert migrate(migrate(OLD)) == migrate(OLD)


def test_check_mode_reports_a_file_that_would_change_and_leaves_it(tmp_path):
    path = tmp_path / "old.ir"
    path.write_text(OLD)
    assert main(["--check", str(path)]) == 1
    assert path.read_text() == OLD
    assert main([str(path)]) == 0 and main(["--check", str(path)]) == 0

"""tools/migrate_ir.py: IR printed by an earlier ratc rewritten into today's form."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))

from migrate_ir import main, migrate  # noqa: E402

OLD = ('  life.pipeline @step {M = 4, P = 2, Z = 2, act = "fsr", budget = 20GB, fsr = true, plan = @plan} {\n'
       '    life.stage @s0 {budget = 7, stage = 0} {\n')


def test_the_pipeline_loses_its_copies_of_the_plan_and_the_stages_keep_theirs():
    assert migrate(OLD) == ('  life.pipeline @step {act = "fsr", fsr = true, plan = @plan} {\n'
                            '    life.stage @s0 {budget = 7, stage = 0} {\n')
    assert migrate(migrate(OLD)) == migrate(OLD)


def test_check_mode_reports_a_file_that_would_change_and_leaves_it(tmp_path):
    path = tmp_path / "old.ir"
    path.write_text(OLD)
    assert main(["--check", str(path)]) == 1
    assert path.read_text() == OLD
    assert main([str(path)]) == 0 and main(["--check", str(path)]) == 0


def test_renamed_attributes_keep_their_values_and_are_sorted_again_as_printed():
    old = '    %x = life.fwd(%a) {ws = 1KiB, dc = 0.5, dd = 0.25, unit = 1, name = "q, ws = r"} : !life.act\n'
    assert migrate(old) == ('    %x = life.fwd(%a) {compute = 0.5, ddr = 0.25, name = "q, ws = r", unit = 1, '
                            'workspace = 1KiB} : !life.act\n')
    region = "  life.stage @s0 {peak = 4KiB, stage = 0, tiers = {workspace = 1KiB}} {\n"
    assert migrate(region) == region


def test_the_pipeline_loses_its_copies_of_what_the_plan_says():
    old = '  life.pipeline @step {M = 4, P = 2, Z = 1, act = "fsr", frozen = [0, 1], no_recover = [1], plan = @plan, ties = [[0, 5]]} {\n'
    assert migrate(old) == '  life.pipeline @step {act = "fsr", plan = @plan} {\n'
    unit = "    life.unit {decoder = false, frozen = true, index = 0} \n"
    assert migrate(unit) == unit


def test_the_plan_names_its_micro_batches_a_as_the_configuration_does():
    old = '  life.plan @plan {D = 2, M = 4, P = 2, T = 1, Z = 2, act = "fsr", b = 1} {\n'
    assert migrate(old) == '  life.plan @plan {A = 4, D = 2, P = 2, T = 1, Z = 2, act = "fsr", b = 1} {\n'

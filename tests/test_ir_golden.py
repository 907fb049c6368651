"""Golden tests: each tests/golden/ir/*.ir names its pipeline in a '// RUN:' line; the output
must equal the .expected file beside it byte for byte."""

from pathlib import Path

import pytest

from ratc.ir import parse_module, print_module
from ratc.passes import PassManager, parse_pipeline

GOLDEN = sorted((Path(__file__).parent / "golden" / "ir").glob("*.ir"))


def run_pipeline_text(text: str, name: str) -> str:
    pipeline = next(line.split("RUN:", 1)[1].strip() for line in text.splitlines() if "RUN:" in line)
    module = PassManager(parse_pipeline(pipeline)).run(parse_module(text, name))
    return print_module(module)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden(path: Path):
    expected = path.with_suffix(".ir.expected").read_text()
    assert run_pipeline_text(path.read_text(), str(path)) == expected


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_expected_output_is_a_fixed_point_of_print_parse(path: Path):
    expected = path.with_suffix(".ir.expected").read_text()
    assert print_module(parse_module(expected)) == expected


def test_there_are_golden_files():
    assert len(GOLDEN) >= 3

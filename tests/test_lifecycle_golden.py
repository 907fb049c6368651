"""Golden IR for the lifecycle passes: tests/golden/life/<name>.ir holds a life.plan and
`// RUN[tag]: pipeline` lines; <name>.<tag>.expected is the printed result of each pipeline,
and <name>.<tag>.actions the stages in action notation. RATC_UPDATE_GOLDEN=1 rewrites them."""

import os
import re
from pathlib import Path

import pytest

from ratc.ir import parse_module, print_module
from ratc.lifecycle.actions import format_pipeline
from ratc.lifecycle.lowering import find_pipeline
from ratc.passes import PassManager, parse_pipeline

GOLDEN = Path(__file__).parent / "golden" / "life"
RUN = re.compile(r"^// RUN\[([a-z0-9-]+)\]: (.+)$", re.M)
CASES = [(path, tag, pipeline) for path in sorted(GOLDEN.glob("*.ir"))
         for tag, pipeline in RUN.findall(path.read_text())]


@pytest.mark.parametrize("path,tag,pipeline", CASES, ids=[f"{p.stem}-{t}" for p, t, _ in CASES])
def test_golden(path, tag, pipeline):
    module = PassManager(parse_pipeline(pipeline)).run(parse_module(path.read_text(), str(path)))
    got = {"expected": print_module(module), "actions": format_pipeline(find_pipeline(module), comms=True)}
    for kind, text in got.items():
        out = path.with_name(f"{path.stem}.{tag}.{kind}")
        if os.environ.get("RATC_UPDATE_GOLDEN"):
            out.write_text(text)
        assert text == out.read_text(), f"{out.name} differs (RATC_UPDATE_GOLDEN=1 regenerates it)"
        if kind == "expected":
            assert print_module(parse_module(text, out.name)) == text


def test_every_pass_has_a_golden_case():
    passes = {name for _, _, pipeline in CASES for name, _ in parse_pipeline_names(pipeline)}
    assert {"lower-to-life", "schedule-1f1b", "state-pipeline", "update-prefetch", "fsr", "memory-plan"} <= passes


def parse_pipeline_names(pipeline):
    return [(p.name, p) for p in parse_pipeline(pipeline)]

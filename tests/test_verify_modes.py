"""How much the pass manager verifies: every op after every pass (--verify-each), the
structure after each pass and every op at the pipeline's ends (the default), or nothing."""

import pytest

from ratc.cli.main import main
from ratc.ir import print_module
from ratc.ir.core import Operation
from ratc.ir.verifier import VerifyError, verify
from ratc.lifecycle.lowering import find_pipeline
from ratc.passes import PassFailure, PassManager, parse_pipeline
from ratc.passes.base import Pass

from tiny_programs import tiny_plan

LOWER = "lower-to-life,schedule-1f1b"


def _tamper(edit) -> Pass:
    """A test pass named 'tamper' that applies `edit` to the first stage's ops and the module."""
    def run(self, module, ctx):
        edit(find_pipeline(module).region.ops[0].region.ops, module)
    return type("Tamper", (Pass,), {"name": "tamper", "run": run})()


def _bad_duration(ops, module):
    next(op for op in ops if op.name == "life.fwd").attributes["dur"] = -1.0


def _send_first(ops, module):
    """Issue the stage's last send before anything: it then reads a value not yet defined."""
    k = max(i for i, op in enumerate(ops) if op.name == "life.send")
    ops.insert(0, ops.pop(k))


def _run(verify_mode, *edits, annotating=False, last=False):
    """`annotating`: the tamper pass declares it changes no structure; `last`: it ends the pipeline."""
    tampers = [_tamper(e) for e in edits]
    for t in tampers:
        t.changes_structure = not annotating
    after = [] if last else parse_pipeline("state-pipeline")
    return PassManager(parse_pipeline(LOWER) + tampers + after, verify=verify_mode).run(
        tiny_plan(P=2, A=2, Z=1, act="ckpt"))


def test_the_default_mode_catches_a_moved_op_after_the_pass_that_moved_it():
    with pytest.raises(PassFailure, match=r"verification failed after pass 'tamper':\n"):
        _run("structure", _send_first)


def test_the_default_mode_reports_a_malformed_op_at_the_end_and_names_the_flag_that_finds_its_pass():
    with pytest.raises(PassFailure) as info:
        _run("structure", _bad_duration)
    assert "after pass 'state-pipeline{mode=layerwise}' (its ops, checked at the end of the pipeline; " \
           "--verify-each names the pass that broke one)" in str(info.value)
    assert "duration must be finite and not negative" in str(info.value)


def test_verify_each_names_the_pass_that_broke_an_op():
    with pytest.raises(PassFailure, match=r"after pass 'tamper':\n.*duration must be finite"):
        _run("each", _bad_duration)


def test_no_verification_lets_a_malformed_op_through():
    module = _run("none", _bad_duration)
    with pytest.raises(VerifyError, match="duration must be finite"):
        verify(module)


def test_an_unknown_op_is_refused_by_the_structure_check():
    def add(ops, module):
        module.body.append(Operation("life.nonsense"))
    with pytest.raises(PassFailure, match=r"after pass 'tamper':\n.*unknown op 'life.nonsense'"):
        _run("structure", add)


def test_a_malformed_op_that_trips_a_region_rule_is_reported_as_itself():
    # a send without its `dir` stops the stage rules; the whole walk then names the op's fault
    def drop_dir(ops, module):
        del next(op for op in ops if op.name == "life.send").attributes["dir"]
    with pytest.raises(PassFailure, match=r"after pass 'tamper':\n.*'life.send' requires attribute 'dir'"):
        _run("structure", drop_dir)


def test_the_structure_is_not_rechecked_after_a_pass_that_only_annotates_ops():
    # (a pass that claims so and still moves an op is caught at the pipeline's end)
    with pytest.raises(PassFailure, match=r"after pass 'state-pipeline\{mode=layerwise\}':\n.*in the order they are sent"):
        _run("structure", _send_first, annotating=True)


def test_verify_each_checks_after_a_pass_that_only_annotates_ops():
    with pytest.raises(PassFailure, match=r"after pass 'tamper':\n.*in the order they are sent"):
        _run("each", _send_first, annotating=True)


def test_a_structure_error_after_the_last_pass_is_that_pass_s_without_the_hint():
    with pytest.raises(PassFailure) as info:
        _run("structure", _send_first, last=True)
    assert "after pass 'tamper':\n" in str(info.value) and "checked at the end" not in str(info.value)


def test_a_malformed_op_after_the_last_pass_carries_the_hint():
    with pytest.raises(PassFailure, match=r"after pass 'tamper' \(its ops, checked at the end"):
        _run("structure", _bad_duration, last=True)


def test_every_mode_gives_the_same_program():
    texts = {mode: print_module(_run(mode)) for mode in ("each", "structure", "none")}
    assert texts["each"] == texts["structure"] == texts["none"]


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="verify must be one of"):
        PassManager([], verify="sometimes")


def test_verify_each_and_no_verify_exclude_each_other(tmp_path, capsys):
    src = tmp_path / "m.ir"
    src.write_text("module {\n}\n")
    with pytest.raises(SystemExit):
        main(["opt", str(src), "--verify-each", "--no-verify"])
    assert "not allowed with argument --verify-each" in capsys.readouterr().err
    assert main(["opt", str(src), "--verify-each"]) == 0

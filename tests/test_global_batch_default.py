"""`ratc plan` and `ratc compile` take one default global batch (64 sequences per cluster),
and say so when they use it."""

import pytest

from ratc.cli.main import main

pytestmark = pytest.mark.usefixtures("one_thread")


def test_plan_and_compile_use_the_same_default_global_batch_and_say_so(tmp_path, capsys):
    assert main(["plan", "--preset", "tiny", "--clusters", "4"]) == 0
    out = capsys.readouterr()
    assert "ratc plan: using a global batch of 256 sequences (64 per cluster" in out.err
    assert "global batch 256 x 64 tokens" in out.out
    assert main(["compile", "--preset", "tiny", "--clusters", "4", "--no-run", "-o", str(tmp_path / "p")]) == 0
    assert "ratc compile: using a global batch of 256 sequences (64 per cluster" in capsys.readouterr().err
    assert '"global_batch": 256' in (tmp_path / "p" / "plan.json").read_text()


def test_a_given_global_batch_is_used_without_a_word(capsys):
    assert main(["plan", "--preset", "tiny", "--clusters", "4", "--global-batch", "16"]) == 0
    assert "global batch" not in capsys.readouterr().err


def test_min_clusters_needs_a_global_batch(capsys):
    assert main(["plan", "--preset", "tiny", "--min-clusters"]) == 1
    assert "--min-clusters: give --global-batch G" in capsys.readouterr().err

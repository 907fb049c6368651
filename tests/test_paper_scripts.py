"""The paper-comparison scripts run end to end, and the committed docs are what they write."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path):
    """A benchmark script as a module (they put benchmarks/paper on sys.path themselves)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "paper"))
    spec = importlib.util.spec_from_file_location(path.stem + "_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def table3():
    return _load(ROOT / "benchmarks" / "paper" / "table3.py")


def test_paper_tables_doc_is_current(table3, tmp_path, capsys):
    # Regenerate docs/paper_tables.md: the committed file must be exactly what the planner
    # predicts today, so a change to the models cannot leave the comparison stale.
    out = tmp_path / "paper_tables.md"
    assert table3.main(["--doc", str(out)]) == 0
    capsys.readouterr()
    committed = (ROOT / "docs" / "paper_tables.md").read_text()
    assert out.read_text() == committed, (
        "docs/paper_tables.md is stale: run python benchmarks/paper/table3.py --doc docs/paper_tables.md")
    for section in ("## Table 2", "### Recovery priced at zero", "## Table 3",
                    "### Step times at the paper's own configurations"):
        assert section in committed


def test_bench_lifecycle_reads_the_paper_scripts():
    bench = _load(ROOT / "benchmarks" / "bench_lifecycle.py")
    from ratc.step.config import Candidate
    from ratc.platform import load_platform

    rows = bench.paper_configs() + bench.chosen_configs(load_platform("mt3000"))
    assert all(isinstance(c, Candidate) for _, _, c in rows)
    labels = {(row, model) for row, model, _ in rows}
    assert ("Table 2 ratrain (ratc)", "llama2-13b") in labels and ("Table 3 (ratc)", "llama2-70b") in labels


def test_planner_vs_vm_runs_on_a_small_setting(tmp_path, capsys):
    # The full script takes about 25 minutes; the same code path on the tiny model checks
    # that it still compiles, simulates and writes its doc, with the planner near the VM.
    pvv = _load(ROOT / "benchmarks" / "paper" / "planner_vs_vm.py")
    out = tmp_path / "pvv.md"
    assert pvv.main(["--rows", "tiny@4:16", "--top", "4", "--doc", str(out)]) == 0
    capsys.readouterr()
    doc = out.read_text()
    assert doc.startswith("# Planner (Eq. 12) against the system VM")
    row = next(line for line in doc.splitlines() if line.startswith("| custom | tiny | 4 | 16 |"))
    error = float(row.rstrip(" |").split("|")[-1].strip().rstrip(" %"))
    assert abs(error) < 1.0
    assert "| custom | tiny | 4 | top 4 |" in doc
    with pytest.raises(SystemExit, match="expected MODEL@CLUSTERS:BATCH"):
        pvv.parse_rows("tiny4")


def test_ablation_runs_on_a_small_setting():
    # The paper's setting (Qwen2.5-32B, 82 s) through the same code on the tiny model:
    # checkpointing is never faster than FSR, and the state-tail variants never shorten
    # the finalization tail; the VM and the planner agree on every variant.
    rows = {r["variant"]: r for r in _load(ROOT / "benchmarks" / "paper" / "ablation.py").run(
        "tiny", "P=2,D=2,T=1,Z=2,b=1,A=4")}
    assert list(rows) == ["Full RATrain", "w/o FSR", "w/o Update-Prefetch (U-P)", "w/o Layer-wise State Pipeline (LSP)"]
    assert rows["Full RATrain"]["normalized_step_time"] == 1.0
    assert rows["w/o FSR"]["normalized_step_time"] >= 1.0
    for name in ("w/o Update-Prefetch (U-P)", "w/o Layer-wise State Pipeline (LSP)"):
        assert rows[name]["tail_amplification"] >= 1.0
    for r in rows.values():
        assert r["predicted_s"] == pytest.approx(r["step_time_s"], rel=0.01)


def test_scaling_runs_on_a_small_setting():
    # The paper's scale-out (LLaMA-2-7B on 256-1024 clusters) on the tiny model: the batch
    # grows with the clusters, so tokens/s grows and efficiency stays at most 100 %.
    rows = _load(ROOT / "benchmarks" / "paper" / "scaling.py").run("tiny", (4, 8, 16), 16)
    assert [r["clusters"] for r in rows] == [4, 8, 16] and [r["global_batch"] for r in rows] == [16, 32, 64]
    assert rows[0]["speedup"] == 1.0
    assert all(a["speedup"] < b["speedup"] for a, b in zip(rows, rows[1:]))
    assert all(0.5 < r["efficiency"] <= 1.0 + 1e-9 for r in rows)


def test_seq_sweep_runs_on_a_small_setting():
    # The paper's sweep (three models, 512-4096 tokens, 256 clusters) on the tiny model: a
    # plan per length, and no plan above the clusters' peak.
    rows = _load(ROOT / "benchmarks" / "paper" / "seq_sweep.py").run(("tiny",), (256, 512), 4, 16)
    assert [(r["model"], r["seq"]) for r in rows] == [("tiny", 256), ("tiny", 512)]
    for r in rows:
        assert r["tokens_per_s"] == pytest.approx(16 * r["seq"] / r["step_time_s"])
        assert 0 < r["mac_utilization"] <= 1


def test_fsr_memory_on_a_paper_model():
    # Streaming a Recover into what its Backward host frees (LLaMA-2-7B, where the pair
    # hides part of the recovery): with no headroom it hides less than two whole buffers,
    # with the unit's headroom as much, and that headroom is less than a second layer.
    from ratc.planner.opcost import stream_corun
    from ratc.platform import load_platform

    script = _load(ROOT / "benchmarks" / "paper" / "fsr_memory.py")
    platform = load_platform("mt3000")
    r = script.row("llama2-7b", platform)
    assert r["host"] < r["two"] < r["zero"] <= r["host"] + r["recover"] + 1e-12
    assert 0.0 < r["need_gb"] < r["layer_gb"] and r["paper_gb"] is None
    assert script.paper_delta_gb("llama2-13b") == pytest.approx(15.84 - 15.73)
    unit = script.decoder_unit("llama2-7b", platform)
    assert sum(op[2] for op in unit.fwd_ops) == pytest.approx(unit.saved_bytes)
    assert sum(op[2] for op in unit.bwd_ops) == pytest.approx(unit.saved_bytes)
    assert stream_corun(unit, unit, unit.stream) <= r["two"] * 1.001

"""The failure model (`ratc plan --failures`) against Young's and Daly's closed forms, the
truncated-exponential lost work, the seeded renewal-process Monte Carlo
(ratc.planner.renewal) and ZeRO's sharding."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.cli.main import main
from ratc.frontend.presets import trace_preset
from ratc.errors import RatcError
from ratc.planner.failures import (STEP_COUNTER_BYTES, checkpoint_cost, daly_interval, estimate, expected_goodput,
                                   failure_report, failure_spec, lost_work, steps_between_checkpoints, system_mtbf,
                                   young_interval)
from ratc.planner.renewal import simulate_renewal
from ratc.planner.search import Planner
from ratc.platform import PlatformError, load_platform, parse_platform
from ratc.platform.loader import PROFILE_DIR
from ratc.step.config import Candidate

HOUR = 3600.0


def young_1974(delta, mtbf):
    """Young, 'A first order approximation to the optimum checkpoint interval' (CACM 1974)."""
    return math.sqrt(2 * delta * mtbf)


def daly_2006(delta, mtbf):
    """Daly, 'A higher order estimate of the optimum checkpoint interval for restart dumps'
    (FGCS 2006)."""
    if delta >= 2 * mtbf:
        return mtbf
    return math.sqrt(2 * delta * mtbf) * (1 + math.sqrt(delta / (2 * mtbf)) / 3 + delta / (9 * 2 * mtbf)) - delta


@pytest.fixture(scope="module")
def planner_70b():
    return Planner(trace_preset("llama2-70b"), load_platform("mt3000"))


def test_young_interval_is_the_1974_closed_form():
    for delta, mtbf in ((0.41, 197.96 * HOUR), (60.0, HOUR), (1.0, 1.0)):
        assert young_interval(delta, mtbf) == pytest.approx(young_1974(delta, mtbf), rel=1e-12)


def test_daly_interval_is_the_2006_closed_form_and_the_mtbf_past_twice_it():
    for delta, mtbf in ((0.41, 197.96 * HOUR), (60.0, HOUR), (300.0, 400.0), (900.0, 400.0), (800.0, 400.0)):
        assert daly_interval(delta, mtbf) == pytest.approx(daly_2006(delta, mtbf), rel=1e-12)
    assert daly_interval(900.0, 400.0) == 400.0
    # arrays in, arrays out (the planner's vectorised use)
    arr = daly_interval(np.array([60.0, 900.0]), np.array([HOUR, 400.0]))
    assert arr.tolist() == pytest.approx([daly_2006(60.0, HOUR), 400.0])


def test_system_mtbf_divides_the_clusters_mtbf_by_their_count():
    assert system_mtbf(202708 * HOUR, 1024) == pytest.approx(197.957 * HOUR, rel=1e-5)


@settings(max_examples=60, deadline=None)
@given(ratio=st.floats(1e-7, 1.99), restart=st.floats(0.0, 2.0))
def test_dalys_interval_is_within_a_fifth_of_a_percent_of_the_goodput_optimum(ratio, restart):
    mtbf, delta = 1.0, ratio
    tau = daly_interval(delta, mtbf)
    grid = np.geomspace(tau * 1e-3, tau * 1e3 + 10, 100_001)
    best = expected_goodput(grid, delta, restart, mtbf).max()
    assert expected_goodput(tau, delta, restart, mtbf) >= 0.998 * best


@settings(max_examples=60, deadline=None)
@given(segment=st.floats(1e-3, 50.0), mtbf=st.floats(0.1, 100.0))
def test_lost_work_is_the_mean_of_an_exponential_truncated_to_the_segment(segment, mtbf):
    from scipy.integrate import quad

    # oracle: the truncated density's mean by quadrature, t e^(-t/M) / (M (1 - e^(-s/M))) on [0, s]
    mass = -np.expm1(-segment / mtbf)
    mean, _ = quad(lambda t: t * math.exp(-t / mtbf) / (mtbf * mass), 0.0, segment, epsabs=1e-13, epsrel=1e-11)
    assert lost_work(segment, mtbf) == pytest.approx(mean, rel=1e-7, abs=1e-12)
    assert 0.0 < lost_work(segment, mtbf) <= segment / 2


def test_lost_work_tends_to_half_the_segment_when_failures_are_rare():
    assert lost_work(60.0, 1e9) == pytest.approx(30.0, rel=1e-6)


@pytest.mark.parametrize("delta,restart,mtbf", [
    (60.0, 300.0, HOUR),          # failures cost a quarter of the time
    (5.0, 30.0, 600.0),
    (0.5, 1200.0, 2 * HOUR),      # restart-dominated, as at scale
])
def test_goodput_and_lost_work_match_a_renewal_monte_carlo_of_2000_failures(delta, restart, mtbf):
    tau = daly_interval(delta, mtbf)
    mc = simulate_renewal(tau, delta, restart, mtbf, failures=2000, seed=28)
    measured, lost = mc.goodput, mc.lost_per_failure
    assert mc.failures >= 2000
    expected = expected_goodput(tau, delta, restart, mtbf)
    assert expected < 0.9            # failures matter here, so 5 % is a real bound
    assert measured == pytest.approx(expected, rel=0.05)
    assert lost == pytest.approx(lost_work(tau + delta, mtbf), rel=0.05)


def test_a_planned_candidates_goodput_matches_the_monte_carlo(planner_70b):
    """On the planner's own step, checkpoint and restart times for LLaMA-2-70B on 4096
    clusters, with a cluster MTBF 100x shorter than the profile's, so failures cost a third."""
    spec = failure_spec(load_platform("mt3000").with_overrides(cluster_mtbf="2027h"))
    ev = planner_70b.plan(4096, 1024, "ratrain").best
    est = estimate(planner_70b.stages(ev.cand.P, ev.cand.T, ev.cand.balance).trainable, ev.cand, ev.t_step, spec)
    tau = est.every * ev.t_step
    mc = simulate_renewal(tau, est.checkpoint.write_time, est.restart, est.mtbf, 3000, seed=4096)
    measured, lost = mc.goodput, mc.lost_per_failure
    assert est.goodput < 0.95
    assert measured == pytest.approx(est.goodput, rel=0.05)
    assert est.steps_per_hour == pytest.approx(est.goodput * HOUR / ev.t_step)
    assert lost == pytest.approx(est.lost_per_failure, rel=0.05)


def test_goodput_on_the_system_vms_measured_step_save_and_restart_matches_the_monte_carlo():
    """The tiny model's plan compiled and its step, checkpoint save and read-back measured on
    the system VM; failures every 15 min on its 4 clusters and a 2 min relaunch."""
    from ratc.vm.system.checkpoint import measure_checkpoint
    from ratc.vm.system.driver import compile_candidate, run_module

    platform = load_platform("mt3000").with_overrides(cluster_mtbf="1h", relaunch_time="2min")
    planner = Planner(trace_preset("tiny"), platform)
    ev = planner.plan(4, 16).best
    module = compile_candidate(planner.model, ev.cand, platform, planner)
    step = run_module(module, platform, memory_limit=False)[1].step_seconds
    spec = failure_spec(platform)
    vm = measure_checkpoint(module, platform, spec)
    mtbf, restart = system_mtbf(spec.cluster_mtbf, ev.cand.clusters), spec.relaunch_time + vm.read
    tau = steps_between_checkpoints(daly_interval(vm.write, mtbf), step, vm.write, restart, mtbf) * step
    expected = expected_goodput(tau, vm.write, restart, mtbf)
    mc = simulate_renewal(tau, vm.write, restart, mtbf, 2000, seed=64)
    assert mc.failures >= 2000 and expected < 0.9
    assert mc.goodput == pytest.approx(expected, rel=0.05)
    assert mc.lost_per_failure == pytest.approx(lost_work(tau + vm.write, mtbf), rel=0.05)
    # the VM's save is the planner's closed form here (one stage size, ports bind)
    est = estimate(planner.stages(ev.cand.P, ev.cand.T, ev.cand.balance).trainable, ev.cand, step, spec)
    assert vm.write == pytest.approx(est.checkpoint.write_time, rel=1e-3)


def test_the_renewal_monte_carlo_is_seeded_and_refuses_a_restart_that_never_completes():
    def sample(seed):
        return simulate_renewal(60.0, 5.0, 30.0, 600.0, 500, seed=seed)

    assert sample(3) == sample(3) != sample(4)
    with pytest.raises(RatcError, match="almost never completes"):
        simulate_renewal(60.0, 5.0, 3600.0, 60.0, 2000)
    with pytest.raises(RatcError, match="tau must be a positive time"):
        simulate_renewal(0.0, 5.0, 30.0, 600.0)


def test_checkpoint_interval_is_dalys_in_whole_steps():
    spec = failure_spec(load_platform("mt3000"))
    cand = Candidate(P=1, D=64, T=1, Z=1, b=1, A=1, act="fsr", pref="deadline")
    est = estimate([1e9], cand, 7.0, spec)
    assert est.daly == pytest.approx(daly_2006(est.checkpoint.write_time, est.mtbf))
    assert est.every in (math.floor(est.daly / 7.0), math.floor(est.daly / 7.0) + 1)
    # a step longer than the interval still checkpoints after every step
    assert estimate([1e9], cand, 1e7, spec).every == 1


@pytest.mark.parametrize("Z", [0, 1, 2, 3])
def test_checkpoint_holds_fp32_master_and_two_adam_moments_sharded_as_zero_shards_them(Z):
    """12 bytes per trainable parameter (fp32 master, AdamW m and v) and the step counter;
    a cluster reads back its ZeRO shard (all of its stage under ZeRO 0) and the replicas
    split the write of what they hold alike."""
    spec = failure_spec(load_platform("mt3000"))
    stages = [3e9, 2e9]        # trainable parameters per tensor-parallel rank of each stage
    cand = Candidate(P=2, D=8, T=2, Z=Z, b=1, A=4, act="fsr", pref="deadline")
    c = checkpoint_cost(stages, cand, spec)
    assert c.total_bytes == 12 * 2 * 5e9 + STEP_COUNTER_BYTES
    assert c.written_bytes == 12 * 3e9 / 8 + STEP_COUNTER_BYTES
    assert c.held_bytes == 12 * 3e9 / (1 if Z == 0 else 8) + STEP_COUNTER_BYTES
    assert c.write_time == pytest.approx(max(c.written_bytes / 3.7e9, c.total_bytes / 2e12))
    read_all = 2 * 8 * (12 * 5e9 / (1 if Z == 0 else 8) + 2 * STEP_COUNTER_BYTES)
    assert c.read_time == pytest.approx(max(c.held_bytes / 3.7e9, read_all / 2e12))


def test_a_models_checkpoint_is_12_bytes_per_trainable_parameter(planner_70b):
    res = planner_70b.plan(1024, 1024, "ratrain")
    report = failure_report(planner_70b, res, 3)
    m = planner_70b.model
    for row in report.rows:
        assert row.checkpoint.total_bytes == pytest.approx(12 * m.trainable_count + STEP_COUNTER_BYTES, rel=1e-9)


def test_more_clusters_fail_more_often_and_lose_more_goodput():
    spec = failure_spec(load_platform("mt3000").with_overrides(cluster_mtbf="20000h"))
    goodputs = [estimate([7e10 / n], Candidate(P=1, D=n, T=1, Z=3, b=1, A=1, act="fsr", pref="deadline"),
                         60.0, spec).goodput for n in (256, 1024, 4096)]
    assert goodputs == sorted(goodputs, reverse=True) and 0 < goodputs[-1] < goodputs[0] < 1


# -- the profiles and the command -----------------------------------------------------------------

def test_shipped_failure_parameters_come_from_llama3s_fleet():
    """419 unexpected interruptions in 54 days on 16,384 GPUs; Tectonic's 2 TB/s sustained."""
    per_gpu = 54 * 24 * 16384 / 419 * HOUR
    a800, mt3000 = failure_spec(load_platform("a800")), failure_spec(load_platform("mt3000"))
    assert a800.cluster_mtbf == pytest.approx(per_gpu, rel=1e-5)
    assert mt3000.cluster_mtbf == pytest.approx(4 * per_gpu, rel=1e-5)     # 4 clusters per chip
    assert a800.storage_bandwidth == mt3000.storage_bandwidth == 2e12


MT3000 = (PROFILE_DIR / "mt3000.toml").read_text()


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace('cluster_mtbf = "202708h"', 'cluster_mtbf = "0h"'), "[failures].cluster_mtbf: must be positive"),
    (lambda t: t.replace('cluster_mtbf = "202708h"', 'cluster_mtbf = "23 years"'), "[failures].cluster_mtbf: expected a time"),
    (lambda t: t.replace('storage_bandwidth = "2TB/s"', 'storage_bandwidth = "2TB"'), "[failures].storage_bandwidth"),
    (lambda t: t.replace('relaunch_time = "10min"', 'relaunch_time = "-10min"'), "[failures].relaunch_time: must not be negative"),
    (lambda t: t.replace('relaunch_time = "10min"', ''), "[failures]: missing key 'relaunch_time'"),
    (lambda t: t.replace('relaunch_time = "10min"', 'relaunch_time = "10min"\nmttr = "1h"'), "[failures]: unknown key 'mttr'"),
])
def test_bad_failure_parameters_say_what_and_where(edit, message):
    with pytest.raises(PlatformError) as info:
        parse_platform(edit(MT3000), "custom.toml")
    assert str(info.value).startswith("custom.toml") and message in str(info.value)


def without_failures() -> str:
    return MT3000[:MT3000.index("[failures]")]


def test_a_profile_without_failures_loads_and_refuses_failure_overrides():
    p = parse_platform(without_failures(), "plain.toml")
    assert "failures" not in p.sections
    with pytest.raises(PlatformError, match="plain.toml: cannot override 'cluster_mtbf': the profile has no .failures. table"):
        p.with_overrides(cluster_mtbf="1h")


PLAN = ["plan", "--preset", "tiny", "--clusters", "4", "--global-batch", "16", "--top", "3"]


def test_plan_failures_refuses_a_platform_without_a_failure_model(tmp_path, capsys):
    plain = tmp_path / "plain.toml"
    plain.write_text(without_failures())
    code = main([*PLAN, "--platform", str(plain), "--failures"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"platform 'mt3000' ({plain}) has no [failures] table" in err


def test_plan_failures_adds_a_table_and_leaves_the_plan_as_it_was(capsys):
    assert main(PLAN) == 0
    plain = capsys.readouterr().out
    assert main([*PLAN, "--failures"]) == 0
    priced = capsys.readouterr().out
    assert priced.startswith(plain.rstrip("\n") + "\n\nfailures: cluster MTBF 202708.00 h, so one every 50677.00 h on 4")
    rows = [line for line in priced.splitlines() if line[:4] in ("  1.", "  2.", "  3.")]
    assert len(rows) == 3 and all("%" in r for r in rows)
    assert "most useful steps per hour: " in priced


def test_plan_failures_json_adds_the_model_and_each_candidates_costs(capsys):
    assert main([*PLAN, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main([*PLAN, "--json", "--failures"]) == 0
    priced = json.loads(capsys.readouterr().out)
    model = priced.pop("failure_model")
    assert model["system_mtbf_s"] == pytest.approx(model["cluster_mtbf_s"] / 4)
    for entry in priced["top"]:
        f = entry.pop("failures")
        assert 0 < f["goodput"] < 1
        assert f["steps_per_hour"] == pytest.approx(f["goodput"] * HOUR / entry["step_time_s"])
        assert f["daly_interval_s"] == pytest.approx(daly_2006(f["write_time_s"], model["system_mtbf_s"]))
    assert priced == plain


def test_failure_durations_read_hours_and_minutes():
    from ratc.units import UnitError, parse_time

    assert (parse_time("3.5h"), parse_time("10min"), parse_time("2s")) == (12600.0, 600.0, 2.0)
    with pytest.raises(UnitError, match="expected a time in h, min, s, ms, us or ns"):
        parse_time("2 days")


def test_failure_parameters_leave_the_kernel_cache_keys_as_they_were():
    """Kernels do not depend on failures: a profile's key is the one it had without the
    table, and a what-if MTBF regenerates no kernel."""
    from ratc.codegen.tiling import platform_key

    shipped = load_platform("mt3000")
    assert platform_key(shipped) == platform_key(parse_platform(without_failures(), "plain.toml"))
    assert platform_key(shipped.with_overrides(cluster_mtbf="1h")) == platform_key(shipped)


def test_the_table_names_a_slower_candidate_that_keeps_more_useful_steps():
    """When a slower step keeps more useful steps per hour (e.g. its interval rounds to whole
    steps better), the failure table says so rather than crowning the fastest."""
    import dataclasses

    from ratc.planner.report import render_text

    planner = Planner(trace_preset("tiny"), load_platform("mt3000"))
    result = planner.plan(4, 16)
    report = failure_report(planner, result, 2)
    first, second = report.rows
    report = dataclasses.replace(report, rows=[first, dataclasses.replace(second, steps_per_hour=2 * first.steps_per_hour)])
    text = render_text(result, 64, top=2, failures=report)
    assert text.endswith(f"most useful steps per hour: 2. {result.feasible[1].cand.label()} "
                         "(not the fastest step: failures decide)\n")

"""Kernel VM: cycle model against closed forms from the profile, faults, DMA semantics."""

import math

import numpy as np
import pytest

from ratc.codegen.assembler import assemble
from ratc.platform import load_platform
from ratc.vm.kernel_vm import VMFault, run_program

P = load_platform("mt3000")
HEAD = """.kernel t
.dsps {dsps}
.buffer ddr A f16 [4, 64]
.buffer sm S f16 [64]
.buffer am M f16 [256]
.buffer am F f32 [256]
"""


def run(body: str, mode="full", dsps=1, inputs=None):
    return run_program(assemble(HEAD.format(dsps=dsps) + body, P, "t.rasm"), P, inputs, mode)


def both(body: str, **kw):
    full, timing = run(body, "full", **kw), run(body, "timing", **kw)
    assert full.cycles == timing.cycles
    return full


def test_register_interlocks_follow_profile_latencies():
    vl = P.vliw
    r = both("{ sldq q0, S[0] | vld v8, M[0] }\n{ vmacz v0, q0, v8 }\n{ vmac v0, q0, v8 }\n")
    # The VMAC waits for its operands, the second for the first's accumulators.
    assert r.cycles == max(vl.sld_latency, vl.vld_latency) + 2 * vl.vmac_latency


def test_independent_bundles_issue_one_per_cycle_and_loops_pay_the_branch_penalty():
    r = both("lp: loop 5 {\n { li r1, 1 | sbr lp }\n}\n{ li r2, 1 }\n")
    assert r.cycles == 6 + 4 * P.vliw.branch_penalty + P.vliw.alu_latency - 1


@pytest.mark.parametrize("dsps", [1, 4])
def test_ddr_dma_time_is_latency_plus_bytes_over_the_dsps_fair_share(dsps):
    r = both("{ dma 0, M[0], A[0, 0], 4, 64, 64, 64 }\n{ wait 0 }\n", dsps=dsps)
    clock = P.dsp.clock
    per_cycle = P.cluster.ddr_bandwidth / dsps / clock
    assert r.cycles == math.ceil(P.dma.ddr_latency * clock) + math.ceil(4 * 64 * 2 / per_cycle) + 1
    assert r.counts["ddr_bytes"] == 4 * 64 * 2 * dsps


def test_dma_on_one_engine_serializes_but_overlaps_with_compute():
    one = run("{ dma 0, M[0], A[0, 0], 4, 64, 64, 64 }\n{ wait 0 }\n", "timing").cycles
    two = run("{ dma 0, M[0], A[0, 0], 4, 64, 64, 64 }\n{ dma 1, M[0], A[0, 0], 4, 64, 64, 64 }\n"
              "{ wait 1 }\n", "timing").cycles
    transfer = math.ceil(4 * 64 * 2 / (P.cluster.ddr_bandwidth / P.dsp.clock))
    assert two == one + transfer  # the second transfer queues behind the first on the DDR engine
    busy = "lp: loop 100 {\n { vmacz v0, q0, v8 | sbr lp }\n}\n"
    overlapped = run("{ dma 0, M[0], A[0, 0], 4, 64, 64, 64 }\n" + busy + "{ wait 0 }\n", "timing").cycles
    assert overlapped == max(one, 1 + run(busy, "timing").cycles)


def test_dma_lands_only_when_waited_for():
    a = np.arange(256, dtype=np.float16).reshape(4, 64)
    early = "{ dma 0, M[0], A[0, 0], 4, 64, 64, 64 }\n{ vld v0, M[64] }\n{ wait 0 }\n{ vst v0, F[0] }\n" \
            "{ dma 1, A[0, 0], F[0], 1, 64, 64, 64 }\n{ wait 1 }\n"
    late = early.replace("{ vld v0, M[64] }\n{ wait 0 }\n", "{ wait 0 }\n{ vld v0, M[64] }\n")
    assert not run(early, inputs={"A": a}).ddr["A"][:64].any()
    assert (run(late, inputs={"A": a}).ddr["A"][:64] == a[1]).all()


def test_clip_zero_fills_outside_the_ddr_matrix_and_transposes():
    a = np.arange(256, dtype=np.float16).reshape(4, 64)
    body = ("{ li r1, 2 | li r2, 60 }\n{ dma 0, M[0], A[r1, r2], 4, 8, 4, 64, t clip }\n{ wait 0 }\n"
            "{ vld v0, M[0] }\n{ vst v0, F[0] }\n{ dma 1, A[0, 0], F[0], 1, 64, 64, 64 }\n{ wait 1 }\n")
    got = run(body, inputs={"A": a}).ddr["A"][:32].reshape(8, 4)
    want = np.zeros((4, 8), np.float16)
    want[:2, :4] = a[2:4, 60:64]
    assert (got == want.T).all()


def test_out_of_bounds_access_faults_with_bundle_address_and_buffer():
    with pytest.raises(VMFault, match=r"bundle @1 \(t.rasm:8:3\).*M\[250:314\] is outside buffer M"):
        run("{ li r3, 250 }\n{ vld v0, M[r3] }\n")
    with pytest.raises(VMFault, match=r"bundle @0 .*4x64 block at A\[1, 0\] is outside buffer A"):
        run("{ dma 0, M[0], A[1, 0], 4, 64, 64, 64 }\n{ wait 0 }\n")


def test_barrier_releases_after_the_last_arrival():
    r = both("{ barrier }\n{ li r1, 1 }\n", dsps=3)
    assert r.cycles == P.vliw.barrier_latency + 1 + P.vliw.alu_latency


@pytest.mark.parametrize("name, tolerance", [("mt3000", 1e-12), ("a800", 1e-3)])
def test_modeled_peak_equals_the_profile_peak(name, tolerance):
    p = load_platform(name)
    modeled = p.vliw.vmac_rows * p.vliw.vector_lanes * p.cluster.dsps * p.dsp.clock
    assert modeled == pytest.approx(p.cluster.peak_mac_rate, rel=tolerance)
    r = run_program(assemble(".kernel k\n.dsps 1\n{ vmacz v0, q0, v8 }\n", p), p, mode="timing")
    assert r.counts["macs"] == p.vliw.vmac_rows * p.vliw.vector_lanes


RACE_HEAD = """.kernel r
.dsps 2
.buffer gsm G f32 [128]
.buffer am M f32 [64]
"""


def _race_program(body: str):
    return assemble(RACE_HEAD + body, P, "race.rasm")


def test_two_dsps_writing_one_gsm_block_without_a_barrier_is_a_race():
    racy = "{ dma 0, G[0], M[0], 1, 64, 64, 64 }\n{ wait 0 }\n"
    with pytest.raises(VMFault, match=r"race on G: DSP 0 writes 1x64 at element 0 \(bundle @0 \(race.rasm:5:3\)\) "
                                      r"while DSP 1 writes"):
        run_program(_race_program(racy), P)
    # Each DSP its own half: no race.
    disjoint = "{ muli r1, r0, 64 }\n{ dma 0, G[r1], M[0], 1, 64, 64, 64 }\n{ wait 0 }\n"
    run_program(_race_program(disjoint), P)
    # Accumulating DMAs commute.
    run_program(_race_program(racy.replace("64, 64 }", "64, 64, add }")), P)


def test_a_barrier_orders_a_write_before_another_dsps_read():
    body = ("{ muli r1, r0, 64 }\n{ dma 0, G[r1], M[0], 1, 64, 64, 64 }\n{ wait 0 | remi r2, r0, 1 }\n"
            "{ addi r2, r1, 64 }\n{ remi r2, r2, 128 }\n{ dma 1, M[0], G[r2], 1, 64, 64, 64 }\n{ wait 1 }\n")
    with pytest.raises(VMFault, match="race on G"):
        run_program(_race_program(body), P)  # each DSP reads the half the other one writes
    run_program(_race_program(body.replace("{ addi r2, r1, 64 }", "{ barrier }\n{ addi r2, r1, 64 }")), P)

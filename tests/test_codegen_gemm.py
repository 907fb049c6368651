"""GEMM codegen: numerics against numpy, timing-mode exactness, tiles, Table 5 utilization."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratc.codegen.assembler import assemble
from ratc.codegen.exec_profile import gemm_time, read_execution_profile, write_execution_profile
from ratc.codegen.gemm import _GemmGen, generate_gemm
from ratc.codegen.tiling import GemmTiles, footprint, ranked_tilings
from ratc.errors import RatcError
from ratc.platform import load_platform

P = load_platform("mt3000")


def check_gemm(m, n, k, seed=0, **tiles):
    kernel = generate_gemm(P, m, n, k, **tiles)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    result = kernel.run({"A": a, "B": b})
    c = result.ddr["C"].reshape(m, n).astype(np.float32)
    want = a.astype(np.float32) @ b.astype(np.float32)
    # FP32 accumulation of exact FP16 products, then one FP16 rounding of the result.
    np.testing.assert_allclose(c, want, rtol=2 ** -10, atol=1e-3 * np.sqrt(k))
    assert result.cycles == kernel.run(mode="timing").cycles
    return kernel, result


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 70), st.integers(1, 150), st.integers(1, 60), st.integers(0, 2 ** 16))
def test_gemm_matches_numpy_on_random_shapes(m, n, k, seed):
    check_gemm(m, n, k, seed)


@settings(max_examples=8, deadline=None)
@given(st.sampled_from([(1, 2), (2, 3), (3, 1), (2, 2), (4, 1)]), st.integers(1, 2), st.integers(1, 2),
       st.integers(1, 3), st.integers(20, 90), st.integers(20, 200), st.integers(5, 50))
def test_gemm_matches_numpy_with_forced_multi_dsp_tilings(grid, md_groups, nd_vecs, kt_mult, m, n, k):
    gm, gn = grid
    kt = math.lcm(gm, gn, 2) * kt_mult
    check_gemm(m, n, k, gm=gm, gn=gn, md=32 * md_groups, nd=64 * nd_vecs, kt=kt, groups=8)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 6000), st.integers(1, 9000))
def test_block_runs_equal_the_step_by_step_signatures(m, n, k):
    # The emitter enumerates only change points, so a 10**9-column GEMM emits in under a
    # second; the oracle is every (block, step) signature, run-length encoded.
    gen = _GemmGen(P, m, n, k, ranked_tilings(m, n, k, P)[0][1])
    every = []
    for b in range(gen.blocks):
        steps = []
        for s in range(gen.ns):
            sig = gen.step_sig(b, s)
            if steps and steps[-1][0] == sig:
                steps[-1][1] += 1
            else:
                steps.append([sig, 1])
        block = [tuple(run) for run in steps]
        if every and every[-1][0] == block:
            every[-1][1] += 1
        else:
            every.append([block, 1])
    assert gen.block_runs() == [tuple(run) for run in every]


SHAPES = [(1, 1, 1), (7, 3, 5), (33, 65, 17), (64, 64, 64), (96, 130, 40), (128, 64, 200),
          (50, 300, 24), (200, 70, 90), (31, 257, 33), (129, 129, 12)]


@pytest.mark.parametrize("shape", SHAPES)
def test_timing_mode_equals_full_execution(shape):
    kernel, result = check_gemm(*shape, gm=2, gn=2, md=32, nd=64, kt=8)
    assert result.counts["macs"] >= shape[0] * shape[1] * shape[2]


def test_tile_options_change_cycles_deterministically():
    base = generate_gemm(P, 256, 256, 256, gm=4, gn=6, md=64, nd=64, kt=24)
    again = generate_gemm(P, 256, 256, 256, gm=4, gn=6, md=64, nd=64, kt=24)
    other = generate_gemm(P, 256, 256, 256, gm=4, gn=6, md=64, nd=64, kt=48)
    assert base.cycles == again.cycles and base.text == again.text
    assert other.cycles != base.cycles


def test_generated_text_assembles_to_the_same_program():
    kernel = generate_gemm(P, 100, 200, 300)
    assert kernel.name == "gemm_100x200x300_f16"
    assert assemble(kernel.text, P) == kernel.program


def test_tilings_that_overflow_memory_are_rejected():
    with pytest.raises(RatcError, match="AM needs"):
        generate_gemm(P, 1024, 1024, 1024, gm=1, gn=1, md=512, nd=512, kt=96)
    with pytest.raises(RatcError, match="unknown GEMM tile option"):
        generate_gemm(P, 64, 64, 64, tile=3)
    with pytest.raises(RatcError, match="multiple of lcm"):
        generate_gemm(P, 64, 64, 64, gm=3, gn=1, kt=4)


def test_a_fixed_k_step_searches_only_the_grids_it_fits():
    """kt=64 leaves (gm, gn) grids whose lcm with the unroll divides 64 (the README's --tiles
    example, which used to pick gm=8, gn=3 and then reject it)."""
    kernel = generate_gemm(P, 2048, 4096, 4096, kt=64, md=128)
    o = kernel.options
    assert (o["kt"], o["md"]) == (64, 128) and 64 % math.lcm(o["gm"], o["gn"], o["unroll"]) == 0
    check_gemm(96, 64, 160, kt=32)       # and it computes the product
    with pytest.raises(RatcError, match=r"kt=7 is not a multiple of lcm\(gm, gn, unroll\)"):
        generate_gemm(P, 64, 64, 64, kt=7)


TABLE5 = [(2048, 4096, 4096), (2048, 11008, 4096), (2048, 4096, 11008), (2048, 6656, 6656), (2048, 8192, 8192)]


@pytest.mark.parametrize("shape", TABLE5)
def test_table5_shapes_reach_80_percent_mac_utilization_within_capacities(shape):
    kernel = generate_gemm(P, *shape)
    fp = footprint(GemmTiles(**kernel.options), P.vliw.vmac_rows)
    assert fp["sm"] <= P.dsp.sm_size and fp["am"] <= P.dsp.am_size and fp["gsm"] <= P.cluster.gsm_size
    stats = kernel.stats()
    assert stats.mac_utilization >= 0.80
    # No kernel beats its own roofline.
    assert stats.seconds >= stats.roofline_s


def test_execution_profile_round_trip(tmp_path):
    path = tmp_path / "profile.json"
    table = write_execution_profile(P, [(64, 64, 64), (128, 256, 64)], path)
    assert read_execution_profile(path) == {(64, 64, 64): gemm_time(P, 64, 64, 64),
                                            (128, 256, 64): gemm_time(P, 128, 256, 64)}
    entry = json.loads(path.read_text())["gemm"][0]
    assert 0 < entry["mac_utilization"] <= 1 and entry["cycles"] > 0
    assert table["platform"] == "mt3000"


def test_gemm_generates_and_runs_on_the_gpu_profile_too():
    a800 = load_platform("a800")
    kernel = generate_gemm(a800, 70, 130, 50)
    assert kernel.options["groups"] * a800.vliw.vmac_rows + 2 <= a800.vliw.vector_registers
    a, b = np.ones((70, 50), np.float16), np.full((50, 130), 0.5, np.float16)
    result = kernel.run({"A": a, "B": b})
    assert (result.ddr["C"] == 25).all() and result.cycles == kernel.cycles

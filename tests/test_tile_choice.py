"""The GEMM tile chooser: the kernel VM's fastest of the estimate's shortlist, deterministic, cached by version."""

import math

import pytest

from ratc.codegen import kernel_cache, tile_choice
from ratc.codegen.gemm import generate_gemm
from ratc.codegen.tiling import ranked_tilings
from ratc.platform import load_platform

P = load_platform("mt3000")
SMALL = (64, 64, 256)


def estimate_pick(*shape):
    """The tiling the analytic estimate ranks first."""
    return ranked_tilings(*shape, P)[0][1]


def vm_cycles(shape, tiles) -> int:
    """The oracle: cycles of the kernel generated with every tile value fixed (no chooser involved)."""
    return generate_gemm(P, *shape, **vars(tiles)).cycles


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty choice memo and kernel cache."""
    monkeypatch.setenv("RATC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tile_choice, "_CHOSEN", {})


def test_chooser_with_every_candidate_picks_the_brute_force_fastest(fresh, monkeypatch):
    ranked = [t for _, t in ranked_tilings(*SMALL, P)]
    cycles = [vm_cycles(SMALL, t) for t in ranked]
    fastest = ranked[cycles.index(min(cycles))]      # first of equals: the estimate's order
    monkeypatch.setattr(tile_choice, "SHORTLIST", len(ranked))
    tiles, timed = tile_choice.choose_gemm_tiles(P, *SMALL)
    assert (tiles, timed) == (fastest, min(cycles))
    assert min(cycles) < cycles[0]                   # the estimate's own pick is not the fastest here


def test_chooser_picks_the_fastest_of_its_shortlist_and_never_loses_to_the_estimate(fresh):
    shape = (128, 256, 96)
    short = tile_choice.shortlist(ranked_tilings(*shape, P), shape[2])
    assert len(short) > tile_choice.SHORTLIST        # the few-K-step tilings joined the estimate's best
    cycles = [vm_cycles(shape, t) for t in short]
    kernel = generate_gemm(P, *shape)
    assert kernel.cycles == min(cycles) == kernel.run(mode="timing").cycles
    assert kernel.options == vars(short[cycles.index(min(cycles))])
    assert kernel.cycles <= vm_cycles(shape, estimate_pick(*shape))


def test_per_head_qk_gemm_runs_full_k_and_at_least_15_percent_faster(fresh):
    shape = (2048, 2048, 128)                        # llama2-7b's per-head S = Q K^T
    tiles, cycles = tile_choice.choose_gemm_tiles(P, *shape)
    assert tiles.kt >= 128 and math.ceil(128 / tiles.kt) == 1
    assert cycles <= 0.85 * vm_cycles(shape, estimate_pick(*shape))


def test_a_gemm_the_estimates_tiling_runs_near_peak_times_only_that_tiling(fresh, monkeypatch):
    timed = []
    monkeypatch.setattr(tile_choice, "time_tiling", lambda *a: timed.append(a[-1]) or 6_423_018)
    assert tile_choice.choose_gemm_tiles(P, 2048, 4096, 4096) == (estimate_pick(2048, 4096, 4096), 6_423_018)
    assert timed == [estimate_pick(2048, 4096, 4096)]      # 90 % MAC utilization: no race


def test_a_large_gemm_the_estimate_misjudges_is_raced(fresh):
    shape = (28672, 8192, 2048)                      # llama2-70b's FFN-down weight gradient
    tiles, cycles = tile_choice.choose_gemm_tiles(P, *shape)
    assert cycles <= 0.9 * vm_cycles(shape, estimate_pick(*shape))


def test_ties_go_to_the_estimates_order(monkeypatch):
    ranked = [t for _, t in ranked_tilings(*SMALL, P)][:3]
    monkeypatch.setattr(tile_choice, "time_tiling", lambda *a: 1000)
    assert tile_choice.race(P, *SMALL, ranked[::-1]) == (ranked[-1], 1000)


def test_choice_and_kernel_text_are_deterministic(fresh, monkeypatch):
    first = generate_gemm(P, 96, 128, 40)
    monkeypatch.setattr(tile_choice, "_CHOSEN", {})
    monkeypatch.setenv("RATC_CACHE_DIR", "off")
    second = generate_gemm(P, 96, 128, 40)
    assert (first.options, first.text, first.cycles) == (second.options, second.text, second.cycles)


def test_a_cached_choice_is_reused_and_a_new_chooser_version_misses_it(fresh, monkeypatch):
    chosen = tile_choice.choose_gemm_tiles(P, *SMALL)
    monkeypatch.setattr(tile_choice, "_CHOSEN", {})
    monkeypatch.setattr(tile_choice, "time_tiling", lambda *a: pytest.fail("timed a cached choice"))
    assert tile_choice.choose_gemm_tiles(P, *SMALL) == chosen
    key = tile_choice.choice_key(P, *SMALL, ())
    monkeypatch.setattr(tile_choice, "CHOOSER_VERSION", tile_choice.CHOOSER_VERSION + 1)
    assert tile_choice.choice_key(P, *SMALL, ()) != key
    timed = []
    monkeypatch.setattr(tile_choice, "_CHOSEN", {})
    monkeypatch.setattr(tile_choice, "time_tiling", lambda *a: timed.append(1) or 5000)
    tile_choice.choose_gemm_tiles(P, *SMALL)
    assert timed


def test_the_choice_key_names_the_chooser_settings_and_the_fixed_options(monkeypatch):
    key = tile_choice.choice_key(P, *SMALL, (("kt", 64),))
    assert key[1][0] == tile_choice.CHOOSER_VERSION and key[-1] == [["kt", 64]]
    monkeypatch.setattr(tile_choice, "SHORTLIST", tile_choice.SHORTLIST + 1)
    assert tile_choice.choice_key(P, *SMALL, (("kt", 64),)) != key


def test_a_cached_choice_of_unknown_fields_is_not_trusted(fresh, monkeypatch):
    key = tile_choice.choice_key(P, *SMALL, ())
    good = vars(estimate_pick(*SMALL))
    for tiles, bad in (({"gm": 1}, 7), ({**good, "kt": "32"}, 7), (good, "7"), (good, 0)):
        kernel_cache.store(key, {"tiles": tiles, "cycles": bad})
        monkeypatch.setattr(tile_choice, "_CHOSEN", {})
        chosen, cycles = tile_choice.choose_gemm_tiles(P, *SMALL)
        assert cycles != 7 and cycles == vm_cycles(SMALL, chosen)

"""The GEMM tile chooser: the analytic estimate shortlists tilings, the kernel VM picks among them.

The estimate (tiling.estimate_cycles) ranks thousands of tilings in a fraction of a second
but charges every C block a pipeline fill that the generated code's K-step stream hides
across blocks, so it underrates tilings with few K steps: for the per-head 2048x2048x128
GEMM it ranks the full-K tiling (kt = 128) 90th, and that tiling runs 17 % faster. The
chooser therefore times a shortlist on the kernel VM's timing mode and keeps the fewest
cycles. Timing costs 0.02-0.2 s per tiling, so the estimate's own pick is timed first (the
kernel it becomes reuses those cycles) and the rest of the shortlist only when that pick runs
below RACE_BELOW MAC utilization: most large GEMMs run at 84-91 % and gain under 2 % from the
race. Each choice is kept in memory and in the kernel cache under a key with CHOOSER_VERSION.
"""

from __future__ import annotations

import math

from ratc.codegen import kernel_cache
from ratc.codegen.tiling import (GemmTiles, check_options, check_tiles, fixed_tiles, platform_key,
                                 ranked_tilings)

# Bump when the shortlist or the gate changes what is chosen: cached choices then miss.
CHOOSER_VERSION = 1
SHORTLIST = 8           # the estimate's best tilings, all timed in a race
FEW_STEPS = (1, 2)      # K-step counts whose best tilings join the race ...
PER_STEPS = 2           # ... this many of each
RACE_BELOW = 0.75       # time the shortlist when the estimate's pick runs below this MAC utilization

_CHOSEN: dict[tuple, tuple[GemmTiles, int]] = {}


def shortlist(ranked: list, k: int) -> list[GemmTiles]:
    """The estimate's SHORTLIST best, then the best PER_STEPS of each K-step count in FEW_STEPS."""
    picked = [t for _, t in ranked[:SHORTLIST]]
    for steps in FEW_STEPS:
        few = [t for _, t in ranked if math.ceil(k / t.kt) == steps]
        picked += [t for t in few[:PER_STEPS] if t not in picked]
    return picked


def time_tiling(platform, m: int, n: int, k: int, tiles: GemmTiles) -> int:
    """Kernel-VM cycles (timing mode) of the GEMM generated with these tiles."""
    from ratc.codegen.gemm import generate_program
    from ratc.vm.kernel_timing import run_timing

    return run_timing(generate_program(platform, m, n, k, tiles), platform)


def race(platform, m: int, n: int, k: int, tilings: list[GemmTiles], first_cycles: int | None = None
         ) -> tuple[GemmTiles, int]:
    """The fewest-cycles tiling on the kernel VM and its cycles (ties: the earlier; first_cycles: the first's)."""
    timed = [(first_cycles if i == 0 and first_cycles is not None else time_tiling(platform, m, n, k, t), i)
             for i, t in enumerate(tilings)]
    cycles, best = min(timed)
    return tilings[best], cycles


def utilization(platform, m: int, n: int, k: int, cycles: float) -> float:
    """MAC utilization of a GEMM that takes `cycles` on one cluster."""
    per_cycle = platform.vliw.vmac_rows * platform.vliw.vector_lanes * platform.cluster.dsps
    return m * n * k / (cycles * per_cycle)


def _choose(platform, m: int, n: int, k: int, fixed: tuple) -> tuple[GemmTiles, int]:
    ranked = ranked_tilings(m, n, k, platform, fixed)
    first = ranked[0][1]
    cycles = time_tiling(platform, m, n, k, first)
    if utilization(platform, m, n, k, cycles) >= RACE_BELOW:
        return first, cycles
    return race(platform, m, n, k, shortlist(ranked, k), first_cycles=cycles)


def choice_key(platform, m: int, n: int, k: int, fixed: tuple) -> list:
    """The kernel-cache key of a tile choice: the chooser's version and settings, platform, shape, options."""
    settings = [CHOOSER_VERSION, SHORTLIST, list(FEW_STEPS), PER_STEPS, RACE_BELOW]
    return ["gemm-tiles", settings, list(platform_key(platform)), [m, n, k], [list(kv) for kv in fixed]]


def _load(key) -> tuple[GemmTiles, int] | None:
    entry = kernel_cache.load(key)
    if entry is None:
        return None
    tiles, cycles = entry.get("tiles"), entry.get("cycles")
    if (not isinstance(tiles, dict) or set(tiles) != set(GemmTiles.__dataclass_fields__)
            or any(type(v) is not int or v < 1 for v in tiles.values()) or type(cycles) is not int or cycles < 1):
        return None                 # not a choice this chooser wrote: choose again
    return GemmTiles(**tiles), cycles


def choose_gemm_tiles(platform, m: int, n: int, k: int, **options) -> tuple[GemmTiles, int | None]:
    """The tiling a GEMM is generated with and its kernel-VM cycles (None when options fix gm, gn, md, nd, kt)."""
    check_options(m, n, k, options)
    tiles = fixed_tiles(platform, options)
    if tiles is not None:
        return tiles, None
    fixed = tuple(sorted(options.items()))
    memo = (platform_key(platform), m, n, k, fixed)
    if memo not in _CHOSEN:
        key = choice_key(platform, m, n, k, fixed)
        chosen = _load(key)
        if chosen is None:
            chosen = _choose(platform, m, n, k, fixed)
            kernel_cache.store(key, {"tiles": dict(vars(chosen[0])), "cycles": chosen[1]})
        _CHOSEN[memo] = chosen
    check_tiles(_CHOSEN[memo][0], platform)
    return _CHOSEN[memo]

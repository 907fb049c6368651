"""GEMM tilings under the SM/AM/GSM capacities, ranked by an analytic cycle estimate."""

from __future__ import annotations

import math
from dataclasses import dataclass
from ratc.errors import RatcError


@dataclass(frozen=True)
class GemmTiles:
    """One GEMM tiling.

    gm x gn DSPs each own an md x nd block of C per cluster block (Mc = gm*md rows,
    Nc = gn*nd columns); K advances kt at a time. A micro-tile is mr = vmac_rows*groups
    rows by one vector of columns; the k loop is unrolled `unroll` times.
    """

    gm: int
    gn: int
    md: int
    nd: int
    kt: int
    groups: int = 8
    unroll: int = 2

    @property
    def dsps(self) -> int:
        return self.gm * self.gn


OPTION_NAMES = ("gm", "gn", "md", "nd", "kt", "groups", "unroll")


def default_groups(platform) -> int:
    """VMAC row groups per micro-tile: up to 8, as many as the register files hold twice over."""
    vl = platform.vliw
    return max(g for g in range(1, 9) if vl.vmac_rows * g + 2 <= vl.vector_registers and 2 * g <= vl.quad_registers)


def footprint(t: GemmTiles, rows: int) -> dict[str, int]:
    """Bytes of SM, AM (per DSP) and GSM (per cluster) the GEMM kernel declares."""
    mr = rows * t.groups
    return {
        "sm": 2 * t.kt * mr * 2,
        "am": 2 * t.kt * t.nd * 2 + t.md * t.nd * 4 + t.md * t.nd * 2,
        "gsm": 3 * t.kt * (t.gm * t.md + t.gn * t.nd) * 2,
    }


def check_tiles(t: GemmTiles, platform) -> None:
    """Raise RatcError naming the first violated constraint of a tiling."""
    vl = platform.vliw
    mr = vl.vmac_rows * t.groups
    problems = []
    if t.unroll < 2 or t.unroll % 2:
        problems.append(f"unroll={t.unroll} must be even (operand registers alternate between k steps)")
    if t.dsps > platform.cluster.dsps:
        problems.append(f"gm*gn={t.dsps} exceeds the cluster's {platform.cluster.dsps} DSPs")
    if t.md % mr or t.md < mr:
        problems.append(f"md={t.md} must be a positive multiple of the micro-tile rows {mr}")
    if t.nd % vl.vector_lanes or t.nd < vl.vector_lanes:
        problems.append(f"nd={t.nd} must be a positive multiple of the vector width {vl.vector_lanes}")
    step = math.lcm(t.gm, t.gn, t.unroll)
    if t.kt % step or t.kt < step:
        problems.append(f"kt={t.kt} must be a positive multiple of lcm(gm, gn, unroll)={step}")
    if mr + 2 > vl.vector_registers or 2 * t.groups > vl.quad_registers:
        problems.append(f"groups={t.groups} needs {mr + 2} vector and {2 * t.groups} quad registers")
    fp = footprint(t, vl.vmac_rows)
    caps = {"sm": platform.dsp.sm_size, "am": platform.dsp.am_size, "gsm": platform.cluster.gsm_size}
    for space, need in fp.items():
        if need > caps[space]:
            problems.append(f"{space.upper()} needs {need} bytes, capacity {caps[space]}")
    if problems:
        raise RatcError(f"invalid GEMM tiling {t}: " + "; ".join(problems))


def estimate_cycles(t: GemmTiles, m: int, n: int, k: int, platform) -> float:
    """Analytic cycle estimate used only to rank tilings (the VM gives the real count)."""
    vl = platform.vliw
    rows, lanes = vl.vmac_rows, vl.vector_lanes
    mr = rows * t.groups
    ddr_bpc = platform.cluster.ddr_bandwidth / t.dsps / platform.dsp.clock
    ddr_lat = platform.dma.ddr_latency * platform.dsp.clock
    blocks = math.ceil(m / (t.gm * t.md)) * math.ceil(n / (t.gn * t.nd))
    steps = math.ceil(k / t.kt)
    micro = t.groups * t.kt + mr + 3 * vl.vmac_latency + 2 * t.groups
    compute = (t.md // mr) * ((t.nd // lanes) * micro + 12) + 30
    slice_bytes = 2 * (t.md * t.kt // t.gn + t.kt // t.gm * t.nd)
    out_bytes = 2 * t.md * t.nd
    ddr = (slice_bytes + out_bytes / steps) / ddr_bpc + ddr_lat
    block = steps * max(compute, ddr) + slice_bytes / ddr_bpc + 2 * ddr_lat
    return blocks * block + out_bytes / ddr_bpc


def _candidates(total: int, unit: int, parts: int, cap: int) -> set[int]:
    """Per-DSP extents (multiples of unit, <= cap) that cover `total` with few blocks."""
    out = set()
    for blocks in range(1, 9):
        size = unit * math.ceil(math.ceil(total / parts / blocks) / unit)
        if unit <= size <= cap:
            out.add(size)
    out.add(unit)
    return out


def platform_key(platform) -> tuple:
    """A hashable identity of a platform's values (profiles with overrides differ)."""
    # The failure model prices restarts, not kernels: leaving it out keeps every kernel cached
    # before profiles had one (and keeps a what-if MTBF from regenerating them).
    return (platform.name, repr(sorted(item for item in platform.sections.items() if item[0] != "failures")))


def _kt_options(k: int, step: int, top: int) -> list[int]:
    """K steps worth trying: the largest, half of it, and the smallest covering K in as few steps."""
    kts = {top, max(step, top // 2 // step * step)}
    for steps in range(math.ceil(k / top), math.ceil(k / top) + 3):
        kts.add(step * math.ceil(math.ceil(k / steps) / step))
    return sorted(x for x in kts if step <= x <= top)


def _grid_tilings(m: int, n: int, k: int, platform, opts: dict, gm: int, gn: int):
    """The tilings of one gm x gn DSP grid that fit SM, AM and GSM, honouring fixed options."""
    vl = platform.vliw
    groups, unroll = opts.get("groups", default_groups(platform)), opts.get("unroll", 2)
    mr = vl.vmac_rows * groups
    step = math.lcm(gm, gn, unroll)
    mds = [opts["md"]] if "md" in opts else sorted(_candidates(m, mr, gm, 4096))
    nds = [opts["nd"]] if "nd" in opts else sorted(_candidates(n, vl.vector_lanes, gn, 4096))
    kmax = step * math.ceil(k / step)
    caps = {"sm": platform.dsp.sm_size, "am": platform.dsp.am_size, "gsm": platform.cluster.gsm_size}
    for md in mds:
        for nd in nds:
            if "kt" in opts:
                kts = [opts["kt"]]
            else:
                sm_kt = platform.dsp.sm_size // (4 * mr)
                am_kt = (platform.dsp.am_size - 6 * md * nd) // (4 * nd)
                top = min(kmax, sm_kt, am_kt) // step * step
                kts = _kt_options(k, step, top) if top >= step else []
            for kt in kts:
                t = GemmTiles(gm, gn, md, nd, kt, groups, unroll)
                if all(need <= caps[space] for space, need in footprint(t, vl.vmac_rows).items()):
                    yield t


def ranked_tilings(m: int, n: int, k: int, platform, fixed: tuple = ()) -> list[tuple[float, GemmTiles]]:
    """Every tiling that fits, as (estimated cycles, tiles), best first (ties in tile-value order)."""
    opts = dict(fixed)
    unroll = opts.get("unroll", 2)
    dsps = platform.cluster.dsps
    out, skipped = [], None
    for gm in ([opts["gm"]] if "gm" in opts else range(1, dsps + 1)):
        for gn in ([opts["gn"]] if "gn" in opts else range(1, dsps // gm + 1)):
            if gm * gn > dsps:
                continue
            if "kt" in opts and opts["kt"] % math.lcm(gm, gn, unroll):  # a fixed kt rules out grids it does not fit
                skipped = skipped or f"kt={opts['kt']} is not a multiple of lcm(gm, gn, unroll) at gm={gm}, gn={gn}"
                continue
            out.extend((estimate_cycles(t, m, n, k, platform), t)
                       for t in _grid_tilings(m, n, k, platform, opts, gm, gn))
    if not out:
        why = f" ({skipped}, ...)" if skipped else ""
        raise RatcError(f"no GEMM tiling of {m}x{n}x{k} satisfies the options {opts} "
                        f"and the SM/AM/GSM capacities{why}")
    # A stable sort: equal estimates keep the enumeration's order, which is the tile values' order.
    return sorted(out, key=lambda ct: ct[0])


def check_options(m: int, n: int, k: int, options: dict) -> None:
    """Raise RatcError for an unknown or non-positive tile option, or a non-positive shape."""
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise RatcError(f"unknown GEMM tile option {unknown[0]!r} (known: {', '.join(OPTION_NAMES)})")
    for key, value in options.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise RatcError(f"GEMM tile option {key}={value!r} must be a positive integer")
    if min(m, n, k) < 1:
        raise RatcError(f"GEMM shape {m}x{n}x{k} must be positive")


def fixed_tiles(platform, options: dict) -> GemmTiles | None:
    """The tiling the options fix completely (checked against the limits), else None."""
    if not {"gm", "gn", "md", "nd", "kt"} <= set(options):
        return None
    tiles = GemmTiles(**{"groups": default_groups(platform), **options})
    check_tiles(tiles, platform)
    return tiles

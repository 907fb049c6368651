"""The codegen pass's work: one kernel per distinct shape a program runs, tasks charged in cycles.

Each `life.unit` of the plan lists the kernels its Forward and its Backward call per
micro-batch (`fwd_kernels`, `bwd_kernels`: [kind, *shape, calls], from ratc.codegen.op_kernels) and the
seconds no kernel runs (`fwd_other`, `bwd_other`). `codegen` generates every distinct
kernel once (tile options per symbol may override the tile chooser), adds a
`life.kernel @symbol` op with its cycle count, and gives every Forward, Recover and
Backward task `kernels`, `calls` and `cycles` = sum(calls x kernel cycles) +
round(other x clock) (+ round(corun x clock) on the host of a co-running Recover), with
`dur` = cycles / clock. The system VM runs compute tasks for
exactly `cycles`, so a kernel that gets d cycles slower moves the work of a stage by
d x its calls.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

from ratc.codegen.exec_profile import kernel_profile, kernel_text
from ratc.codegen.op_kernels import kernel_symbol
from ratc.codegen.tiling import OPTION_NAMES
from ratc.errors import RatcError
from ratc.ir.attributes import SymbolRef
from ratc.ir.core import Operation
from ratc.step.unit_costs import recover_work

# Which unit attributes a task's kernels and the rest of its time come from (a Recover's:
# ratc.step.unit_costs.recover_work, by what its unit keeps).
# A zero-bubble W runs its dW GEMMs only: every kernel-less second of the Backward is its I's.
TASK_WORK = {"life.fwd": ("fwd_kernels", "fwd_other"), "life.bwd": ("bwd_kernels", "bwd_other"),
             "life.bwd_i": ("bwd_i_kernels", "bwd_other"), "life.bwd_w": ("bwd_w_kernels", None)}


def task_work(name: str, unit_attrs: dict) -> tuple | None:
    """(kernel list, other seconds) unit attributes of a Forward, Recover or Backward, else None."""
    if name == "life.recover":
        work = recover_work(unit_attrs)
        return work["kernels"], work["other"]
    return TASK_WORK.get(name)
# Tile options each generator accepts.
TILE_OPTIONS = {"gemm": OPTION_NAMES, "attn_bwd": ("br", "bc"), "flash_bwd": ("br", "bc"), "flash_fwd": ("br", "bc")}
_TILE = re.compile(r"([a-z]+)=(\d+)")


def parse_tiles(text: str) -> dict[str, dict[str, int]]:
    """'SYMBOL:key=v,key=v;SYMBOL:...' -> {symbol: {key: value}} (the codegen pass's `tiles`)."""
    out: dict[str, dict[str, int]] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        sym, sep, opts = part.partition(":")
        sym = sym.strip().lstrip("@")
        if not sep or not sym:
            raise RatcError(f"tiles: expected SYMBOL:key=value,... (e.g. gemm_2048x64x128_f16:kt=64), got {part!r}")
        if sym in out:
            raise RatcError(f"tiles: @{sym} is given twice")
        out[sym] = {}
        for item in filter(None, (o.strip() for o in opts.split(","))):
            m = _TILE.fullmatch(item)
            if not m:
                raise RatcError(f"tiles: expected key=integer for @{sym}, got {item!r}")
            out[sym][m.group(1)] = int(m.group(2))
    return out


def unit_kernels(units) -> dict[str, tuple[str, tuple]]:
    """symbol -> (kind, shape) of every kernel the plan's units call."""
    needed = {}
    for u in units:
        a = u.attributes
        if "fwd_kernels" not in a or "bwd_kernels" not in a:
            raise RatcError(f"life.unit #{a['index']} has no kernel lists (fwd_kernels, bwd_kernels); "
                            "re-plan it with this version of ratc")
        for kind, *shape, _ in a["fwd_kernels"] + a["bwd_kernels"] + a.get("core_kernels", []):
            needed[kernel_symbol(kind, tuple(shape))] = (kind, tuple(shape))
    return needed


def check_tile_options(kind: str, options, where: str) -> None:
    """Raise unless every tile option is one the kernel kind ('gemm', 'attn_bwd', 'flash_bwd', 'flash_fwd') takes."""
    bad = sorted(set(options) - set(TILE_OPTIONS[kind]))
    if bad:
        raise RatcError(f"{where}: unknown option '{bad[0]}' ({kind} kernels take {', '.join(TILE_OPTIONS[kind])})")


def _profiles(needed: dict, platform, tiles: dict[str, dict[str, int]]) -> dict[str, dict]:
    """symbol -> kernel_profile of each kernel the units need, with its `tiles` options."""
    unknown = sorted(set(tiles) - set(needed))
    if unknown:
        raise RatcError(f"tiles name @{unknown[0]}, which this program does not call "
                        f"(its kernels: {', '.join('@' + s for s in sorted(needed))})")
    profiles = {}
    for sym, (kind, shape) in sorted(needed.items()):
        opts = tiles.get(sym, {})
        check_tile_options(kind, opts, f"tiles for @{sym}")
        try:
            profiles[sym] = kernel_profile(platform, kind, shape, **opts)
        except RatcError as exc:
            raise RatcError(f"kernel @{sym}: {exc}") from None
    return profiles


def _kernel_tiles(kind: str, entry: dict) -> dict:
    """The tile options a life.kernel op records of a kernel_profile entry."""
    return {k: v for k, v in sorted(entry["tiles"].items()) if k in TILE_OPTIONS[kind]}


def codegen(module, platform, tiles: dict[str, dict[str, int]] | None = None) -> list[Operation]:
    """Generate the program's kernels into `life.kernel` ops and charge its tasks; returns the ops."""
    from ratc.lifecycle.lowering import find_pipeline, find_plan

    plan, pipe = find_plan(module), find_pipeline(module)
    units = plan.region.ops
    needed = unit_kernels(units)
    profiles = _profiles(needed, platform, tiles or {})
    clock = platform.dsp.clock
    charges: dict = {}   # (unit, kernels key) -> (symbol refs, calls, cycles): alike for every micro-batch
    for stage in pipe.region.ops:
        for op in stage.region.ops:
            work = task_work(op.name, units[op.attributes.get("unit", 0)].attributes)
            if work is None:
                continue
            kernels_key, other_key = work
            key = (op.attributes["unit"], kernels_key)
            if key not in charges:
                u = units[key[0]].attributes
                refs, calls, cycles = [], [], 0
                for kind, *shape, n in u[kernels_key]:
                    sym = kernel_symbol(kind, tuple(shape))
                    refs.append(SymbolRef(sym))
                    calls.append(n)
                    cycles += n * profiles[sym]["cycles"]
                other = u[other_key] if other_key is not None else 0.0
                charges[key] = (refs, calls, cycles + int(round(other * clock)))
            refs, calls, cycles = charges[key]
            # a host of a co-running Recover (fsr) keeps what the pair adds
            cycles += int(round(op.attributes.get("corun", 0.0) * clock))
            op.attributes.update(kernels=list(refs), calls=list(calls), cycles=cycles, dur=cycles / clock)
    ops = [Operation("life.kernel", attributes={
        "kind": needed[sym][0], "shape": list(needed[sym][1]), "cycles": int(e["cycles"]),
        "mac_util": float(e["mac_utilization"]), "ddr_bytes": int(e["ddr_bytes"]),
        "tiles": _kernel_tiles(needed[sym][0], e)},
        sym_name=sym) for sym, e in sorted(profiles.items())]
    # Kernels sit between the plan and the pipeline; re-running codegen replaces them.
    body = module.body
    rest = [op for op in body.ops if op.name != "life.kernel"]
    at = rest.index(pipe)
    for op in ops:
        op.block = body
    body.ops[:] = rest[:at] + ops + rest[at:]
    return ops


def retiled_kernels(module, platform) -> tuple:
    """((kind, shape), ((option, value), ...)) of the program's kernels whose tiles are not the
    default choice (the codegen pass's `tiles`), for an execution profile of its kernels."""
    return _retiled([(op.attributes["kind"], tuple(op.attributes["shape"]), op.attributes["tiles"])
                     for op in module.body.ops if op.name == "life.kernel"], platform)


def retiled_by(plan_units, platform, tiles: dict[str, dict[str, int]]) -> tuple:
    """retiled_kernels of the program the codegen pass would make of these plan units with
    `tiles`, without making it (tile errors as the pass reports them)."""
    needed = unit_kernels(plan_units)
    profiles = _profiles(needed, platform, tiles)
    return _retiled([(*needed[sym], _kernel_tiles(needed[sym][0], profiles[sym])) for sym in sorted(tiles)],
                    platform)


def _retiled(kernels, platform) -> tuple:
    found = []
    for kind, shape, tiles in kernels:
        default = kernel_profile(platform, kind, shape)["tiles"]
        if any(default.get(k) != v for k, v in tiles.items()):
            found.append(((kind, shape), tuple(sorted(tiles.items()))))
    return tuple(sorted(found))


def kernel_calls(module) -> dict[str, dict[int, int]]:
    """symbol -> {stage: calls per step} summed over the scheduled tasks."""
    from ratc.lifecycle.lowering import find_pipeline

    calls: dict = defaultdict(lambda: defaultdict(int))
    for stage in find_pipeline(module).region.ops:
        p = stage.attributes["stage"]
        for op in stage.region.ops:
            for ref, n in zip(op.attributes.get("kernels", ()), op.attributes.get("calls", ())):
                calls[ref.name][p] += n
    return {sym: dict(sorted(s.items())) for sym, s in sorted(calls.items())}


def kernel_entries(module, platform) -> list[dict]:
    """One kernels.json entry per life.kernel op: shape, cycles, seconds, tiles, calls per stage."""
    calls = kernel_calls(module)
    entries = []
    for op in module.body.ops:
        if op.name != "life.kernel":
            continue
        a = op.attributes
        entries.append({"kernel": op.sym_name, "kind": a["kind"], "shape": a["shape"], "cycles": a["cycles"],
                        "seconds": a["cycles"] / platform.dsp.clock, "mac_utilization": a["mac_util"],
                        "ddr_bytes": a["ddr_bytes"], "tiles": a["tiles"],
                        "calls_per_step": {str(s): c for s, c in calls.get(op.sym_name, {}).items()}})
    return entries


def program_files(module, platform) -> dict[str, str]:
    """kernels/<symbol>.rasm for every life.kernel op, and kernels.json describing them."""
    entries = kernel_entries(module, platform)
    if not entries:
        return {}
    from ratc.codegen.kernel_cache import remember_text_cycles

    files = {}
    for e in entries:
        text = kernel_text(platform, e["kind"], tuple(e["shape"]), **e["tiles"])
        files[f"kernels/{e['kernel']}.rasm"] = text
        # the cycles timed of the generated kernel are its text's: `ratc run` checks them
        remember_text_cycles(text, platform, e["cycles"])
    table = {"platform": platform.name, "clock_hz": platform.dsp.clock,
             "peak_mac_rate": platform.cluster.peak_mac_rate, "kernels": entries}
    files["kernels.json"] = json.dumps(table, indent=1, sort_keys=True) + "\n"
    return files


def kernel_shares(table: dict, step_seconds: float) -> list[tuple[str, int, float, int, float]]:
    """(kernel, cycles, MAC utilization, calls on its busiest stage, share of the step) rows."""
    rows = []
    for e in table["kernels"]:
        calls = max(e["calls_per_step"].values(), default=0)
        rows.append((e["kernel"], e["cycles"], e["mac_utilization"], calls, calls * e["seconds"] / step_seconds))
    return rows


def program_exec_profile(profile, module):
    """An execution profile as a compiled program's kernels run: its re-tiled kernels priced
    as they were generated (a program of another platform: the profile's defaults)."""
    from ratc.lifecycle.lowering import find_plan

    if not profile.runs_kernels or find_plan(module).attributes["platform"] != profile.platform.name:
        return profile     # another platform's tiles need not even be valid here
    return profile.with_tiles(retiled_kernels(module, profile.platform))

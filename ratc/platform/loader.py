"""Load and validate platform profiles (TOML) into typed, frozen sections."""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ratc import units
from ratc.platform.errors import KindError, PlatformError
from ratc.platform.host import Locator, check_host
from ratc.platform.schema import (KIND_SECTIONS, KIND_TABLES, OPTIONAL_SECTIONS, PARSERS, SECTIONS, TABLES, check_range,
                                  section_bounds, section_fields)

PROFILE_DIR = Path(__file__).parent / "profiles"
HOST_CLOCK = 1e9        # Hz: the system VM's cycle on a host profile (see Platform.cycles_per_second)




@dataclass(frozen=True)
class Platform:
    """A validated platform profile; each TOML section is a typed attribute."""

    name: str
    description: str
    source: str
    text: str
    sections: dict
    kind: str = "dsp"       # "dsp": a modelled machine ratc generates kernels for; "host": measured

    def __getattr__(self, item):
        sections = self.__dict__.get("sections", {})
        if item in sections:
            return sections[item]
        if item in _FOREIGN.get(self.__dict__.get("kind"), ()):
            raise KindError(f"{self.source}: platform {self.name!r} is a {self.kind} profile "
                            f"(kind = {self.kind!r} in [platform]); this needs a "
                            f"{'DSP' if self.kind == 'host' else 'host'} platform's [{item}]")
        raise AttributeError(item)

    @property
    def has_kernels(self) -> bool:
        """Whether ratc generates VLIW kernels for this platform (a DSP machine; a host runs torch)."""
        return self.kind == "dsp"

    @property
    def updates_in_compute_stream(self) -> bool:
        """Whether a rank's optimizer step (UpdateShard) runs in its compute stream, between its
        compute tasks: a host's rank is one thread that runs both; a DSP cluster's DDR engine
        runs the update beside its compute."""
        return self.kind == "host"

    def collectives_in_compute_stream(self, ranks):
        """Whether a program of `ranks` processes runs each rank's collectives in its compute
        stream (bool, or an array of them for an array of rank counts): on a host whose ranks'
        threads take every core a collective's work (gloo's threads copying and reducing) has no
        core of its own, and a collective issued beside compute ends after it, not under it (two
        ranks on two cores, 2026-12-05: a 1 MB all-gather alone 0.57 ms; issued before 2 ms of
        compute, it ended 0.8 ms after the compute). A DSP cluster's links run beside its compute."""
        if self.kind != "host":
            return np.zeros(np.shape(ranks), dtype=bool) if np.ndim(ranks) else False
        full = np.asarray(ranks) * self.host.threads >= self.host.cores
        return full if np.ndim(ranks) else bool(full)

    @property
    def cycles_per_second(self) -> float:
        """The clock the system VM counts a task's cycles in: the DSP clock, or for a host (which
        has none ratc models) a nominal 1 GHz, so that a cycle is one nanosecond."""
        return self.dsp.clock if self.has_kernels else HOST_CLOCK

    def with_overrides(self, **overrides: str) -> "Platform":
        """A copy with 'section.key' (or unique bare key) values replaced, parsed like TOML."""
        sections = dict(self.sections)
        for key, raw in overrides.items():
            sec_name, field_name = _resolve_key(key)
            if sec_name not in sections:
                raise PlatformError(f"{self.source}: cannot override {key!r}: the profile has no [{sec_name}] table")
            kind = section_fields(SECTIONS[sec_name])[field_name]
            try:
                value = _parse(kind, raw, section_bounds(SECTIONS[sec_name])[field_name])
            except units.UnitError as exc:
                raise PlatformError(f"{self.source}: [{sec_name}].{field_name}: {exc}") from None
            sections[sec_name] = dataclasses.replace(sections[sec_name], **{field_name: value})
        source = f"{self.source} with overrides"
        _check(source, self.kind, sections, _unlocated(source))
        return dataclasses.replace(self, sections=sections)


def _resolve_key(key: str) -> tuple[str, str]:
    if "." in key:
        sec, name = key.split(".", 1)
        if sec in SECTIONS and name in section_fields(SECTIONS[sec]):
            return sec, name
    else:
        owners = [s for s, cls in SECTIONS.items() if key in section_fields(cls)]
        if len(owners) == 1:
            return owners[0], key
    raise PlatformError(f"unknown platform parameter {key!r}")


def list_platforms() -> list[str]:
    """Names of the profiles shipped with ratc."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def load_platform(name_or_path: str | Path = "mt3000") -> Platform:
    """Load a shipped profile by name or a TOML file by path, validating every key."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.toml"
        if not path.exists():
            raise PlatformError(
                f"unknown platform {str(name_or_path)!r} (shipped: {', '.join(list_platforms())})")
    from ratc.input_files import not_a_file

    problem = not_a_file(str(path))
    if problem:
        raise PlatformError(f"{problem} (the platform profile)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PlatformError(f"{path}: not a UTF-8 text file (byte {exc.start})") from None
    return parse_platform(text, str(path))


def parse_platform(text: str, source: str) -> Platform:
    """Validate a profile's TOML text (source names it in errors)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlatformError(f"{source}: invalid TOML: {exc}") from None
    except RecursionError:
        raise PlatformError(f"{source}: invalid TOML: arrays or tables nested too deeply") from None
    meta = raw.pop("platform", {})
    if not isinstance(meta, dict) or "name" not in meta:
        raise PlatformError(f"{source}: missing [platform] table with a 'name'")
    for key in ("name", "description", "kind"):
        if not isinstance(meta.get(key, ""), str):
            raise PlatformError(f"{source}: [platform].{key} must be a string, got {meta[key]!r}")
    kind = meta.get("kind", "dsp")
    if kind not in KIND_SECTIONS:
        raise PlatformError(f"{source}: [platform].kind must be one of {', '.join(map(repr, KIND_SECTIONS))}, "
                            f"got {kind!r}")
    # A host profile's every error names its line (ratc calibrate writes it; people edit its tables).
    fail = _recalibrate(Locator(source, text).fail) if kind == "host" else _unlocated(source)
    own = [s for s in SECTIONS if s not in _FOREIGN[kind]]
    unknown = sorted(set(raw) - set(SECTIONS) - set(TABLES))
    if unknown:
        fail(f"unknown section [{unknown[0]}] (known: {', '.join(own + list(KIND_TABLES[kind]))})", unknown[0])
    foreign = sorted(set(raw) & _FOREIGN[kind])
    if foreign:
        fail(f"section [{foreign[0]}] belongs to {'host' if kind == 'dsp' else 'DSP'} platforms, but this profile "
             f"is kind = {kind!r}" + (" (write kind = \"host\" in [platform])" if kind == "dsp" else ""), foreign[0])
    sections = {}
    for sec_name in own:
        table = raw.get(sec_name)
        if table is None and sec_name in OPTIONAL_SECTIONS:
            continue
        sections[sec_name] = _section(fail, sec_name, SECTIONS[sec_name], table)
    for name in KIND_TABLES[kind]:
        sections[name] = _rows(fail, name, TABLES[name], raw.get(name))
    _check(source, kind, sections, fail)
    return Platform(name=str(meta["name"]), description=str(meta.get("description", "")),
                    source=source, text=text, sections=sections, kind=kind)


# The sections a profile of each kind may not have: the other kinds' own.
_FOREIGN = {kind: frozenset(s for other, secs in KIND_SECTIONS.items() if other != kind for s in secs)
            | frozenset(t for other, ts in KIND_TABLES.items() if other != kind for t in ts)
            for kind in KIND_SECTIONS}


def _recalibrate(fail):
    """A host profile's `fail`, which says how to get a current profile where a measured figure
    is missing (a profile of an older `ratc calibrate`: each release may measure more)."""
    def located(message: str, table: str | None = None, index: int | None = None, key: str | None = None):
        if ": missing key " in message or message.startswith("missing [["):
            message += "; a profile of an older `ratc calibrate`? measure this machine again: ratc calibrate -o FILE"
        fail(message, table, index, key)
    return located


def _unlocated(source: str):
    """The `fail` of a DSP profile: 'source: message', as its errors have always read."""
    def fail(message: str, table: str | None = None, index: int | None = None, key: str | None = None):
        raise PlatformError(f"{source}: {message}")
    return fail


def _section(fail, sec_name: str, cls: type, table, index: int | None = None):
    """One table of keys (or one entry of an array of tables) as its typed section."""
    shown = f"[{sec_name}]" if index is None else f"[[{sec_name}]] entry {index + 1}"
    if table is None:
        fail(f"missing section [{sec_name}]", None)
    if not isinstance(table, dict):
        fail(f"[{sec_name}] must be one table of keys, got {type(table).__name__} "
             f"(write [{sec_name}], not [[{sec_name}]] or {sec_name} = ...)", sec_name)
    kinds = section_fields(cls)
    extra = sorted(set(table) - set(kinds))
    if extra:
        fail(f"{shown}: unknown key {extra[0]!r} (known: {', '.join(kinds)})", sec_name, index, extra[0])
    missing = [k for k in kinds if k not in table]
    if missing:
        fail(f"{shown}: missing key {missing[0]!r}", sec_name, index)
    bounds = section_bounds(cls)
    values = {}
    for key, kind in kinds.items():
        try:
            values[key] = _parse(kind, table[key], bounds[key])
        except units.UnitError as exc:
            fail(f"{shown}.{key}: {exc}" if index is None else f"{shown}: {key}: {exc}", sec_name, index, key)
    return cls(**values)


def _rows(fail, name: str, cls: type, entries) -> tuple:
    """A host profile's [[name]] array of tables as a tuple of typed rows (at least one)."""
    if entries is None or entries == []:
        fail(f"missing [[{name}]] entries (a host profile holds at least one)", None)
    if not isinstance(entries, list):
        fail(f"[[{name}]] must be an array of tables, got {type(entries).__name__} "
             f"(write each entry under its own [[{name}]] line)", name)
    return tuple(_section(fail, name, cls, entry, i) for i, entry in enumerate(entries))


def _parse(kind: str, raw, bounds: tuple):
    value = PARSERS[kind](raw)
    check_range(value, *bounds, shown=raw)
    return value


def _check(source: str, kind: str, sections: dict, fail) -> None:
    """The cross-section checks of a profile of this kind."""
    if kind == "host":
        check_host(sections, fail)
    else:
        _check_peak(source, sections)
        _check_registers(source, sections)


# How far the [cluster] peak may sit from what the DSP model issues (rounded clocks).
PEAK_TOLERANCE = 0.005


def _check_peak(source: str, sections: dict) -> None:
    """The planner's peak and the kernel VM's DSPs must describe the same machine."""
    c, d, v = sections["cluster"], sections["dsp"], sections["vliw"]
    issued = c.dsps * v.vmac_rows * v.vector_lanes * d.clock
    if abs(issued - c.peak_mac_rate) > PEAK_TOLERANCE * c.peak_mac_rate:
        raise PlatformError(
            f"{source}: [cluster].peak_mac_rate is {c.peak_mac_rate:.4g} MAC/s but the DSP model issues "
            f"{issued:.4g} (dsps {c.dsps} x vmac_rows {v.vmac_rows} x vector_lanes {v.vector_lanes} "
            f"x clock {d.clock:.6g} Hz); make them agree")


def _check_registers(source: str, sections: dict) -> None:
    """The register files must hold the smallest GEMM micro-tile the code generator emits:
    one group of vmac_rows accumulators plus two operand vectors, and two quad registers
    (operands alternate between k steps)."""
    v = sections["vliw"]
    if v.vector_registers < v.vmac_rows + 2:
        raise PlatformError(f"{source}: [vliw].vector_registers is {v.vector_registers}, but a GEMM micro-tile "
                            f"needs vmac_rows + 2 = {v.vmac_rows + 2}")
    if v.quad_registers < 2:
        raise PlatformError(f"{source}: [vliw].quad_registers is {v.quad_registers}, but a GEMM micro-tile "
                            "needs at least 2")

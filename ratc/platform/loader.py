"""Load and validate platform profiles (TOML) into typed, frozen sections."""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ratc import units
from ratc.errors import RatcError
from ratc.platform.schema import OPTIONAL_SECTIONS, PARSERS, SECTIONS, check_range, section_bounds, section_fields

PROFILE_DIR = Path(__file__).parent / "profiles"


class PlatformError(RatcError):
    """A platform profile that is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class Platform:
    """A validated platform profile; each TOML section is a typed attribute."""

    name: str
    description: str
    source: str
    text: str
    sections: dict

    def __getattr__(self, item):
        sections = self.__dict__.get("sections", {})
        if item in sections:
            return sections[item]
        raise AttributeError(item)

    def with_overrides(self, **overrides: str) -> "Platform":
        """A copy with 'section.key' (or unique bare key) values replaced, parsed like TOML."""
        sections = dict(self.sections)
        for key, raw in overrides.items():
            sec_name, field_name = _resolve_key(key)
            if sec_name not in sections:
                raise PlatformError(f"{self.source}: cannot override {key!r}: the profile has no [{sec_name}] table")
            kind = section_fields(SECTIONS[sec_name])[field_name]
            value = _parse(self.source, sec_name, field_name, kind, raw,
                           section_bounds(SECTIONS[sec_name])[field_name])
            sections[sec_name] = dataclasses.replace(sections[sec_name], **{field_name: value})
        _check_peak(f"{self.source} with overrides", sections)
        _check_registers(f"{self.source} with overrides", sections)
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


def _parse(source: str, section: str, key: str, kind: str, raw, bounds: tuple = (None, None)):
    try:
        value = PARSERS[kind](raw)
        check_range(value, *bounds, shown=raw)
        return value
    except units.UnitError as exc:
        raise PlatformError(f"{source}: [{section}].{key}: {exc}") from None


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
    for key in ("name", "description"):
        if not isinstance(meta.get(key, ""), str):
            raise PlatformError(f"{source}: [platform].{key} must be a string, got {meta[key]!r}")
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        raise PlatformError(f"{source}: unknown section [{unknown[0]}] (known: {', '.join(SECTIONS)})")
    sections = {}
    for sec_name, cls in SECTIONS.items():
        table = raw.get(sec_name)
        if table is None and sec_name in OPTIONAL_SECTIONS:
            continue
        if table is None:
            raise PlatformError(f"{source}: missing section [{sec_name}]")
        if not isinstance(table, dict):
            raise PlatformError(f"{source}: [{sec_name}] must be one table of keys, got {type(table).__name__} "
                                f"(write [{sec_name}], not [[{sec_name}]] or {sec_name} = ...)")
        kinds = section_fields(cls)
        extra = sorted(set(table) - set(kinds))
        if extra:
            raise PlatformError(f"{source}: [{sec_name}]: unknown key {extra[0]!r} (known: {', '.join(kinds)})")
        missing = [k for k in kinds if k not in table]
        if missing:
            raise PlatformError(f"{source}: [{sec_name}]: missing key {missing[0]!r}")
        bounds = section_bounds(cls)
        sections[sec_name] = cls(**{k: _parse(source, sec_name, k, kind, table[k], bounds[k])
                                    for k, kind in kinds.items()})
    _check_peak(source, sections)
    _check_registers(source, sections)
    return Platform(name=str(meta["name"]), description=str(meta.get("description", "")),
                    source=source, text=text, sections=sections)


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

"""Physical quantities with units: parsing and formatting of bytes, rates and times."""

from __future__ import annotations

import math
import re

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"

# Decimal prefixes follow SI (1 GB = 1e9 B); binary ones follow IEC (1 GiB = 2**30 B).
_BYTE_SCALE = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}
# Hours and minutes: failure rates and restarts are quoted in them (a profile's [failures]).
_TIME_SCALE = {"h": 3600.0, "min": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9, "cycles": None}
_FREQ_SCALE = {"Hz": 1.0, "KHz": 1e3, "MHz": 1e6, "GHz": 1e9}
_RATE_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


def in_range(value, low: float, high: float = math.inf) -> bool:
    """Whether a value read from a file is a finite int or float (never a bool) in [low, high]."""
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(value) and low <= value <= high
    except OverflowError:       # an int past any float
        return False


class UnitError(ValueError):
    """A quantity string that does not parse in the expected unit."""


def _split(text: str, what: str) -> tuple[float, str]:
    m = re.fullmatch(rf"\s*({_NUMBER})\s*([A-Za-z/]*)\s*", text)
    if not m:
        raise UnitError(f"expected {what} such as {_EXAMPLES[what]!r}, got {text!r}")
    return float(m.group(1)), m.group(2)


_EXAMPLES = {
    "a byte size": "20GB",
    "a bandwidth": "30GB/s",
    "a time": "5us",
    "a frequency": "1.2GHz",
    "a rate": "8.1T MAC/s",
}


def parse_bytes(text: str | int) -> int:
    """Parse '20GB', '64KiB' or a plain integer into a byte count."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    value, unit = _split(str(text), "a byte size")
    if unit not in _BYTE_SCALE:
        raise UnitError(f"unknown byte unit {unit!r} in {text!r} (use one of {', '.join(_BYTE_SCALE)})")
    if not math.isfinite(value * _BYTE_SCALE[unit]):
        raise UnitError(f"byte size {text!r} is too large")
    return int(round(value * _BYTE_SCALE[unit]))


def parse_bandwidth(text: str) -> float:
    """Parse '30GB/s' or '3.7 GiB/s' into bytes per second."""
    value, unit = _split(str(text), "a bandwidth")
    if not unit.endswith("/s") or unit[:-2] not in _BYTE_SCALE:
        raise UnitError(f"expected a bandwidth in bytes per second such as '30GB/s', got {text!r}")
    return value * _BYTE_SCALE[unit[:-2]]


def parse_time(text: str) -> float:
    """Parse '5us', '1.5ms', '2s', '10min' or '3.5h' into seconds."""
    value, unit = _split(str(text), "a time")
    scale = _TIME_SCALE.get(unit)
    if scale is None:
        raise UnitError(f"expected a time in h, min, s, ms, us or ns, got {text!r}")
    return value * scale


def parse_frequency(text: str) -> float:
    """Parse '1.2GHz' into hertz."""
    value, unit = _split(str(text), "a frequency")
    if unit not in _FREQ_SCALE:
        raise UnitError(f"expected a frequency in Hz, MHz or GHz, got {text!r}")
    return value * _FREQ_SCALE[unit]


def parse_rate(text: str, noun: str) -> float:
    """Parse '8.1T MAC/s' (noun='MAC') into events per second."""
    m = re.fullmatch(rf"\s*({_NUMBER})\s*([KMGTP]?)\s*{re.escape(noun)}/s\s*", str(text))
    if not m:
        raise UnitError(f"expected a rate such as '8.1T {noun}/s', got {text!r}")
    return float(m.group(1)) * _RATE_PREFIX[m.group(2)]


def format_bytes(n: float) -> str:
    """Format a byte count with a binary-free decimal unit, e.g. '15.84 GB'."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def format_time(seconds: float) -> str:
    """Format seconds with a readable unit."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds / 1e-9:.1f} ns"

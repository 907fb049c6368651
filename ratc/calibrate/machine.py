"""Facts about this machine that a host profile records beside its measurements."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
FALLBACK_CACHE = 1 << 20    # when neither sysfs nor sysconf says (written so in the profile)


def cores() -> int:
    """Logical CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:      # not Linux
        return os.cpu_count() or 1


def _cache_levels() -> dict:
    """{level: bytes of its largest cache} as sysfs lists this CPU's caches (empty if it does not)."""
    sizes: dict = {}
    for index in sorted(CACHE_DIR.glob("index*")):
        try:
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        digits = size.rstrip("KM")
        if digits.isdigit():
            sizes[level] = max(sizes.get(level, 0), int(digits) * {"K": 1024, "M": 1024 ** 2}.get(size[-1:], 1))
    return sizes


def last_level_cache() -> tuple[int, str]:
    """(bytes of the CPU's last-level cache, where that came from)."""
    levels = _cache_levels()
    if levels:
        level = max(levels)
        return levels[level], f"L{level} cache (sysfs)"
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        size = os.sysconf(name) if name in os.sysconf_names else 0
        if size > 0:
            return size, f"{name[3:5]} cache (sysconf)"
    return FALLBACK_CACHE, "not found: assumed 1 MiB"


def private_cache() -> int:
    """Bytes of one core's largest private cache: the level below the last (L2 on most CPUs)."""
    levels = _cache_levels()
    below = [size for level, size in levels.items() if level < max(levels, default=0)]
    return max(below, default=FALLBACK_CACHE)


def memory_bytes() -> int:
    """Physical memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def gpu_facts() -> dict:
    """The first GPU's SM count, L2 cache and memory (the NCCL path measures GPUs)."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return {"sms": props.multi_processor_count, "l2": getattr(props, "L2_cache_size", 0) or FALLBACK_CACHE,
            "memory": props.total_memory, "name": props.name}

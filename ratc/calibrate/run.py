"""A whole calibration: the ranks' figures, then one rank's, then the host profile's text."""

from __future__ import annotations

from pathlib import Path

from ratc.calibrate import machine
from ratc.calibrate.compute import measure_compute
from ratc.calibrate.fits import rank_figures
from ratc.calibrate.profile import MEMORY_SHARE, render
from ratc.calibrate.ranks import measure_ranks
from ratc.calibrate.settings import Settings
from ratc.hostmem import keep_freed_memory


def facts(settings: Settings) -> dict:
    """What the profile records about the machine beside its measurements."""
    import torch

    cores = machine.cores()
    share = f"{MEMORY_SHARE:.0%} of this machine's memory, shared by the ranks"
    if settings.device == "cuda":
        gpu = machine.gpu_facts()
        found = {"dsps": gpu["sms"], "dsps_source": f"streaming multiprocessors of a {gpu['name']}",
                 "memory_budget": MEMORY_SHARE * gpu["memory"], "memory_source": f"{MEMORY_SHARE:.0%} of a GPU's memory",
                 "cache": gpu["l2"], "cache_source": "the GPU's L2 cache",
                 "private_cache": gpu["l2"]}
    else:
        cache, source = machine.last_level_cache()
        found = {"dsps": settings.threads, "dsps_source": "torch threads per rank",
                 "memory_budget": MEMORY_SHARE * machine.memory_bytes() / settings.ranks, "memory_source": share,
                 "cache": cache, "cache_source": f"the last-level cache: {source}",
                 "private_cache": machine.private_cache()}
    found.update(ranks=settings.ranks, host={
        "device": f'"{settings.device}"', "backend": f'"{settings.backend}"', "cores": cores,
        "ranks": settings.ranks, "threads": settings.threads, "dtype": '"float32"', "repeats": settings.repeats,
        "torch": f'"{torch.__version__}"'},
        description=f"this machine ({cores} cores) measured by ratc calibrate: {settings.ranks} ranks x "
                    f"{settings.threads} thread{'s' if settings.threads > 1 else ''}, {settings.backend}, "
                    f"torch {torch.__version__}")
    return found


def calibrate(settings: Settings, output: str, progress) -> str:
    """Measure this machine and return its host profile (validated: it loads)."""
    import torch

    from ratc.platform import parse_platform

    # The ranks first: they fork from this process before it has run any threaded work.
    ranks = rank_figures(measure_ranks(settings, progress))
    found = facts(settings)
    before = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    keep_freed_memory()         # as a training rank runs (ratc.dist.worker)
    try:
        compute = measure_compute(settings, found["cache"], found["private_cache"], progress)
    finally:
        torch.set_num_threads(before)
    compute["matmul_peak"] = max((rate for _, rate in compute["matmul"]), key=lambda fig: fig.median)
    text = render(Path(output).stem or "host", settings.command(output), found, {"compute": compute, **ranks})
    parse_platform(text, output)
    return text

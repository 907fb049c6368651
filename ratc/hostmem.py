"""glibc's allocator told to keep what a training process frees, instead of handing it back.

A step frees and makes again the same tensors every micro-batch and every step: activations,
gradients, the optimizer's temporaries. By default glibc returns a freed block of 128 KB or
more to the kernel (an mmap of its own, or the heap's top trimmed), and the next allocation
of it faults every page in again, zero-filled: on this project's 2-core machine that was 10 %
of `small`'s one-rank step (0.213 s against 0.192 s kept; its updates 19.2 ms against 10.0,
2026-12-05). PyTorch's CPU tuning guides swap in jemalloc or tcmalloc for the same reason;
mallopt does it in place, without a preload. What a process keeps is the peak a step reaches
anyway, so its memory use does not grow.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
# the largest mmap threshold glibc accepts on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX): blocks above
# it still get an mmap of their own, and go back when freed
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30        # never trim the heap's top below this much free
TOP_PAD = 64 << 20              # grow the heap by this much beyond a request (fewer brk calls)


def keep_freed_memory() -> bool:
    """Set glibc's malloc to keep freed memory in the process; False where there is no glibc
    mallopt (macOS, musl), which keep their allocator's own behaviour."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in (
        (M_MMAP_THRESHOLD, MMAP_THRESHOLD), (M_TRIM_THRESHOLD, TRIM_THRESHOLD), (M_TOP_PAD, TOP_PAD)))

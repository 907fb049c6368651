"""ratc.hostmem: glibc's malloc keeps what a training process frees."""

import ctypes
import ctypes.util
import multiprocessing
import sys

import pytest

from ratc import hostmem


def _faults_of_reallocating(keep: bool, queue) -> None:
    """Minor page faults of making, touching and freeing three 3 MB blocks 50 times over, as a
    step makes and frees its tensors (after one 4 MB block freed first, which raises glibc's
    dynamic thresholds to 4 MB for mmap, 8 MB for trimming the heap's top)."""
    import resource

    if keep:
        assert hostmem.keep_freed_memory()
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.free(libc.malloc(4 << 20))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        blocks = [libc.malloc(3 << 20) for _ in range(3)]
        for block in blocks:
            ctypes.memset(block, 1, 3 << 20)
        for block in reversed(blocks):
            libc.free(block)
    queue.put(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_kept_block_is_not_faulted_in_again_each_time_it_is_made():
    ctx = multiprocessing.get_context("spawn")      # a fresh allocator in each process
    faults = {}
    for keep in (False, True):
        queue = ctx.Queue()
        proc = ctx.Process(target=_faults_of_reallocating, args=(keep, queue))
        proc.start()
        faults[keep] = queue.get(timeout=60)
        proc.join(timeout=60)
    # by default the 9 MB freed at the heap's top is trimmed each time and its 2304 pages are
    # faulted in again, 50 times over; kept, the first round's pages are reused
    pages = 9 * 256
    assert faults[False] > 40 * pages
    assert faults[True] < 3 * pages

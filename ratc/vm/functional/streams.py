"""A side CUDA stream for the Recover tasks a program co-runs with other work (FSR).

On a GPU a co-running Recover (`life.recover {placement = "corun"}`) is the work the paper
hides in the pipeline's idle compute: it is issued on its own stream, so that its kernels
overlap the main stream's, and its reader (the Backward) makes the main stream wait for it.
On the CPU there is one stream of work and the Recover simply runs in program order.
"""

from __future__ import annotations

from typing import Callable

import torch


def _tensors(value):
    """Every tensor a Recover's result reaches (lists, dicts, and the executor's records)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif hasattr(value, "__slots__"):     # the executor's _Saved record of a unit's forward
        for name in value.__slots__:
            yield from _tensors(getattr(value, name, None))


class RecoveryStream:
    """Runs co-running Recovers on a side stream of one CUDA device."""

    def __init__(self, device: torch.device):
        self.stream = torch.cuda.Stream(device=device)

    @staticmethod
    def for_device(device: torch.device | None) -> "RecoveryStream | None":
        """A side stream on a CUDA device; None elsewhere (the Recover runs inline)."""
        return RecoveryStream(device) if device is not None and device.type == "cuda" else None

    def run(self, fn: Callable, inputs) -> Callable[[], object]:
        """Issue fn() on the side stream after the main stream's work so far (which produced its
        inputs); the returned wait() orders the caller's stream after it and gives fn's result."""
        main = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(main)
        # The main stream may free and reuse the inputs' memory once their last reader on it
        # is done; recording them on the side stream keeps them until the Recover is too.
        for t in _tensors(inputs):
            if t.is_cuda:
                t.record_stream(self.stream)
        with torch.cuda.stream(self.stream):
            value = fn()
        done = torch.cuda.Event()
        done.record(self.stream)

        def wait():
            reader = torch.cuda.current_stream(self.stream.device)
            reader.wait_event(done)
            # Allocated on the side stream, read (and freed) on the reader's.
            for t in _tensors(value):
                if t.is_cuda:
                    t.record_stream(reader)
            return value
        return wait

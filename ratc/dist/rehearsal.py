"""What every stage-boundary message holds, found by running one step on the meta device.

A receiver must allocate its buffers before the data arrives, and the runtime sends no
headers: the names, shapes and dtypes of each message (and which gradients flow back at
all, which autograd decides) come from a rehearsal of the same program on the meta
device, which costs no memory and no FLOPs. Every micro-batch of a step has the same
shape, so the rehearsal stops once each channel (directed stage pair, direction and, under
interleaved 1F1B, boundary unit) has carried its first message.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ratc.vm.functional.transport import LocalTransport, message_kind


@dataclass(frozen=True)
class Field:
    """One value of a message: a tensor's shape and dtype, or a Python value sent as is."""

    name: str
    shape: tuple | None
    dtype: torch.dtype | None
    constant: object = None

    def empty(self, device) -> torch.Tensor | object:
        """A receive buffer (or the constant)."""
        return self.constant if self.shape is None else torch.empty(self.shape, dtype=self.dtype, device=device)


class _Seen(Exception):
    """Every kind of message has been sent once."""


class _Recorder(LocalTransport):
    """The one-process transport, noting each kind of message's fields."""

    def __init__(self, P: int, D: int, kinds: set):
        super().__init__(P, D)
        self.kinds = kinds
        self.specs: dict = {}

    def send(self, p, op, value):
        self.specs.setdefault(message_kind(p, op), tuple(
            Field(n, None, None, v) if not isinstance(v, torch.Tensor) else Field(n, tuple(v.shape), v.dtype)
            for n, v in sorted(value[0].items())))
        if self.specs.keys() >= self.kinds:
            raise _Seen()
        super().send(p, op, value)

    def end_step(self, losses, count):
        return 0.0


def message_specs(module, build_units, opt, batch_rows: int, seq_len: int) -> dict:
    """{channel (`message_kind`): (Field, ...)} of the program's messages;
    `build_units()` builds the model's UnitSet and its flat parameters (called on meta)."""
    from ratc.lifecycle.lowering import find_pipeline, find_plan
    from ratc.step.plan import Plan
    from ratc.vm.functional.executor import FunctionalExecutor

    pipe = find_pipeline(module)
    kinds = {message_kind(s.attributes["stage"], op) for s in pipe.region.ops for op in s.region.ops
             if op.name == "life.send"}
    if not kinds:
        return {}
    with torch.device("meta"):
        units, flats = build_units()
        plan = Plan.from_ir(find_plan(module)).config
        recorder = _Recorder(plan.P, plan.D, kinds)
        ex = FunctionalExecutor(module, units, flats, opt, recorder)
        ids = torch.zeros(batch_rows, seq_len, dtype=torch.long)
        try:
            ex.step({"input_ids": ids, "labels": ids})
        except _Seen:
            pass
    return recorder.specs

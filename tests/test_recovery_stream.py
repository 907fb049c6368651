"""Co-running Recovers on a side stream: the executor waits for them at their Backward."""

from pathlib import Path

import pytest
import torch

from ratc.vm.functional.executor import FunctionalExecutor
from ratc.vm.functional.session import Session, TrainConfig, build_model
from ratc.vm.functional.streams import RecoveryStream
from ratc.vm.functional.units import flat_params

EXAMPLE = str(Path(__file__).resolve().parents[1] / "examples" / "llama.py")
CFG = TrainConfig(model=EXAMPLE, P=2, D=1, Z=1, act="fsr", M=4, b=1, reference=False)


class _Deferred:
    """A stand-in side stream that runs each Recover only when its reader waits: the latest a
    real stream could finish it. Records how many ran that way."""

    def __init__(self):
        self.issued = self.waited = 0

    def run(self, fn, inputs):
        self.issued += 1

        def wait():
            self.waited += 1
            return fn()
        return wait


def _losses(stream, steps=3, device=None):
    """Losses of `steps` steps of the FSR program, and how many Recovers it co-runs per step."""
    session = Session(CFG)      # the program, the units and the data; its model is at its seeded init
    model = build_model(CFG.model, CFG.preset, CFG.seed)[0].to(device)
    executor = FunctionalExecutor(session.module, session.units, [flat_params(u, model) for u in session.units.units],
                                  CFG.opt, recovery_stream=stream)
    losses = [executor.step({k: v.to(device) for k, v in session.data.batch(i).items()}) for i in range(steps)]
    corun = sum(1 for op in session.module.walk()
                if op.name == "life.recover" and op.attributes.get("placement") == "corun")
    return losses, corun


def test_recovers_finished_only_at_their_backward_train_bit_for_bit_as_inline():
    inline, corun = _losses(None)
    stream = _Deferred()
    deferred, _ = _losses(stream)
    assert corun > 0, "the FSR program co-runs no Recover: nothing was tested"
    assert stream.issued == stream.waited == corun * 3
    assert deferred == inline


def test_recovery_stream_exists_only_on_a_gpu():
    assert RecoveryStream.for_device(torch.device("cpu")) is None
    assert RecoveryStream.for_device(None) is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_side_stream_recovery_on_a_gpu_trains_as_the_cpu_does():
    """GPU kernels round differently from the CPU's: equal to 1e-4."""
    cpu, _ = _losses(None)
    device = torch.device("cuda", 0)
    with torch.device(device):
        gpu, _ = _losses(RecoveryStream.for_device(device), device=device)
    assert max(abs(a - b) / abs(b) for a, b in zip(gpu, cpu)) < 1e-4

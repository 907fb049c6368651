"""The check every schedule's training test makes against plain PyTorch (ratc.vm.functional.reference)."""

from __future__ import annotations

from ratc.vm.functional.session import Session, build_model, relative_deviation
from ratc.vm.functional.units import flat_params


def assert_trains_as_pytorch(s: Session, steps: int, tol: float) -> None:
    """Every step's loss and the final weights within `tol` of PyTorch's, and the weights moved
    far beyond `tol` (so that the comparison has something to compare)."""
    worst = max(relative_deviation(*s.step(i)) for i in range(steps))
    assert worst <= tol and s.parameter_deviation() <= tol
    model, _ = build_model(s.cfg.model, s.cfg.preset, s.cfg.seed)
    moved = max(float((now - flat_params(u, model)).norm() / flat_params(u, model).norm())
                for u, now in zip(s.units.units, s.executor.parameters()))
    assert moved > 100 * tol

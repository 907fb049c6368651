"""The pass manager: runs a pipeline, verifies around passes, prints and dumps IR, times passes."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from ratc.errors import RatcError
from ratc.gcpause import gc_paused
from ratc.ir.core import Module
from ratc.ir.printer import print_module
from ratc.ir.verifier import VerifyError, verify
from ratc.passes.base import Pass, PassContext


@dataclass
class Instrumentation:
    """What to print or dump around passes (the --print-ir-* family, --dump-dir, --time-passes)."""

    print_before: set[str] = field(default_factory=set)
    print_after: set[str] = field(default_factory=set)
    print_after_all: bool = False
    print_after_change: bool = False
    print_after_failure: bool = False
    dump_dir: Path | None = None
    time_passes: bool = False
    input_name: str | None = None      # the IR file read; None: the dumped 00_input.ir replays the run
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    # called as progress(i, n, pass) before the i-th of n passes runs (a status line)
    progress: Callable[[int, int, Pass], None] | None = None

    def prints(self) -> bool:
        """Whether the pass manager may write to `stream` (IR dumps, the timing table)."""
        return bool(self.print_before or self.print_after or self.print_after_all or self.print_after_change
                    or self.print_after_failure or self.time_passes)


class PassFailure(RatcError):
    """A pass (or the verifier after it) failed; names the pass and carries the cause."""

    def __init__(self, pass_: Pass, cause: Exception, after_verify: bool, hint: str = ""):
        what = "verification failed after pass" if after_verify else "pass failed"
        super().__init__(f"{what} '{pass_.spec()}'{hint}:\n{cause}")
        self.pass_ = pass_
        self.cause = cause


# How much the pass manager verifies. "each": every op after every pass (MLIR's
# -verify-each). "structure": every op of the input and of the result, and after each pass
# its structure (dominance and the rules of region-holding ops: what moving tasks breaks) --
# about a quarter of the cost on a 40k-op program; an op a pass left malformed is reported at the
# end, and --verify-each then names the pass. "none": nothing.
VERIFY_MODES = ("each", "structure", "none")


def dump_header(kind: str, p: Pass) -> str:
    """MLIR's greppable dump header, e.g. '// -----// IR Dump After dce (dce) //----- //'."""
    return f"// -----// IR Dump {kind} {p.name} ({p.spec()}) //----- //\n"


def pipeline_text(passes: list[Pass]) -> str:
    """The canonical text of a pipeline (every option spelled out)."""
    return ",".join(p.spec() for p in passes)


_OPS_HINT = " (its ops, checked at the end of the pipeline; --verify-each names the pass that broke one)"


class _OpsBroken(Exception):
    """An op's own rule failed at the pipeline's end: any pass may have broken it."""

    def __init__(self, error: VerifyError):
        super().__init__(str(error))
        self.error = error


def _verify_structure(module: Module) -> None:
    """The structure alone (dominance and the region holders' rules), the lean mode's check
    after a pass that changes structure."""
    try:
        verify(module, each_op=False)
    except VerifyError:
        raise
    except Exception:
        # a malformed op tripped a region rule: the whole walk reports that op
        verify(module)
        raise


def _verify_last(module: Module) -> None:
    """Everything, after the last pass: a structure error is that pass's (the structure was
    checked after each pass before it), an op's own may be any pass's (_OpsBroken). The
    structure alone is checked again only to tell the two apart, once the whole walk failed."""
    try:
        verify(module)
    except VerifyError as exc:
        _verify_structure(module)
        raise _OpsBroken(exc) from None


class PassManager:
    """Runs passes in order with verification and instrumentation."""

    def __init__(self, passes: list[Pass], *, verify: str = "structure",
                 instrumentation: Instrumentation | None = None, ctx: PassContext | None = None):
        if verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {VERIFY_MODES}, got {verify!r}")
        self.passes = passes
        self.verify = verify
        self.inst = instrumentation or Instrumentation()
        self.ctx = ctx or PassContext()
        self.timings: list[tuple[str, float]] = []

    def run(self, module: Module) -> Module:
        """Run every pass; raises PassFailure naming the pass that failed."""
        with gc_paused():
            return self._run(module)

    def _run(self, module: Module) -> Module:
        inst = self.inst
        if self.verify != "none":
            verify(module)
        if inst.dump_dir is not None:
            from ratc.errors import OutputError

            if inst.dump_dir.exists() and not inst.dump_dir.is_dir():
                raise OutputError(f"--dump-dir {inst.dump_dir}: it is a file, not a directory")
            try:
                inst.dump_dir.mkdir(parents=True, exist_ok=True)
                # An earlier run's dumps would mix with this run's (same numbers, other passes).
                for old in inst.dump_dir.glob("[0-9][0-9]_after_*.ir"):
                    old.unlink()
            except OSError as exc:
                raise OutputError.refused(inst.dump_dir, exc) from None
            _write(inst.dump_dir / "00_input.ir", print_module(module))
        for i, p in enumerate(self.passes, 1):
            if inst.progress is not None:
                inst.progress(i, len(self.passes), p)
            before = print_module(module) if inst.print_after_change else None
            if p.name in inst.print_before:
                inst.stream.write(dump_header("Before", p) + print_module(module))
            start = time.perf_counter()
            try:
                result = p.run(module, self.ctx)
                module = result if result is not None else module
            except RatcError as exc:
                self._on_failure(p, module)
                raise PassFailure(p, exc, after_verify=False) from exc
            self.timings.append((p.spec(), time.perf_counter() - start))
            if self.verify != "none":
                self._verify_after(p, module, last=i == len(self.passes))
            text = None
            if inst.print_after_all or p.name in inst.print_after:
                text = print_module(module)
                inst.stream.write(dump_header("After", p) + text)
            elif inst.print_after_change:
                text = print_module(module)
                if text != before:
                    inst.stream.write(dump_header("After", p) + text)
            if inst.dump_dir is not None:
                text = text or print_module(module)
                prefix = pipeline_text(self.passes[:i])
                source = inst.input_name or inst.dump_dir / "00_input.ir"
                repro = f"// reproduce: ratc opt {source} -p '{prefix}'\n"
                _write(inst.dump_dir / f"{i:02d}_after_{p.name}.ir", dump_header("After", p) + repro + text)
        if inst.time_passes:
            inst.stream.write(self.timing_report())
        return module

    def _verify_after(self, p: Pass, module: Module, last: bool) -> None:
        """Verify the module `p` returned, as much as the mode asks."""
        try:
            if self.verify == "each":
                verify(module)
            elif last:
                _verify_last(module)
            elif p.changes_structure:
                _verify_structure(module)
        except _OpsBroken as exc:
            self._on_failure(p, module)
            raise PassFailure(p, exc.error, after_verify=True, hint=_OPS_HINT) from exc.error
        except VerifyError as exc:
            self._on_failure(p, module)
            raise PassFailure(p, exc, after_verify=True) from exc

    def _on_failure(self, p: Pass, module: Module) -> None:
        if self.inst.print_after_failure:
            self.inst.stream.write(dump_header("After", p).replace("After", "After Failed", 1)
                                   + print_module(module))

    def timing_report(self) -> str:
        """A table of wall time per pass, like MLIR's -mlir-timing."""
        total = sum(t for _, t in self.timings) or 1e-12
        width = max([len(n) for n, _ in self.timings] + [len("Total")])
        lines = ["===" + "-" * 60 + "===", "  Pass execution timing report",
                 "===" + "-" * 60 + "===",
                 f"  {'Wall Time':>12}  {'(%)':>7}  Name"]
        for name, t in self.timings:
            lines.append(f"  {t:>10.4f} s  {100 * t / total:6.1f}%  {name}")
        lines.append(f"  {total:>10.4f} s  {100.0:6.1f}%  {'Total'.ljust(width)}")
        return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    from ratc.io import write_atomic
    write_atomic(path, text)

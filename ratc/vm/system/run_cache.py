"""What `ratc run` reported of a program, remembered: the same files, options and ratc give the same report.

A simulation is deterministic, so its report is a function of the program directory's
files (which the manifest's hashes pin, and load_program checks against the bytes), the
options that change it (steps, replicas, the memory limit) and ratc's own code. `ratc
run` (and `ratc compile`, which runs the step it wrote) keeps each report it made under a
key of all of them in the cache root's `runs/`; a later `ratc run` of the same program with
the same options reads it back instead of parsing, verifying, translating and simulating
again (17 MB of IR and some 90,000 tasks for llama2-7b on 8 clusters). An entry is
trusted only when its key matches and its own sha256 holds; since ratc's sources are in the
key, any change to ratc makes every entry stale. RATC_CACHE_DIR=off turns it off.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from ratc.cache import Damaged, cache_root, read_record, sources_version, warn_damaged, write_record
from ratc.vm.system.results import Results

# Results fields that JSON gives back as lists
_TUPLES = ("stage_bubble", "stage_peak_bytes")


@dataclass(frozen=True)
class RunReport:
    """Everything `ratc run` prints of a simulated step (ratc.vm.system.driver.ProgramRun's
    printable part, with the kernel table of what ran)."""

    config: str                 # the configuration's label
    clusters: int
    model: str
    results: Results
    predicted: float | None
    cost_source: str
    plan_default: float | None
    plan_default_source: str
    macs: float
    kernel_table: dict | None

    @classmethod
    def of(cls, run, kernel_table: dict | None) -> "RunReport":
        """The report of a ProgramRun."""
        return cls(run.cand.label(), run.cand.clusters, run.model, run.results, run.predicted, run.cost_source,
                   run.plan_default, run.plan_default_source, run.macs, kernel_table)

    def as_record(self) -> dict:
        return {**asdict(self), "results": asdict(self.results)}

    @classmethod
    def from_record(cls, record: dict) -> "RunReport":
        """A report from its record (Damaged when fields are missing or of the wrong kind)."""
        from ratc.program_check import check_kernel_table
        from ratc.program import ProgramError

        try:
            res = dict(record["results"])
            for name in _TUPLES:
                res[name] = tuple(res[name])
            report = cls(**{**record, "results": Results(**res)})
            if report.kernel_table is not None:
                check_kernel_table(report.kernel_table, "its kernel table")
        except (KeyError, TypeError, ValueError, ProgramError) as exc:
            raise Damaged(f"its report does not read back: {type(exc).__name__}: {exc}") from None
        _check_kinds(report)
        return report


def _is_number(x) -> bool:
    return type(x) in (int, float)


def _check_kinds(report: RunReport) -> None:
    """Each field of the kind the report prints it as (Damaged if not)."""
    r = report.results
    numbers = [r.step_cycles, r.step_seconds, r.tokens_per_second, r.mac_utilization, r.bubble_fraction,
               r.tail_cycles, r.tail_seconds, r.tasks, r.stages, r.replicas, report.clusters, report.macs,
               *r.stage_bubble, *r.stage_peak_bytes, *r.critical_cycles.values(), *r.exposed_seconds.values(),
               *(x for x in (report.predicted, report.plan_default) if x is not None)]
    texts = [report.config, report.model, report.cost_source, report.plan_default_source,
             *r.critical_cycles, *r.exposed_seconds]
    if not (all(map(_is_number, numbers)) and all(isinstance(t, str) for t in texts)
            and type(r.symmetric) is bool and r.step_seconds > 0):
        raise Damaged("a field of its report is not of its kind")


@lru_cache(maxsize=1)
def _sources() -> str:
    return sources_version(("**/*.py", "**/*.lark", "**/*.toml"))


def run_key(program, steps: int, symmetric: bool, memory_limit: bool) -> dict:
    """The key of a run of a loaded program (ratc.program.load_program): every file's hash
    and the manifest's meta, the options, ratc's sources."""
    files = program.manifest["files"]
    return {"format": 1, "sources": _sources(),
            "program": hashlib.sha256(json.dumps([files, program.meta], sort_keys=True).encode()).hexdigest(),
            "steps": steps, "symmetric": symmetric, "memory_limit": memory_limit}


def _path(key: dict) -> Path | None:
    root = cache_root()
    if root is None:
        return None
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return root / "runs" / digest[:2] / f"{digest}.json"


def load(key: dict) -> RunReport | None:
    """The report kept for key, or None (none kept, or damaged: warned about on stderr)."""
    path = _path(key)
    if path is None:
        return None
    try:
        record = read_record(path, key, ("report",))
        return None if record is None else RunReport.from_record(record["report"])
    except Damaged as exc:
        warn_damaged("run cache entry", path, str(exc), "simulating again")
        return None


def store(key: dict, report: RunReport) -> None:
    """Keep a report for key (skipped where the cache cannot be written)."""
    write_record(_path(key), {"key": key, "report": report.as_record()})

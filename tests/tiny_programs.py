"""Shared helpers of the lifecycle tests (no tests here): compile the tiny preset."""

import functools
from pathlib import Path

from ratc.frontend import trace_preset
from ratc.lifecycle.compile import CompileOptions, compile_program, default_pipeline
from ratc.lifecycle.plan_ir import plan_module
from ratc.step.config import Candidate
from ratc.platform import load_platform

TINY_SEQ = 64


@functools.lru_cache(maxsize=None)
def tiny():
    return trace_preset("tiny", TINY_SEQ)


@functools.lru_cache(maxsize=None)
def mt3000():
    return load_platform("mt3000")


def candidate(P=2, D=2, T=1, Z=2, b=1, A=4, act="fsr", pref="deadline", **more):
    return Candidate(P=P, D=D, T=T, Z=Z, b=b, A=A, act=act, pref=pref, **more)


def tiny_plan(**kw):
    """The tiny model's life.plan module for a candidate."""
    return plan_module(tiny(), candidate(**kw), mt3000())


def compile_tiny(pipeline=None, rec_buffers=2, budget="none", verify="each", stream=True, **kw):
    """The tiny model through the lifecycle pipeline (default: the plan's full pipeline, its
    memory-plan pass given `budget`: 'plan', 'none' or a size)."""
    cand = candidate(**kw)
    pipeline = pipeline or default_pipeline(cand.pref, rec_buffers, budget, stream=stream)
    return compile_program(tiny(), cand, mt3000(), CompileOptions(pipeline=pipeline, verify=verify))


def compile_tiny_dir(out: Path, plan: str, *options: str) -> Path:
    """`ratc compile examples/llama.py --preset tiny --plan PLAN --no-run -o OUT`: a program directory."""
    from ratc.cli.main import main

    example = str(Path(__file__).resolve().parents[1] / "examples" / "llama.py")
    assert main(["compile", example, "--preset", "tiny", "--plan", plan, *options, "--no-run", "-o", str(out)]) == 0
    return out

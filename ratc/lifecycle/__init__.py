"""Training-state lifecycles: lowering a plan to per-stage life programs and scheduling them."""

from ratc.lifecycle.actions import format_pipeline, stage_actions
from ratc.lifecycle.compile import compile_program, default_pipeline

__all__ = ["compile_program", "default_pipeline", "format_pipeline", "stage_actions"]

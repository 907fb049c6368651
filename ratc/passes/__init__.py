"""Passes over the IR: the pass base and registry, textual pipelines and the pass manager."""

from ratc.passes.base import PASSES, Pass, PassContext, PassError, load_passes, option, register_pass
from ratc.passes.manager import Instrumentation, PassFailure, PassManager, pipeline_text
from ratc.passes.pipeline import PipelineError, parse_pipeline

__all__ = [
    "Instrumentation", "PASSES", "Pass", "PassContext", "PassError", "PassFailure", "PassManager",
    "PipelineError", "load_passes", "option", "parse_pipeline", "pipeline_text", "register_pass",
]

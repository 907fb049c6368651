"""ratc: a compiler toolchain for lifecycle-scheduled LLM training (RATrain)."""

__version__ = "0.1.0"

"""The error types every ratc component raises for bad user input."""

from __future__ import annotations


class RatcError(Exception):
    """An error caused by the user's input; the CLI prints it without a traceback."""


class OutputError(RatcError):
    """An output that cannot be written (no permission, a directory in the way, disk full)."""

    @classmethod
    def refused(cls, path, exc: OSError) -> "OutputError":
        """The error for an output the operating system refused: the path and its reason."""
        from pathlib import Path

        # mkdir of a path below a file says only "File exists"; name the file in the way
        blocker = next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)
        reason = f"{blocker} is not a directory" if blocker is not None else exc.strerror or str(exc)
        return cls(f"cannot write {path}: {reason}")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process is, so that cleanup runs as it does on Ctrl-C."""


class SourceLocation:
    """A point in a text input: file, 1-based line and column, and the source text."""

    __slots__ = ("filename", "line", "col", "text")

    def __init__(self, filename: str, line: int, col: int, text: str | None = None):
        self.filename, self.line, self.col, self.text = filename, line, col, text

    def __repr__(self) -> str:
        return f"{self.filename}:{self.line}:{self.col}"


class LocatedError(RatcError):
    """An error at a source location, rendered as 'file:line:col: error: msg' plus a caret."""

    def __init__(self, message: str, loc: SourceLocation | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc

    def __str__(self) -> str:
        if self.loc is None:
            return f"error: {self.message}"
        head = f"{self.loc.filename}:{self.loc.line}:{self.loc.col}: error: {self.message}"
        if self.loc.text is None:
            return head
        # Lines end at "\n" only, as the parsers count them (splitlines would also break at
        # U+2028, a form feed or U+0085 inside a string literal).
        lines = self.loc.text.split("\n")
        if not 1 <= self.loc.line <= len(lines):
            return head
        src = lines[self.loc.line - 1].rstrip("\r")
        return f"{head}\n{src}\n{' ' * (self.loc.col - 1)}^"

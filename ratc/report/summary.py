"""A one-screen text summary that long-running commands print when they finish."""

from __future__ import annotations

from dataclasses import dataclass, field

SCREEN_LINES = 24     # a classic terminal: the summary must fit without scrolling
SCREEN_COLUMNS = 80


@dataclass
class Summary:
    """A titled list of (name, value) lines and notes, rendered to fit one terminal screen."""

    title: str
    rows: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def add(self, name: str, value) -> "Summary":
        self.rows.append((str(name), str(value)))
        return self

    def note(self, text: str) -> "Summary":
        self.notes.append(str(text))
        return self

    def as_dict(self) -> dict:
        """The summary as JSON-ready data: title, facts (name -> value, in order) and notes."""
        return {"title": self.title, "facts": dict(self.rows), "notes": list(self.notes)}

    def render(self, lines: int = SCREEN_LINES, columns: int = SCREEN_COLUMNS) -> str:
        """At most `lines` lines of at most `columns` characters; what does not fit is counted."""
        width = min(max((len(n) for n, _ in self.rows), default=0), columns // 3)
        out = [_clip(f"== {self.title} ==", columns)]
        body = [_clip(f"  {n:<{width}}  {v}", columns) for n, v in self.rows]
        body += [_clip(f"  note: {t}", columns) for t in self.notes]
        room = lines - 1
        if len(body) > room:
            hidden = len(body) - (room - 1)
            body = body[:room - 1] + [f"  ... {hidden} more lines"]
        return "\n".join(out + body) + "\n"


def _clip(text: str, columns: int) -> str:
    return text if len(text) <= columns else text[:columns - 3] + "..."


def report_summary(report, path: str) -> Summary:
    """The summary `ratc report` prints: the facts of the report and where it was written."""
    s = Summary(report.title)
    for name, value in report.facts:
        s.add(name, value)
    for n in report.notes:
        s.note(n)
    s.add("wrote", path)
    return s

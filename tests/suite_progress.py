"""The suite's progress on a terminal says how long the rest will take (registered by conftest)."""

import time


def with_estimate(text: str, done: int, total: int, elapsed: float) -> str:
    """pytest's progress text (' [ 42%]') with the time the remaining tests will take at the
    pace so far (' [ 42%, ~3m10s left]'); other texts (counts, durations, 100 %) as they are."""
    if not (0 < done < total) or not text.endswith("%]"):
        return text
    left = round(elapsed * (total - done) / done)
    return f"{text[:-1]}, ~{f'{left // 60}m{left % 60:02d}s' if left >= 60 else f'{left}s'} left]"


def install(config) -> None:
    """Wrap the terminal reporter's progress text when it writes progress to a terminal.
    (It reads private attributes of pytest's reporter; where those differ, nothing changes.)"""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    plain = getattr(reporter, "_get_progress_information_message", None)
    if plain is None or not getattr(reporter, "isatty", False) or \
            getattr(reporter, "_show_progress_info", None) != "progress":
        return
    start = time.monotonic()

    def progress() -> str:
        session = getattr(reporter, "_session", None)
        total = getattr(session, "testscollected", 0)
        return with_estimate(plain(), getattr(reporter, "reported_progress", 0), total, time.monotonic() - start)

    reporter._get_progress_information_message = progress

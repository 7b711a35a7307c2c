"""A live progress line while suite batches are judged: judge calls done / planned and spend so far.

Suite items prefetch their file's jobs, so many judged items are in flight while pytest waits for one.
While it waits, this line is drawn after pytest's own progress on the current line (and removed when
the item's result arrives, so pytest's output is left as it was). It is shown only where a person
watches: on a TTY, not under ``-q``, never on an xdist worker (whose output nobody sees) and never in
a non-TTY CI log, where rewriting a line would only add noise. Plain tests have pytest's own progress.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

SpendFn = Callable[[], dict[str, Any]]


class ProgressLine:
    """Counts planned judge samples and draws ``[aimeasure: judge 12/48 calls, $0.0123 spent]``."""

    def __init__(self, reporter: Any, spend: SpendFn) -> None:
        self._reporter = reporter
        self._spend = spend
        self._lock = threading.Lock()
        self._planned = 0
        self._base: int | None = None
        self._shown: str | None = None
        """The line as pytest left it, while the progress text is drawn after it."""

    @classmethod
    def for_session(cls, config: Any, spend: SpendFn) -> ProgressLine | None:
        """The session's line, or None where it must stay quiet (see the module docstring)."""
        if hasattr(config, "workerinput"):
            return None
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or not enabled(reporter):
            return None
        return cls(reporter, spend)

    @staticmethod
    def _done(spend: dict[str, Any]) -> int:
        # Samples, not requests: a retry after an invalid verdict is a second call for one sample.
        return int(spend.get("calls", 0)) - int(spend.get("retries", 0)) + int(spend.get("cached", 0))

    def plan(self, samples: int) -> None:
        """``samples`` more judge samples were scheduled."""
        with self._lock:
            if self._base is None:
                self._base = self._done(self._spend())
            self._planned += samples

    def text(self) -> str:
        spend = self._spend()
        with self._lock:
            done = min(max(self._done(spend) - (self._base or 0), 0), self._planned)
            planned = self._planned
        cost = spend.get("cost_usd")
        money = "spend unknown" if cost is None else f"${float(cost):.4f} spent"
        return f"[aimeasure: judge {done}/{planned} calls, {money}]"

    def tick(self) -> None:
        """Draw (or redraw) the line; call from the main thread while waiting."""
        if not self._planned:
            return
        tw = getattr(self._reporter, "_tw", None)
        if self._shown is None:
            self._shown = str(getattr(tw, "_current_line", ""))
        self._reporter.rewrite(f"{self._shown}  {self.text()}", erase=True)

    def clear(self) -> None:
        """Put pytest's line back as it was."""
        if self._shown is None:
            return
        shown, self._shown = self._shown, None
        self._reporter.rewrite(shown, erase=True)
        tw = getattr(self._reporter, "_tw", None)
        if tw is not None and hasattr(tw, "_current_line"):
            # rewrite() appends to the writer's idea of the line; pytest aligns its [ 50%] by it.
            tw._current_line = shown


def enabled(reporter: Any) -> bool:
    """On a TTY and not quiet."""
    isatty = getattr(reporter, "isatty", False)
    tty = bool(isatty() if callable(isatty) else isatty)
    return tty and getattr(reporter, "verbosity", 0) >= 0

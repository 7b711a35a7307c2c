"""The terminal as it was when the session started: for the few lines a user must see while a test
runs (a provider that keeps refusing), whatever pytest captures then and however quiet ``-q`` is.

pytest's capture redirects file descriptors 1 and 2 while tests run; a copy of descriptor 2 taken
before (at session start, when capture is suspended) still reaches the terminal. One ``os.write``
per line, so the judge's loop thread may write while the test thread runs.
"""

from __future__ import annotations

import contextlib
import os
import threading

__all__ = ["Console"]


class Console:
    """A line writer on a copy of standard error taken now; :meth:`close` releases it."""

    def __init__(self) -> None:
        try:
            self._fd: int | None = os.dup(2)
        except OSError:  # no standard error at all (a daemon): lines go nowhere
            self._fd = None
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        """Write ``text`` on a line of its own (best effort: a closed terminal is not an error)."""
        with self._lock:
            if self._fd is None:
                return
            with contextlib.suppress(OSError):
                os.write(self._fd, f"\n{text}\n".encode("utf-8", "backslashreplace"))

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

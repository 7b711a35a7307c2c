"""What a long session does to Python's cyclic garbage collector: it sets aside what it keeps.

A session keeps every item's result (its measurements and samples, for the comparison and the
reports at its end) and pytest keeps every report: a heap that grows with the item count. Each full
collection scanned all of it, and CPython runs one each time the objects that survived young
collections grow by a quarter: at 10,000 scripted items, 15 full collections cost 4.4 s of CPU
(0.44 ms an item, a third of the plugin's test-loop cost, and growing with the session). What an
item left behind is moved out of the collector's sight every :data:`SET_ASIDE_EVERY` items
(:func:`gc.freeze`, as the judge engine does with the SDK's objects), so a full collection scans
only the items since; young garbage is collected first, so it is not set aside with them.
"""

from __future__ import annotations

import gc

__all__ = ["SET_ASIDE_EVERY", "HeapKeeper"]

SET_ASIDE_EVERY = 500
"""Items logged between two set-asides: a collection of what they left (a few milliseconds) each time."""


class HeapKeeper:
    """Counts the items the session logged and sets aside what they left every
    :data:`SET_ASIDE_EVERY` items."""

    def __init__(self) -> None:
        self.logged = 0

    def item_logged(self) -> None:
        self.logged += 1
        if self.logged % SET_ASIDE_EVERY == 0:
            set_aside()


def set_aside() -> None:
    """Collect every generation, then move every object tracked now out of the collector's sight.
    (Unless the collector is off: whoever turned it off manages the heap.) A full collection, not a
    young one: cyclic garbage that reached the oldest generation (a user's test can leave some: a
    caught exception's traceback and frames) would otherwise be frozen and kept until the process
    exits. It costs what the items since the last set-aside hold, not the session's heap: objects
    set aside are not scanned again."""
    if not gc.isenabled():
        return
    gc.collect()
    gc.freeze()

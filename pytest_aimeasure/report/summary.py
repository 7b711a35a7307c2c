"""The session as every report reads it: built once at the session's end (controller), then frozen.

Reports (terminal, JSON, JUnit, Markdown, HTML) take a :class:`SessionSummary`; they never reach into
the live session state. :mod:`pytest_aimeasure.conclude` builds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_aimeasure.compare import Comparison
    from pytest_aimeasure.report.results import SessionResults
    from pytest_aimeasure.settings import Settings

__all__ = ["SessionSummary"]


@dataclass(frozen=True)
class SessionSummary:
    """What the session concluded, for the reports.

    ``results`` is the ``--aimeasure-json`` model (items, findings, spend, baseline update, tables,
    calibration); ``comparison`` the whole comparison with the baseline (it also has the items that
    were not run); ``args`` the pytest command line, for the advice that reruns it."""

    results: SessionResults
    comparison: Comparison | None
    settings: Settings
    args: tuple[str, ...]
    interrupted: bool = False
    gone: tuple[str, ...] = ()  # baseline entries whose tests no longer exist
    has_baseline: bool = False  # was there a baseline file to compare with

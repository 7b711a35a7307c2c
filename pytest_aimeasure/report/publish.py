"""The session's reports, written once at its end from the one report model (:class:`SessionReport`).

One call, :func:`publish`, made by the session's conclusion: the JSON file (``--aimeasure-json``),
the results kept in the run's folder (so ``aimeasure report``, ``summary`` and ``merge`` can read a
run later exactly as the session saw it), the HTML report (``--aimeasure-html``), and, on GitHub
Actions, the Markdown job summary (``GITHUB_STEP_SUMMARY``).
"""

from __future__ import annotations

import os
from pathlib import Path

from pytest_aimeasure.report.model import SessionReport
from pytest_aimeasure.report.results import SessionResults, results_json, stored_results_json, write_results

RUN_RESULTS_NAME = "results.json"
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def run_results_path(store: Path, run_id: str) -> Path:
    """Where a run keeps its session results."""
    return store / "runs" / run_id / RUN_RESULTS_NAME


def append_step_summary(results: SessionReport | SessionResults, path_text: str | None) -> Path | None:
    """Append the Markdown summary to the GitHub step summary file, if one is set."""
    if not path_text:
        return None
    from pytest_aimeasure.report.markdown import summary_markdown

    path = Path(path_text)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(summary_markdown(results) + "\n")
    return path


def publish(
    report: SessionReport,
    *,
    json_path: Path | None,
    html_path: Path | None,
    store: Path | None,
) -> None:
    """Write every report the session asked for. ``store`` is the run store when the run is recorded."""
    results = report.results
    if store is not None and results.run_id is not None:
        write_results(run_results_path(store, results.run_id), stored_results_json(results))
    if json_path is not None:
        write_results(json_path, results_json(results))
    if html_path is not None:
        from pytest_aimeasure.report.html import write_html
        from pytest_aimeasure.report.trends import trends_from_store

        trends = trends_from_store(store, upto=results.run_id) if store is not None else None
        write_html(html_path, report, trends=trends)
    append_step_summary(report, os.environ.get(STEP_SUMMARY_ENV))

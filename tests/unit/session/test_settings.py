"""Settings are built from the option table: every field is an option's value or derived from them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_aimeasure.measure.sampling import SamplePlan
from pytest_aimeasure.session import options, settings
from pytest_aimeasure.session.settings import BATCH_PIPELINE, Settings

DERIVED = {
    "judging",
    "sample_plan",
    "anchor_globs",
    "concurrency_ceiling",
    "generation_concurrency",
    "processes",
    "process_index",
}


def test_every_field_is_an_option_or_derived_from_them() -> None:
    fields = {f.name for f in dataclasses.fields(Settings)}
    from_table = {
        settings._FIELD_OF.get(o.dest, o.dest) for o in options.OPTIONS if o.dest not in settings._READ_ONLY
    }
    assert fields == from_table | DERIVED


def test_no_field_repeats_a_default_of_the_table() -> None:
    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(Settings))


def test_paths_are_under_the_rootdir_unless_absolute(tmp_path: Path) -> None:
    assert settings._path(tmp_path, "b.json") == tmp_path / "b.json"
    assert settings._path(tmp_path, "/abs/b.json") == Path("/abs/b.json")
    assert settings._path(tmp_path, None) is None


@pytest.mark.parametrize(
    ("given", "batch", "ceiling", "bound"),
    [
        (0, False, 8, 0),
        (None, False, 8, 32),
        (None, False, 20, 40),
        (None, True, 8, BATCH_PIPELINE),
        (5, True, 8, 5),
    ],
)
def test_the_pipeline_bound(given: int | None, batch: bool, ceiling: int, bound: int) -> None:
    assert settings._pipeline({"pipeline": given, "batch": batch, "concurrency_ceiling": ceiling}) == bound


def test_without_a_given_concurrency_the_judge_starts_at_half_its_ceiling_and_generation_at_16() -> None:
    assert settings._concurrency(None) == {
        "concurrency": 32,
        "concurrency_ceiling": 64,
        "generation_concurrency": 16,  # a suite target's fixed limit: not the judge's adaptive start
    }
    given = {"concurrency": 5, "concurrency_ceiling": 5, "generation_concurrency": 5}
    assert settings._concurrency(5) == given


def test_the_sample_plan_and_its_bounds() -> None:
    raw = {"judge_samples_min": 3, "judge_samples_max": 7, "judge_samples_step": 2}
    assert settings._sample_plan(raw) == SamplePlan(3, 7, 2)
    with pytest.raises(pytest.UsageError, match="--judge-samples-max 2 is below --judge-samples-min 3"):
        settings._sample_plan({**raw, "judge_samples_max": 2})

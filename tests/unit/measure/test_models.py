"""The record models: what older records lacked still reads."""

from __future__ import annotations

from pytest_aimeasure.measure.models import Usage


def test_old_usage_records_without_cache_fields_still_read() -> None:
    usage = Usage.model_validate({"input_tokens": 10, "output_tokens": 3})
    assert usage.cache_read_input_tokens == usage.cache_creation_input_tokens == 0
    assert usage.prompt_tokens == 10

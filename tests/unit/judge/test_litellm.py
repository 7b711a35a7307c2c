"""The litellm backend refuses a model it cannot route."""

from __future__ import annotations

import pytest

from pytest_aimeasure.judge.backends.base import BackendError
from pytest_aimeasure.judge.backends.litellm import LitellmBackend


def test_litellm_model_needs_a_provider_prefix() -> None:
    with pytest.raises(BackendError, match="provider/model"):
        LitellmBackend("gpt-4o-mini")

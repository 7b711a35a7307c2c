"""The litellm backend: a model it cannot route is refused, and its missing import names the extra."""

from __future__ import annotations

import sys

import pytest

from pytest_aimeasure.judge.backends.base import BackendError
from pytest_aimeasure.judge.backends.litellm import LitellmBackend, import_litellm

EXTRA = "pip install 'pytest-aimeasure[litellm]'"


def test_litellm_model_needs_a_provider_prefix() -> None:
    with pytest.raises(BackendError, match="provider/model"):
        LitellmBackend("gpt-4o-mini")


def test_the_backend_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "litellm", None)  # type: ignore[arg-type]
    with pytest.raises(ModuleNotFoundError) as excinfo:
        import_litellm()
    assert EXTRA in str(excinfo.value)
    assert excinfo.value.name == "litellm"

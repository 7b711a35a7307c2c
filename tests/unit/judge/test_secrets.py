"""Redacting keys from provider error text."""

from __future__ import annotations

import pytest

from pytest_aimeasure.judge.backends.base import ProviderRejection
from pytest_aimeasure.judge.backends.secrets import REDACTED, redact

KEY = "canary-key-0123456789abcdef"
STRAY = "sk-proj-CANARY9876543210zyx"


def test_redact_takes_out_configured_keys_and_key_shaped_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_GATEWAY_API_KEY", KEY)
    monkeypatch.setenv("SHORT_TOKEN", "1")  # too short to be a secret: 1s elsewhere stay
    assert (
        redact(f"bad key {KEY}; retry 1 of 1; also {STRAY}.")
        == f"bad key {REDACTED}; retry 1 of 1; also {REDACTED}."
    )
    assert redact("ask-questions and sk-short stay") == "ask-questions and sk-short stay"


def test_a_provider_error_keeps_no_configured_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    error = ProviderRejection(f"401 for m: bad key {KEY}", status=401, provider_message=f"bad key {KEY}")
    assert (str(error), error.provider_message) == (f"401 for m: bad key {REDACTED}", f"bad key {REDACTED}")


class UnsetWhileRead(dict):  # type: ignore[type-arg]
    """An environment in which another thread unsets ``PYTEST_CURRENT_TEST`` between the listing
    of the names and the reading of its value (pytest does, at every phase of every test, while the
    judge's thread redacts an error)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        names = list(super().__iter__())
        self.pop("PYTEST_CURRENT_TEST", None)
        return iter(names)

    def items(self):  # type: ignore[no-untyped-def]
        return [(name, self[name]) for name in self]


def test_a_variable_unset_while_the_environment_is_read_is_passed_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from pytest_aimeasure.judge.backends import secrets

    environ = UnsetWhileRead({"PYTEST_CURRENT_TEST": "test_x.py::test_tone (call)", "SOME_API_KEY": KEY})
    monkeypatch.setattr(secrets, "os", SimpleNamespace(environ=environ))
    assert redact(f"bad key {KEY}") == f"bad key {REDACTED}"  # was a KeyError

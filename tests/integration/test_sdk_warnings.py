"""The judge SDK's pydantic warnings about its own types stay out of a run's warnings summary; the
user's own stay in it."""

from __future__ import annotations

import warnings

import pytest

from pytest_aimeasure.judge.backends.sdk_warnings import SdkOrigin
from tests.scripted import SCRIPTED_ARGS

pytest.importorskip("litellm")

# litellm loads most of its modules lazily, at a session's first call or batch; this one declares
# TypedDicts with ReadOnly items (pydantic warns when it builds their schemas). It is imported again,
# in a background thread as the plugin's SDK warm-up does, in a test of its own: pytest restores the
# warning filters after each test, which is what dropped litellm's own filter for them.
TEST_FILE = """
import importlib
import sys
import threading

from pydantic import TypeAdapter
from typing_extensions import ReadOnly, TypedDict

SDK_MODULE = "litellm.llms.github_copilot.authenticator"


def test_the_sdk_loads_a_module_in_the_background():
    sys.modules.pop(SDK_MODULE, None)
    thread = threading.Thread(target=importlib.import_module, args=(SDK_MODULE,))
    thread.start()
    thread.join(60)
    assert SDK_MODULE in sys.modules


class UserToken(TypedDict):
    token: ReadOnly[str]


def test_the_user_builds_a_schema_of_their_own():
    TypeAdapter(UserToken)
"""


def warnings_summary(result: pytest.RunResult) -> str:
    text = result.stdout.str()
    return text.split("warnings summary")[1].split("-- Docs:")[0] if "warnings summary" in text else ""


def test_the_sdks_schema_warnings_are_quiet_the_users_are_shown(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The inner runs start from this test's filters: without this suite's own copy of the filter
    # (tests/conftest.py), so what they show is the plugin's doing.
    monkeypatch.setattr(warnings, "filters", [f for f in warnings.filters if not isinstance(f[1], SdkOrigin)])
    pytester.makepyfile(test_sdk=TEST_FILE)
    judged = pytester.runpytest(*SCRIPTED_ARGS)
    judged.assert_outcomes(passed=2)
    summary = warnings_summary(judged)
    assert "TypedDict class 'UserToken'" in summary
    assert "_DeviceCode" not in summary and "_AccessTokenPoll" not in summary, summary
    # The control: the same tests with the judge off (the plugin leaves the filters alone) do show the
    # SDK's warnings, so the module really warns when imported under a test's filters.
    plain = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider")
    plain.assert_outcomes(passed=2)
    assert "TypedDict class '_DeviceCode'" in warnings_summary(plain)

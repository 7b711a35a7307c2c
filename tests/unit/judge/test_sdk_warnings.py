"""The filter that quiets the pydantic warnings an SDK raises about its own types, never the user's."""

from __future__ import annotations

import warnings

import pytest

from pytest_aimeasure.judge.backends.sdk_warnings import SdkOrigin, quiet_sdk_schema_warnings

# A TypedDict with a ReadOnly item, and a TypeAdapter over it: pydantic warns when it builds the schema.
READONLY_TYPES = """
from pydantic import TypeAdapter
from typing_extensions import ReadOnly, TypedDict

class {name}(TypedDict):
    token: ReadOnly[str]

ADAPTER = TypeAdapter({name})
"""


def shown(*codes: tuple[str, str], quiet: bool = True) -> list[str]:
    """The warnings shown while each (module, code) runs as the code of that module (its ``__name__``
    is what the filter reads), under a filter list like a pytest test's: ours, then show everything."""
    with warnings.catch_warnings(record=True) as log:
        warnings.resetwarnings()
        if quiet:
            quiet_sdk_schema_warnings()
            quiet_sdk_schema_warnings()  # idempotent: one entry
            assert sum(isinstance(f[1], SdkOrigin) for f in warnings.filters) == 1
        warnings.simplefilter("always", append=True)
        for module, code in codes:
            # dont_inherit: this file's postponed annotations would hide ReadOnly from TypedDict.
            exec(compile(code, module, "exec", dont_inherit=True), {"__name__": module})
    return [str(w.message) for w in log]


def readonly(module: str, name: str) -> tuple[str, str]:
    return module, READONLY_TYPES.format(name=name)


@pytest.mark.parametrize(
    "sdk", ["litellm.llms.github_copilot.authenticator", "openai.types.responses", "anthropic.types"]
)
def test_a_schema_warning_about_the_sdks_types_is_quiet_the_users_is_shown(sdk: str) -> None:
    builds = (readonly(sdk, "SdkPayload"), readonly("my_project.payloads", "UserPayload"))
    assert [m.split(" on TypedDict class ")[1][:13] for m in shown(*builds, quiet=False)] == [
        "'SdkPayload' ",
        "'UserPayload'",
    ]  # the control: both warn without the filter
    (message,) = shown(*builds)
    assert "TypedDict class 'UserPayload'" in message and "ReadOnly" in message


def test_the_filter_reads_who_asked_pydantic_not_the_message() -> None:
    messages = shown(
        readonly("litellm.types.utils", "SameName"),
        readonly("user_module", "SameName"),
        # A warning the SDK raises itself (not pydantic about its types) is the SDK's to say.
        ("litellm.utils", "import warnings\nwarnings.warn('litellm says so', UserWarning)"),
    )
    assert len(messages) == 2, messages
    assert "'SameName'" in messages[0] and "ReadOnly" in messages[0]
    assert messages[1] == "litellm says so"

"""Which tests look at the same artifact: what links a gate to the dimensions it guards.

An item's artifact is identified by the :class:`~pytest_aimeasure.measure.artifact.Artifact` objects among
its fixture values (and those it asked ``aimeasure_artifact`` for), and by the values of the test's
own arguments that come from the user's fixtures scoped above the function: the same object is
handed to every test of that scope. The scopes are learnt from pytest's public fixture hooks as
each fixture is set up (``FixtureDef.scope``, ``.argname``, ``.func``), not from pytest's private
per-item fixture info.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import pytest

from pytest_aimeasure.measure.artifact import Artifact, ArtifactRegistry

__all__ = ["INFRASTRUCTURE_MODULES", "ArtifactLinks"]

INFRASTRUCTURE_MODULES = ("_pytest", "pytest", "xdist", "pytest_aimeasure")
"""Fixtures defined in these packages (pytest's, xdist's, ours) never link tests."""


class ArtifactLinks:
    """The live values of the user's higher-scoped fixtures, and what they make of an item's artifact."""

    def __init__(self, artifacts: ArtifactRegistry) -> None:
        self.artifacts = artifacts
        self._live: dict[pytest.FixtureDef[Any], object] = {}

    def fixture_set_up(self, fixturedef: pytest.FixtureDef[Any], value: object) -> None:
        """A fixture produced ``value`` (called from a ``pytest_fixture_setup`` wrapper)."""
        if fixturedef.scope == "function" or value is None:
            return
        module = getattr(fixturedef.func, "__module__", "") or ""
        if not module.startswith(INFRASTRUCTURE_MODULES):
            self._live[fixturedef] = value

    def fixture_torn_down(self, fixturedef: pytest.FixtureDef[Any]) -> None:
        """The fixture's value is gone (``pytest_fixture_post_finalizer``): nothing links to it now."""
        self._live.pop(fixturedef, None)

    def values(self, item: pytest.Item, artifact_keys: Iterable[str] = ()) -> list[object]:
        """What identifies the item's artifact (see the module's docstring)."""
        funcargs: dict[str, object] = getattr(item, "funcargs", {})
        own = _own_arguments(item)
        values: list[object] = []
        for name, value in funcargs.items():
            if isinstance(value, Artifact) or (name in own and any(
                fixturedef.argname == name and live is value for fixturedef, live in self._live.items()
            )):
                values.append(value)
        for key in artifact_keys:
            artifact = self.artifacts.by_key(key)
            if artifact is not None:
                values.append(artifact)
        return values


def _own_arguments(item: pytest.Item) -> set[str]:
    """The names the test function itself takes (not the fixtures its fixtures or autouse pull in)."""
    function = getattr(item, "function", None)
    if function is None:
        return set()
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # a callable without a readable signature takes no fixtures we know
        return set()

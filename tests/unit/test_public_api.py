"""The public API: every name docs/reference.md documents as public imports from the package root."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def documented_names() -> list[str]:
    """The first column of the table in the reference's "Public API" section."""
    text = REFERENCE.read_text(encoding="utf-8")
    section = text.split("\n## Public API\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \|", section, flags=re.MULTILINE)


def test_the_reference_documents_the_public_api() -> None:
    import pytest_aimeasure

    assert sorted(documented_names()) == sorted(pytest_aimeasure.__all__)


@pytest.mark.parametrize("name", documented_names())
def test_every_documented_name_imports_from_the_package_root(name: str) -> None:
    package = importlib.import_module("pytest_aimeasure")
    value = getattr(package, name)
    assert value is not None
    exec(f"from pytest_aimeasure import {name}", {})  # the spelling the docs show


def test_the_public_names_are_the_homes_objects() -> None:
    from pytest_aimeasure import Artifact, Finding, Measurement, ProviderServer, each_repeat, hookspecs
    from pytest_aimeasure.measure.artifact import Artifact as HomeArtifact
    from pytest_aimeasure.measure.artifact import each_repeat as home_each_repeat
    from pytest_aimeasure.measure.models import Finding as HomeFinding
    from pytest_aimeasure.measure.models import Measurement as HomeMeasurement
    from pytest_aimeasure.testing.server import ProviderServer as HomeServer

    assert (Artifact, Finding, Measurement, ProviderServer, each_repeat) == (
        HomeArtifact, HomeFinding, HomeMeasurement, HomeServer, home_each_repeat
    )
    assert hookspecs.__name__ == "pytest_aimeasure.hookspecs"


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pytest_aimeasure

    with pytest.raises(AttributeError, match="no attribute 'Judge'"):
        pytest_aimeasure.Judge  # noqa: B018

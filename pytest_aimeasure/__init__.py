"""pytest-aimeasure: measure LLM output with a sampled judge, error bars and a committed baseline.

The public API, importable from the package root::

    from pytest_aimeasure import Artifact, Finding, Measurement, each_repeat, record_finding

=================  ================================================================================
``Measurement``    the N samples of one item, aggregated (what ``judge.score`` returns)
``Artifact``       what the system under test produced (what ``aimeasure_artifact`` returns)
``Finding``        a thing a person should look at (floor breach, drift, judge error, ...)
``each_repeat``    check a gate on every generation repeat of an artifact ("2/3 valid")
``RepeatCount``    what :func:`each_repeat` returns
``record_finding`` record a finding from library code running inside a test
``hookspecs``      the ``pytest_aimeasure_*`` hooks a conftest or plugin implements
``ProviderServer`` the local Anthropic/OpenAI-speaking server for tests (``pytest_aimeasure.testing``)
=================  ================================================================================

Importing the package is cheap on purpose: each name is loaded when first used, and the judge
backends (anthropic, litellm) and networkx only where they are used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pytest_aimeasure.measure.version import __version__

if TYPE_CHECKING:
    from pytest_aimeasure import hookspecs
    from pytest_aimeasure.measure.artifact import Artifact, RepeatCount, each_repeat
    from pytest_aimeasure.measure.models import Finding, Measurement
    from pytest_aimeasure.measure.runtime import record_finding
    from pytest_aimeasure.testing.server import ProviderServer

_HOMES = {
    "Artifact": "pytest_aimeasure.measure.artifact",
    "RepeatCount": "pytest_aimeasure.measure.artifact",
    "each_repeat": "pytest_aimeasure.measure.artifact",
    "Finding": "pytest_aimeasure.measure.models",
    "Measurement": "pytest_aimeasure.measure.models",
    "record_finding": "pytest_aimeasure.measure.runtime",
    "ProviderServer": "pytest_aimeasure.testing.server",
}

__all__ = [
    "Artifact",
    "Finding",
    "Measurement",
    "ProviderServer",
    "RepeatCount",
    "__version__",
    "each_repeat",
    "hookspecs",
    "record_finding",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its home module on first use (PEP 562)."""
    if name == "hookspecs":
        return importlib.import_module("pytest_aimeasure.hookspecs")
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'pytest_aimeasure' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

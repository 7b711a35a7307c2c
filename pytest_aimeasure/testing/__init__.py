"""Testing helpers for evals: a local, scriptable fake LLM provider.

``ProviderServer`` speaks the Anthropic Messages and OpenAI Chat Completions APIs on 127.0.0.1, so the
real SDKs can be pointed at it (``ANTHROPIC_BASE_URL`` / ``OPENAI_BASE_URL``) in tests. The module is
stdlib-only, so importing it is cheap.
"""

from __future__ import annotations

from pytest_aimeasure.testing.server import Fault, Outcome, ProviderServer, SeenRequest

__all__ = ["Fault", "Outcome", "ProviderServer", "SeenRequest"]

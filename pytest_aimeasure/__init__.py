"""pytest-aimeasure: measure LLM output with a sampled judge, error bars and a committed baseline.

Importing the package is cheap on purpose: the judge backends (anthropic, litellm) and networkx are
imported only where they are used.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]

"""The plugin's version: one home, read by the package root, the fingerprint and the records."""

from __future__ import annotations

__version__ = "0.1.0"

"""The unit tests' own settings."""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# Property tests run on shared, loaded CI machines: generating an example may be slow there, which
# says nothing about the code under test. The properties themselves are checked in full.
settings.register_profile("aimeasure", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("aimeasure")

"""A session's measurements against the baseline: the drift rule and its findings."""

"""Reports of a session's outcome: the terminal section and the JSON results."""

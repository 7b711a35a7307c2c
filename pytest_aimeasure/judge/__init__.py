"""The instrument: prompt and tool schema, sampling, validation with feedback, aggregation.

Nothing here is imported when ``--ai-judge`` is off.
"""

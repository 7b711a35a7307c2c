"""Suites as data: YAML files of prompts × targets, gated and judged, compared side by side.

The modules, by what they hold (see docs/suites.md for the format and the behaviour):

=============  ==================================================================================
``spec``       the file format as pydantic models
``source``     the YAML: bounded loading (aliases), duplicate keys, mapping a field to its line
``schema``     the ``json_schema`` gate's schemas, checked and applied with ``jsonschema``
``model``      loading a file: the checks in order, errors that name the line and the field
``targets``    checking targets before any call, concurrency keys, model families, cost
``callables``  ``module:function`` references: loading, and calling with the keywords they accept
``gates``      the deterministic checks
``collect``    the pytest collector and item (``SuiteFile``, ``SuiteItem``) and item outcomes
``run``        concurrent generation and judging, bounded per concurrency key
``progress``   the live progress line while suite batches are judged
``probes``     the 12-probe behavioural baseline and its offline reference target
=============  ==================================================================================

Nothing here is imported unless a session collects a suite file or a command asks for it.
"""

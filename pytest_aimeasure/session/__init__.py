"""One pytest session's orchestration: settings from the option table, markers, the judge fixture, the
pipeline, and the conclusion (comparison, baseline update, reports) on the controller."""

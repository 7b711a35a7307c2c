"""A YAML alias bomb in a suite file is refused at load, checked in a child with bounded memory (the
format's schema and rules are tested in tests/unit/suites/test_model.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# A "billion laughs": nine lines whose aliases expand to 9⁹ (387 million) strings.
BILLION_LAUGHS = """\
suite: bomb
targets:
  - model: anthropic/claude-test
    params:
      a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
      g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
      h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
      i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
prompts:
  - {id: p, text: hi}
"""

# Runs the suite in a child with 1.5 GB of address space and a time limit, so a loader that lets the
# bomb through fails this test instead of taking the machine down. (Unbounded, the SDK serialising
# the params for its request grew the process past 5 GB; the base URL is a closed local port.)
_GUARDED = """\
import resource, sys
limit = 1536 * 1024 * 1024
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:xdist", sys.argv[1]]))
"""


def test_a_yaml_alias_bomb_is_refused_at_load_with_file_and_line(tmp_path: Path) -> None:
    suite = tmp_path / "bomb.aimeasure.yaml"
    suite.write_text(BILLION_LAUGHS)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _GUARDED, str(suite)],
            cwd=tmp_path,
            env={**os.environ, "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9"},
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("loading the alias bomb did not finish within 120 s")
    out = proc.stdout + proc.stderr
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out  # a collection error, not a crash
    assert "MemoryError" not in out
    assert (
        f"invalid suite file {suite}: line 10: alias *e makes this file's aliases expand to more than "
        "100,000 values or 10,000,000 characters (a 'billion laughs' document?)"
    ) in out

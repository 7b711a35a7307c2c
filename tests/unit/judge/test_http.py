"""The native routes' HTTP layer: what importing it costs the session's first judge request."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_the_warm_up_imports_what_the_first_request_needs_and_not_the_httpx_cli() -> None:
    pytest.importorskip("click")  # httpx imports its CLI only when click is installed (litellm brings it)
    # In a child interpreter: this one imported httpx long ago.
    code = (
        "import sys\n"
        "from pytest_aimeasure.judge.resolve import import_transport\n"
        "import_transport('anthropic/claude-x')\n"
        "wanted = {'httpx', 'httpcore', 'anyio._backends._asyncio', 'httpx._main', 'click', 'pygments'}\n"
        "print(sorted(wanted & set(sys.modules)))\n"
        "print('httpx._main' in sys.modules)\n"  # no placeholder left: a later import is a real one
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["['anyio._backends._asyncio', 'httpcore', 'httpx']", "False"]

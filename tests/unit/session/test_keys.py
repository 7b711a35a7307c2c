from __future__ import annotations

import pytest

from pytest_aimeasure.session.state import _without_group


@pytest.mark.parametrize(
    ("nodeid", "expected"),
    [
        ("t.py::test_x@grp", "t.py::test_x"),
        ("t.py::test_x[a@b]@grp", "t.py::test_x[a@b]"),
        # An @ inside a parameter id is the test's own: without a group there is nothing to strip.
        ("t.py::test_mail[a@b.c]", "t.py::test_mail[a@b.c]"),
        ("t.py::C::test_y", "t.py::C::test_y"),
    ],
)
def test_only_the_group_suffix_xdist_loadgroup_appends_is_stripped(nodeid: str, expected: str) -> None:
    assert _without_group(nodeid) == expected

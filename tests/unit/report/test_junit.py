"""The verdicts added to pytest's JUnit XML file."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from pytest_aimeasure.report.junit import ITEM_PROPERTY, VERDICT_PROPERTY, add_verdicts

IDS = ["tone::t.py::test_a[0]", 'tone::t.py::test_b[&<"ü">]', "tone::t.py::test_c[a\nb\tc]", "gone::t.py::x"]
DECLARATION = '<?xml version="1.0" encoding="utf-8"?>'


def _junit(path: Path, system_out: str) -> None:
    """A JUnit file as pytest's junitxml writes it: ElementTree's text, no indentation."""
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name="pytest", tests=str(len(IDS)))
    for n, item_id in enumerate(IDS):
        case = ET.SubElement(suite, "testcase", classname="t", name=f"test_{n}", time="0.001")
        properties = ET.SubElement(case, "properties")
        properties.append(ET.Element("property", name="other", value="1"))
        properties.append(ET.Element("property", name=ITEM_PROPERTY, value=item_id))
        ET.SubElement(case, "system-out").text = system_out
    path.write_bytes((DECLARATION + ET.tostring(root, encoding="unicode")).encode())


def _parsed_and_inserted(path: Path, verdicts: dict[str, str]) -> bytes:
    """The file ElementTree makes when the verdicts are inserted in its tree (how it was done before)."""
    tree = ET.parse(path)
    for properties in tree.getroot().iter("properties"):
        for index in reversed(range(len(properties))):
            verdict = verdicts.get(properties[index].get("value") or "")
            if properties[index].get("name") == ITEM_PROPERTY and verdict is not None:
                properties.insert(index + 1, ET.Element("property", name=VERDICT_PROPERTY, value=verdict))
    return (
        '<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(tree.getroot(), encoding="unicode")
    ).encode()


def test_each_items_verdict_follows_its_property_as_elementtree_would_write_it(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    _junit(path, "log line\n")
    verdicts = {IDS[0]: "stable", IDS[1]: "regressed", IDS[2]: "new", "tone::t.py::not_in_the_file": "new"}
    expected = _parsed_and_inserted(path, verdicts)
    add_verdicts(path, verdicts)
    assert path.read_bytes() == expected
    read = ET.parse(path).getroot()
    pairs = [[(p.get("name"), p.get("value")) for p in props] for props in read.iter("properties")]
    assert pairs[1] == [("other", "1"), (ITEM_PROPERTY, IDS[1]), (VERDICT_PROPERTY, "regressed")]
    assert pairs[3] == [("other", "1"), (ITEM_PROPERTY, IDS[3])]  # no verdict for it: left as it was


def test_the_rest_of_pytests_text_is_kept_as_it_was_written(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    _junit(path, "progress 10%\rprogress 100%\r\n")  # a carriage return in a test's captured output
    before = path.read_bytes()
    add_verdicts(path, {IDS[0]: "stable"})
    after = path.read_bytes()
    item = f'<property name="{ITEM_PROPERTY}" value="{IDS[0]}" />'.encode()
    assert after == before.replace(
        item, item + f'<property name="{VERDICT_PROPERTY}" value="stable" />'.encode()
    )
    assert after.count(b"progress 10%\rprogress 100%\r\n") == len(IDS)


def test_no_file_or_no_item_of_it_leaves_everything_as_it_was(tmp_path: Path) -> None:
    add_verdicts(tmp_path / "absent.xml", {IDS[0]: "stable"})
    assert not (tmp_path / "absent.xml").exists()
    path = tmp_path / "junit.xml"
    _junit(path, "")
    before = path.stat()
    add_verdicts(path, {"tone::t.py::elsewhere": "stable"})
    assert path.stat().st_ino == before.st_ino  # not rewritten (an atomic write replaces the file)

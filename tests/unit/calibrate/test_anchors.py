"""The anchor-set file format: YAML and JSONL, validated, with errors naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_aimeasure.calibrate.anchors import AnchorError, load_anchor_file
from pytest_aimeasure.calibrate.references import build_targets, merge_refs

GOOD_YAML = """\
dimension: tone
rubric: "5 = calm"
anchors:
  - id: calm
    text: "We fixed it; sorry for the wait."
    labels: {ann: 5, bob: 4}
    note: apologises and reports the fix
  - id: shouty
    path: shouty.txt
    labels: [1, 2]
  - id: pair
    parts: ["first reply", "second reply"]
    labels: 3
    generator: anthropic/claude-x
"""


def test_yaml_anchor_file_resolves_every_form(tmp_path: Path) -> None:
    (tmp_path / "shouty.txt").write_text("WHY IS THIS BROKEN")
    (tmp_path / "tone.yaml").write_text(GOOD_YAML)
    s = load_anchor_file(tmp_path / "tone.yaml")
    assert s.rubric == "5 = calm"
    calm, shouty, pair = s.anchors
    assert calm.labels == {"ann": 5, "bob": 4} and calm.human_mean == 4.5
    assert calm.source.endswith("tone.yaml:4")
    assert shouty.text == "WHY IS THIS BROKEN" and shouty.labels == {"rater1": 1, "rater2": 2}
    assert pair.parts == ("first reply", "second reply")
    assert "artifact 1 of 2" in pair.text and pair.generator == "anthropic/claude-x"


def test_jsonl_anchor_file(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(
        '{"id": "x", "dimension": "tone", "text": "ok", "labels": {"ann": 3}}\n\n'
        '{"id": "y", "dimension": "clarity", "text": "fine", "labels": [4, 5]}\n'
    )
    s = load_anchor_file(path)
    assert s.dimensions() == ["clarity", "tone"]
    assert s.anchors[1].source.endswith("a.jsonl:3")


@pytest.mark.parametrize(
    ("text", "line", "where"),
    [
        (
            GOOD_YAML.replace("labels: [1, 2]", "labels: [1, 6]"),
            10,
            "anchors[1].labels: score #2: a human score",
        ),
        (
            GOOD_YAML.replace("    note: apologises", "    notes: apologises"),
            7,
            "anchors[0].notes: Extra inputs",
        ),
        (
            GOOD_YAML.replace('    text: "We fixed it; sorry for the wait."\n', ""),
            4,
            "anchors[0]: give the artifact",
        ),
        (GOOD_YAML.replace("dimension: tone\n", ""), 3, "anchors[0].dimension: no dimension"),
        (GOOD_YAML.replace("  - id: pair", "  - id: calm"), 11, "id: 'calm' is used twice"),
        ("anchors: [\n", 2, "(syntax): not valid YAML"),
    ],
)
def test_yaml_errors_name_file_line_and_field(tmp_path: Path, text: str, line: int, where: str) -> None:
    (tmp_path / "shouty.txt").write_text("WHY")
    path = tmp_path / "tone.yaml"
    path.write_text(text)
    with pytest.raises(AnchorError) as info:
        load_anchor_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: ") or message.startswith(f"{path}:{line}:"), message
    assert where in message


def test_jsonl_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"id": "x", "dimension": "tone", "text": "ok", "labels": 3}\n{"id": "y", "labels": 3}\n')
    with pytest.raises(AnchorError, match=r"a\.jsonl:2: anchor file: \(top level\): give the artifact"):
        load_anchor_file(path)
    path.write_text("{not json}\n")
    with pytest.raises(AnchorError, match=r"a\.jsonl:1: .*not valid JSON"):
        load_anchor_file(path)


def test_missing_artifact_path_and_unknown_suffix(tmp_path: Path) -> None:
    (tmp_path / "tone.yaml").write_text(GOOD_YAML)
    with pytest.raises(AnchorError, match=r"tone\.yaml:9: anchor file: anchors\[1\]\.path: cannot read"):
        load_anchor_file(tmp_path / "tone.yaml")
    with pytest.raises(AnchorError, match=r"must end in \.yaml, \.yml or \.jsonl"):
        load_anchor_file(tmp_path / "tone.txt")


def test_marker_reference_needs_anchors_of_its_dimension(tmp_path: Path) -> None:
    (tmp_path / "shouty.txt").write_text("WHY")
    (tmp_path / "tone.yaml").write_text(GOOD_YAML)
    ref = {"dimension": "clarity", "files": [str(tmp_path / "tone.yaml")], "rubric": "r", "source": "test_x"}
    with pytest.raises(AnchorError, match=r"test_x takes anchors for dimension 'clarity'.*it holds: tone"):
        build_targets(merge_refs([ref]), [], root=tmp_path, min_kappa=0.6, max_abs_bias=0.5)
    ref = {**ref, "dimension": "tone", "rubric": "marker rubric", "min_kappa": 0.8}
    (target,) = build_targets(merge_refs([ref]), [], root=tmp_path, min_kappa=0.6, max_abs_bias=0.5)
    assert target.rubric == "marker rubric"  # the real items' rubric wins over the file's
    assert target.thresholds.min_kappa == 0.8 and target.thresholds.max_abs_bias == 0.5
    assert target.files == ["tone.yaml"] and len(target.anchors) == 3


def test_an_anchor_text_above_the_artifact_cap_is_an_error_naming_file_anchor_sizes_and_option(
    tmp_path: Path,
) -> None:
    (tmp_path / "shouty.txt").write_text("W" * 100)  # a path: anchor's text is what the judge reads
    (tmp_path / "tone.yaml").write_text(GOOD_YAML)
    files = [tmp_path / "tone.yaml"]
    with pytest.raises(AnchorError) as raised:
        build_targets({}, files, root=tmp_path, min_kappa=0.6, max_abs_bias=0.5, max_chars=99)
    assert str(raised.value) == (
        f"{tmp_path / 'tone.yaml'}:8: anchor file: anchor 'shouty' of dimension 'tone' is 100 characters, "
        "above the limit of 99 sent to the judge (a provider refuses a prompt that large); shorten it, or "
        "raise the limit with --judge-max-artifact-chars / aimeasure_judge_max_artifact_chars"
    )
    (target,) = build_targets({}, files, root=tmp_path, min_kappa=0.6, max_abs_bias=0.5, max_chars=100)
    assert max(len(a.text) for a in target.anchors) == 100  # at the limit is allowed


# -- issue 20: one YAML loader; duplicate keys, syntax lines, unencodable text --------------------------


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        (
            "labels.yaml",
            "dimension: tone\nanchors:\n  - id: a\n    text: hi\n    labels: {ann: 3, ann: 5}\n",
            "labels.yaml:5: anchor file: ann: duplicate key (first on line 5)",
        ),
        (
            "blocks.yaml",
            "dimension: tone\nanchors:\n  - id: a\n    text: hi\n    labels: 3\nanchors:\n  - id: b\n"
            "    text: ho\n    labels: 4\n",
            "blocks.yaml:6: anchor file: anchors: duplicate key (first on line 2)",
        ),
        (
            "quote.yaml",
            "dimension: tone\nanchors:\n  - id: a\n    labels: 3\n  - id: b\n    labels: 4\n    text: 'open\n"
            "    note: x\n",
            "quote.yaml:7: anchor file: (syntax): not valid YAML: while scanning a quoted scalar",
        ),
        (
            "surrogate.yaml",
            'dimension: tone\nanchors:\n  - id: a\n    text: "bad \\ud800"\n    labels: 3\n',
            "surrogate.yaml: anchor file: ['anchors'][0]['text']: this text is not valid Unicode text: "
            "a lone surrogate U+D800 at character 4",
        ),
        (
            "surrogate.jsonl",
            '{"id": "a", "dimension": "t", "text": "ok", "labels": 3}\n'
            '{"id": "b", "dimension": "t", "text": "x", "facts": {"k": "\\udfff"}, "labels": 3}\n',
            "surrogate.jsonl:2: anchor file: ['facts']['k']: this text is not valid Unicode text",
        ),
    ],
    ids=[
        "duplicate-labels",
        "duplicate-anchors-block",
        "unclosed-quote-line",
        "surrogate-yaml",
        "surrogate-jsonl",
    ],
)
def test_bad_anchor_files_are_one_error_naming_file_line_and_field(
    tmp_path: Path, name: str, text: str, said: str
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(AnchorError) as info:
        load_anchor_file(path)
    assert said in str(info.value)


def test_a_big_anchor_file_is_parsed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from pytest_aimeasure.store import yamlsource

    parsed: list[int] = []
    real = yamlsource._AliasLoader.get_single_node

    def counted(self: yaml.SafeLoader) -> object:
        parsed.append(1)
        return real(self)  # type: ignore[arg-type]

    monkeypatch.setattr(yamlsource._AliasLoader, "get_single_node", counted)
    composed: list[int] = []
    monkeypatch.setattr(yaml, "compose", lambda *a, **k: composed.append(1))
    monkeypatch.setattr(yaml, "safe_load", lambda *a, **k: composed.append(1))
    path = tmp_path / "tone.yaml"
    path.write_text("dimension: tone\nanchors:\n  - id: a\n    text: hi\n    labels: 3\n", encoding="utf-8")
    assert [a.id for a in load_anchor_file(path).anchors] == ["a"]
    assert (parsed, composed) == ([1], [])

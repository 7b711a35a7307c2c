"""What the judge fixture reads from what a test passes to judge.score."""

from __future__ import annotations

import hashlib

from pytest_aimeasure.measure.artifact import Artifact
from pytest_aimeasure.session.fixture import artifact_text, generator_of


def test_text_is_judged_as_it_is_and_bytes_are_decoded() -> None:
    assert artifact_text("Hello") == ("Hello", None, None)
    assert artifact_text(b"caf\xc3\xa9") == ("café", None, None)


def test_a_json_value_is_judged_as_sorted_indented_json() -> None:
    text, key, sha = artifact_text({"b": 1, "a": [1, 2]})
    assert text == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}'
    assert (key, sha) == (None, None)


def artifact(text: str, generator: str | None = None) -> Artifact:
    sha = hashlib.sha256(text.encode()).hexdigest()
    return Artifact(key="reply", value=text, text=text, sha256=sha, media_type="text", generator=generator)


def test_an_artifact_brings_its_key_and_digest() -> None:
    text, key, sha = artifact_text(artifact("Hi there"))
    assert (text, key, sha) == ("Hi there", "reply", hashlib.sha256(b"Hi there").hexdigest())


def test_the_writer_of_an_artifact() -> None:
    assert generator_of("plain text") is None
    assert generator_of(artifact("x", generator="openai/gpt-4o")) == "openai/gpt-4o"
    assert generator_of(artifact("x")) is None

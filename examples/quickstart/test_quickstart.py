"""The smallest useful eval: one generated artifact, one gate, one dimension with facts."""

from __future__ import annotations

import pytest

from pytest_aimeasure.measure.artifact import Artifact


def write_reply(customer_message: str) -> str:
    """Stands in for your LLM product: replace it with a call to your generator."""
    return (
        "Thanks for flagging the late delivery. Your parcel left our depot this morning and will "
        "arrive tomorrow before noon. I have refunded the shipping fee to your card."
    )


@pytest.fixture(scope="module")
def reply(aimeasure_artifact) -> Artifact:  # type: ignore[no-untyped-def]
    return aimeasure_artifact(
        "late-delivery-reply", lambda: write_reply("Where is my parcel?"), label="support-bot-v1"
    )


@pytest.mark.gate
def test_reply_is_short_enough(reply: Artifact) -> None:
    assert len(reply.text.split()) <= 80


@pytest.mark.dimension(
    "helpfulness",
    floor=3.0,
    rubric=(
        "5: answers the question, gives a concrete next step and a time; 3: answers but vaguely; "
        "1: does not answer."
    ),
)
def test_helpfulness(reply: Artifact, judge) -> None:  # type: ignore[no-untyped-def]
    judge.score(reply, facts={"words": len(reply.text.split()), "mentions_a_time": "tomorrow" in reply.text})

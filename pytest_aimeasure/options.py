"""Every command-line option and its ini twin, in one table.

Values are validated when they are parsed (``type=`` for the command line; the same parser for the
ini value, with the ini key named in the error). The command line wins over the ini file.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest


def _number(kind: type[int] | type[float], minimum: float, *, strict: bool) -> Callable[[str], Any]:
    """A parser for a whole number (``int``) or a finite number (``float``) >= or > ``minimum``."""
    what = ("a whole number" if kind is int else "a number") + (" > " if strict else " >= ") + f"{minimum:g}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    parse.__name__ = what
    return parse


positive_int = _number(int, 1, strict=False)
non_negative_int = _number(int, 0, strict=False)
positive_float = _number(float, 0, strict=True)
non_negative_float = _number(float, 0, strict=False)


def choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().lower()
        if value not in allowed:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(allowed)}; got {text!r}")
        return value

    parse.__name__ = "one of " + "|".join(allowed)
    return parse


def boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def non_empty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a non-empty value")
    return text.strip()


@dataclass(frozen=True)
class Option:
    flag: str
    dest: str
    help: str
    parse: Callable[[str], Any] = non_empty
    default: Any = None
    ini: str | None = None
    flag_only: bool = False  # a switch (store_true)
    optional_value: str | None = None  # nargs="?": the value when the flag is given bare
    metavar: str | None = None


OPTIONS: tuple[Option, ...] = (
    Option(
        "--ai-judge",
        "ai_judge",
        "Enable judging: run @pytest.mark.dimension tests with the LLM judge.",
        boolean,
        False,
        "aimeasure_ai_judge",
        flag_only=True,
    ),
    Option(
        "--judge-model",
        "judge_model",
        "Judge model: anthropic/<model> or claude-* (anthropic SDK), provider/model (litellm), "
        "or scripted[:module:attr] (offline). Default: a current Claude model when "
        "ANTHROPIC_API_KEY is set.",
        non_empty,
        None,
        "aimeasure_judge_model",
        metavar="MODEL",
    ),
    Option(
        "--offline-judge-model",
        "offline_judge_model",
        "Judge model used when none is configured and ANTHROPIC_API_KEY is not set (e.g. scripted): "
        "offline by default, live when a key is set.",
        non_empty,
        None,
        "aimeasure_offline_judge_model",
        metavar="MODEL",
    ),
    Option(
        "--judge-samples",
        "judge_samples",
        "Judge samples per item (default 3).",
        positive_int,
        3,
        "aimeasure_judge_samples",
        metavar="N",
    ),
    Option(
        "--judge-concurrency",
        "judge_concurrency",
        "Judge calls in flight at once, per provider (default 8).",
        positive_int,
        8,
        "aimeasure_judge_concurrency",
        metavar="N",
    ),
    Option(
        "--judge-timeout",
        "judge_timeout",
        "Seconds before one judge call times out (default 60).",
        positive_float,
        60.0,
        "aimeasure_judge_timeout",
        metavar="SECONDS",
    ),
    Option(
        "--judge-retries",
        "judge_retries",
        "Transport retries per judge call (429, 5xx, 529 overloaded, timeouts), done by the SDK with "
        "backoff (default 4). Each attempt may take up to --judge-timeout.",
        non_negative_int,
        4,
        "aimeasure_judge_retries",
        metavar="N",
    ),
    Option(
        "--judge-cache",
        "judge_cache",
        "Sample cache: on (reuse stored samples), off, or replay (offline: a miss is an error).",
        choice("on", "off", "replay"),
        "on",
        "aimeasure_judge_cache",
        metavar="on|off|replay",
    ),
    Option(
        "--judge-budget-usd",
        "judge_budget_usd",
        "Start no judge call once spend plus calls in flight would exceed this many US dollars.",
        non_negative_float,
        None,
        "aimeasure_judge_budget_usd",
        metavar="USD",
    ),
    Option(
        "--judge-dry-run",
        "judge_dry_run",
        "Count the judge calls the selected tests would make and estimate their cost; call nothing.",
        boolean,
        False,
        None,
        flag_only=True,
    ),
    Option(
        "--baseline",
        "baseline",
        "Baseline file (default aimeasure-baseline.json at the rootdir).",
        non_empty,
        "aimeasure-baseline.json",
        "aimeasure_baseline",
        metavar="PATH",
    ),
    Option(
        "--update-baseline",
        "update_baseline",
        "Write this session's measurements into the baseline file (merged, sorted).",
        boolean,
        False,
        None,
        flag_only=True,
    ),
    Option(
        "--prune-baseline",
        "prune_baseline",
        "With --update-baseline: also remove entries of tests that did not run.",
        boolean,
        False,
        None,
        flag_only=True,
    ),
    Option(
        "--drift",
        "drift",
        "What a regression against the baseline does: fail (default), warn, off.",
        choice("fail", "warn", "off"),
        "fail",
        "aimeasure_drift",
        metavar="fail|warn|off",
    ),
    Option(
        "--aimeasure-json",
        "aimeasure_json",
        "Write the session's results as JSON to PATH.",
        non_empty,
        None,
        "aimeasure_json",
        metavar="PATH",
    ),
    Option(
        "--aimeasure-store",
        "aimeasure_store",
        "Run store folder (default .aimeasure at the rootdir).",
        non_empty,
        ".aimeasure",
        "aimeasure_store",
        metavar="PATH",
    ),
    Option(
        "--rejudge",
        "rejudge",
        "Re-score the artifacts stored by RUN_ID (default: latest) without generating them.",
        non_empty,
        None,
        None,
        optional_value="latest",
        metavar="RUN_ID",
    ),
    Option(
        "--resume",
        "resume",
        "Continue an interrupted run RUN_ID (default: latest), requesting only missing samples.",
        non_empty,
        None,
        None,
        optional_value="latest",
        metavar="RUN_ID",
    ),
    Option(
        "--judge-var-floor",
        "judge_var_floor",
        "Lower bound on within-item score variance used for error bars (default 1/12).",
        positive_float,
        1 / 12,
        "aimeasure_var_floor",
        metavar="VARIANCE",
    ),
)

BY_DEST = {opt.dest: opt for opt in OPTIONS}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("aimeasure", "AI measurement (pytest-aimeasure)")
    for opt in OPTIONS:
        ini_note = f" [ini: {opt.ini}]" if opt.ini else ""
        if opt.flag_only:
            group.addoption(
                opt.flag, action="store_true", dest=opt.dest, default=None, help=opt.help + ini_note
            )
        elif opt.optional_value is not None:
            group.addoption(
                opt.flag,
                dest=opt.dest,
                nargs="?",
                const=opt.optional_value,
                default=None,
                type=opt.parse,
                metavar=opt.metavar,
                help=opt.help + ini_note,
            )
        else:
            group.addoption(
                opt.flag,
                dest=opt.dest,
                default=None,
                type=opt.parse,
                metavar=opt.metavar,
                help=opt.help + ini_note,
            )
        if opt.ini:
            parser.addini(opt.ini, opt.help + f" (ini twin of {opt.flag})", type="string", default="")


def get(config: pytest.Config, dest: str) -> Any:
    """The option's value: command line, else ini (parsed, with the key named on error), else default."""
    opt = BY_DEST[dest]
    value = config.getoption(dest, None)
    if value is not None and value is not False:
        return value
    if opt.ini:
        raw = config.getini(opt.ini)
        if isinstance(raw, str) and raw.strip():
            try:
                return opt.parse(raw)
            except argparse.ArgumentTypeError as exc:
                raise pytest.UsageError(
                    f"ini option {opt.ini} = {raw!r}: {exc} (or pass {opt.flag})"
                ) from None
    return opt.default

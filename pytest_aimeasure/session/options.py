"""Every command-line option and its ini twin, in one table.

Values are validated when they are parsed (``type=`` for the command line; the same parser for the
ini value, with the ini key named in the error). The command line wins over the ini file.

Naming, so no flag can collide with another plugin's: the judge's settings are ``--judge-*``, the
session's are ``--aimeasure-*``; only ``--ai-judge``, ``--offline-judge-model``, ``--update-baseline`` and
``--prune-baseline`` keep their established names. An ini key is ``aimeasure_`` plus the flag without
its ``--`` (and without an ``aimeasure-`` prefix), dashes as underscores: ``--judge-var-floor`` is
``aimeasure_judge_var_floor``.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from pytest_aimeasure.measure.sampling import MAX_REPEATS, MAX_SAMPLES
from pytest_aimeasure.measure.text import MAX_ARTIFACT_CHARS


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


def repeats_count(text: str) -> int:
    """Generation repeats: a whole number from 1 to MAX_REPEATS."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_REPEATS:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {MAX_REPEATS}, got {text!r}")
    return value


repeats_count.__name__ = f"a whole number from 1 to {MAX_REPEATS}"
non_negative_int = _number(int, 0, strict=False)
positive_float = _number(float, 0, strict=True)
non_negative_float = _number(float, 0, strict=False)


def samples_setting(text: str) -> int | str:
    """``--judge-samples``: a whole number >= 1, or ``auto`` (adaptive sampling)."""
    value = text.strip().lower()
    if value == "auto":
        return "auto"
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1 or 'auto', got {text!r}")
    return _at_most_max_samples(number)


def _at_most_max_samples(number: int) -> int:
    if number > MAX_SAMPLES:
        raise argparse.ArgumentTypeError(
            f"{number} samples per item is above the limit of {MAX_SAMPLES}; use at most {MAX_SAMPLES}"
        )
    return number


def samples_max(text: str) -> int:
    """``--judge-samples-max``: a whole number from 2 to :data:`MAX_SAMPLES`."""
    return _at_most_max_samples(int(at_least_two(text)))


samples_setting.__name__ = f"a whole number from 1 to {MAX_SAMPLES}, or auto"
at_least_two = _number(int, 2, strict=False)
samples_max.__name__ = f"a whole number from 2 to {MAX_SAMPLES}"


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


def html_report_path(text: str) -> str:
    """A path for the HTML report; the report's plotting library must be installed (checked without
    importing it: start-up stays cheap)."""
    import importlib.util

    value = non_empty(text)
    if importlib.util.find_spec("matplotlib") is None:
        raise argparse.ArgumentTypeError(
            "the HTML report needs matplotlib, which is not installed: pip install 'pytest-aimeasure[report]'"
        )
    return value


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
        "Judge samples per item (default 3), or auto: from --judge-samples-min up to --judge-samples-max "
        "in steps of --judge-samples-step, stopping as soon as the item's floor and drift decisions are "
        "settled (a group-sequential design).",
        samples_setting,
        3,
        "aimeasure_judge_samples",
        metavar="N|auto",
    ),
    Option(
        "--judge-samples-min",
        "judge_samples_min",
        "With --judge-samples auto: the samples every item takes (default 3; at least 2).",
        at_least_two,
        3,
        "aimeasure_judge_samples_min",
        metavar="N",
    ),
    Option(
        "--judge-samples-max",
        "judge_samples_max",
        "With --judge-samples auto: the most samples an item may take (default 9).",
        samples_max,
        9,
        "aimeasure_judge_samples_max",
        metavar="N",
    ),
    Option(
        "--judge-samples-step",
        "judge_samples_step",
        "With --judge-samples auto: samples added at each look while a decision is open (default 2).",
        positive_int,
        2,
        "aimeasure_judge_samples_step",
        metavar="N",
    ),
    Option(
        "--judge-concurrency",
        "judge_concurrency",
        "Judge calls in flight at once, per provider, at most, over the whole session: under xdist "
        "the workers share it, each taking its part, at least 1 (default: adaptive, starting at 32 and "
        "growing while latency holds and no 429/529 comes, up to 64, shared alike); halved on a "
        "429/529 and grown back.",
        positive_int,
        None,
        "aimeasure_judge_concurrency",
        metavar="N",
    ),
    Option(
        "--judge-pipeline",
        "judge_pipeline",
        "Dimension tests whose verdicts may be pending at once: judge.score returns at once and the "
        "test's reports are logged, in order, when its samples land (default: 2 x --judge-concurrency, "
        "128 when that is adaptive, at least 32; under xdist 2 x the worker's part; 0 waits in each test).",
        non_negative_int,
        None,
        "aimeasure_judge_pipeline",
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
        "Transport retries per judge call (429, 5xx, 529 overloaded, timeouts, refused connections) "
        "(default 4). A 429/529 pauses every call to the provider for its retry-after; others back off "
        "from 0.5 s. Each attempt may take up to --judge-timeout.",
        non_negative_int,
        4,
        "aimeasure_judge_retries",
        metavar="N",
    ),
    Option(
        "--judge-quota-wait",
        "judge_quota_wait",
        "Seconds a provider may answer nothing but 429/529 before it is given up: its calls end as judge "
        "errors 'rate-limited: quota exhausted?' (default 300). While it waits, a line says so, under "
        "-q too.",
        positive_float,
        300.0,
        "aimeasure_judge_quota_wait",
        metavar="SECONDS",
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
        "--judge-batch",
        "judge_batch",
        "Send judge calls through a batch API at batch prices (the Anthropic Message Batches API for "
        "anthropic judges, OpenAI's Batch API for openai/... judges): collected, submitted, polled "
        "until done; batch ids are journaled, so --aimeasure-resume polls them and never resubmits.",
        boolean,
        False,
        "aimeasure_judge_batch",
        flag_only=True,
    ),
    Option(
        "--judge-batch-poll",
        "judge_batch_poll",
        "Seconds before the first poll of a submitted batch (default 5); each later pause is 1.5 times "
        "longer, at most 60 s.",
        positive_float,
        5.0,
        "aimeasure_judge_batch_poll",
        metavar="SECONDS",
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
        "--aimeasure-baseline",
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
        "--aimeasure-baseline-pool",
        "baseline_pool",
        "With --update-baseline: pool up to K sessions per item under an unchanged judge (1: replace).",
        positive_int,
        10,
        "aimeasure_baseline_pool",
        metavar="K",
    ),
    Option(
        "--aimeasure-baseline-repeats",
        "baseline_repeats",
        "With --update-baseline: generate K outputs of every artifact that sets no repeats= "
        "(aimeasure_artifact, suite prompts), so the baseline measures how much the generator moves "
        "between outputs (default 3; 1: one output, as in other runs).",
        repeats_count,
        3,
        "aimeasure_baseline_repeats",
        metavar="K",
    ),
    Option(
        "--aimeasure-attribute",
        "attribute",
        "When a dimension regressed, improved or is not comparable: re-judge the baseline's stored "
        "artifacts with today's judge and split the change into the judge's part and the system's.",
        boolean,
        False,
        "aimeasure_attribute",
        flag_only=True,
    ),
    Option(
        "--aimeasure-confirm",
        "confirm",
        "A dimension that looks lower against a baseline of up to ten pooled sessions: judge the baseline's "
        "stored outputs again (fresh calls) and test today's against them, where a shift of the whole "
        "session cancels: rejudge (default), off (no extra calls; the drift rule alone, with the "
        "whole level).",
        choice("rejudge", "off"),
        "rejudge",
        "aimeasure_confirm",
        metavar="rejudge|off",
    ),
    Option(
        "--aimeasure-drift",
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
        "--aimeasure-html",
        "aimeasure_html",
        "Write the session's self-contained HTML report to PATH (needs pytest-aimeasure[report]).",
        html_report_path,
        None,
        "aimeasure_html",
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
        "--aimeasure-rejudge",
        "rejudge",
        "Re-score the artifacts stored by RUN_ID (default: latest) without generating them.",
        non_empty,
        None,
        None,
        optional_value="latest",
        metavar="RUN_ID",
    ),
    Option(
        "--aimeasure-resume",
        "resume",
        "Continue an interrupted run RUN_ID (default: latest), requesting only missing samples.",
        non_empty,
        None,
        None,
        optional_value="latest",
        metavar="RUN_ID",
    ),
    Option(
        "--judge-max-artifact-chars",
        "judge_max_artifact_chars",
        "The longest artifact or calibration anchor text sent to the judge, in characters (default "
        "1,000,000): a longer artifact fails its test, a longer anchor the session at collection, naming "
        "both sizes instead of being sent whole.",
        positive_int,
        MAX_ARTIFACT_CHARS,
        "aimeasure_judge_max_artifact_chars",
        metavar="N",
    ),
    Option(
        "--judge-var-floor",
        "judge_var_floor",
        "Lower bound on within-item score variance used for error bars (default 1/12).",
        positive_float,
        1 / 12,
        "aimeasure_judge_var_floor",
        metavar="VARIANCE",
    ),
    Option(
        "--judge-calibrate",
        "calibrate",
        "Judge every human-labelled anchor (anchors= on a dimension, the aimeasure_anchors ini globs, a "
        "suite dimension's anchors:) and report the judge's agreement, bias and noise per dimension; "
        "=fail also fails the run when a dimension's ruler is untrusted (inconclusive only warns).",
        choice("report", "fail"),
        None,
        "aimeasure_judge_calibrate",
        optional_value="report",
        metavar="report|fail",
    ),
    Option(
        "--judge-bias",
        "judge_bias",
        "With --judge-calibrate: also run the bias probes (length, order, self-preference, range use).",
        boolean,
        False,
        "aimeasure_judge_bias",
        flag_only=True,
    ),
    Option(
        "--judge-min-kappa",
        "min_kappa",
        "Default minimum quadratic-weighted kappa of a calibrated dimension (default 0.6).",
        _number(float, -1, strict=False),
        0.6,
        "aimeasure_judge_min_kappa",
        metavar="KAPPA",
    ),
    Option(
        "--judge-max-abs-bias",
        "max_abs_bias",
        "Default largest |mean judge - human| of a calibrated dimension (default 0.5).",
        non_negative_float,
        0.5,
        "aimeasure_judge_max_abs_bias",
        metavar="POINTS",
    ),
)

ANCHORS_INI = "aimeasure_anchors"

BY_DEST = {opt.dest: opt for opt in OPTIONS}
UNPREFIXED = ("--ai-judge", "--offline-judge-model", "--update-baseline", "--prune-baseline")
"""Flags that keep their established names; every other flag starts with --judge- or --aimeasure-."""


def ini_name(flag: str) -> str:
    """The ini key that matches ``flag`` (the naming rule of this module)."""
    return "aimeasure_" + flag.removeprefix("--").removeprefix("aimeasure-").replace("-", "_")


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("aimeasure", "AI measurement (pytest-aimeasure)")
    for opt in OPTIONS:
        ini_note = f" [ini: {opt.ini}]" if opt.ini else ""
        _add_flag(group, opt, opt.help + ini_note)
        if opt.ini:
            parser.addini(opt.ini, opt.help + f" (ini twin of {opt.flag})", type="string", default="")

    parser.addini(
        ANCHORS_INI,
        "Anchor files to calibrate against with --judge-calibrate: globs relative to the rootdir, "
        "one a line.",
        type="linelist",
        default=[],
    )


def _add_flag(group: pytest.OptionGroup, opt: Option, help: str) -> None:
    if opt.flag_only:
        group.addoption(opt.flag, action="store_true", dest=opt.dest, default=None, help=help)
    elif opt.optional_value is not None:
        group.addoption(
            opt.flag,
            dest=opt.dest,
            nargs="?",
            const=opt.optional_value,
            default=None,
            type=opt.parse,
            metavar=opt.metavar,
            help=help,
        )
    else:
        group.addoption(opt.flag, dest=opt.dest, default=None, type=opt.parse, metavar=opt.metavar, help=help)


def _given(value: Any) -> bool:
    return value is not None and value is not False


def get(config: pytest.Config, dest: str) -> Any:
    """The option's value: command line, else ini (parsed, with the key named on error), else default."""
    opt = BY_DEST[dest]
    value = config.getoption(dest, None)
    if _given(value):
        return value
    if opt.ini is not None:
        raw = config.getini(opt.ini)
        if isinstance(raw, str) and raw.strip():
            try:
                return opt.parse(raw)
            except argparse.ArgumentTypeError as exc:
                raise pytest.UsageError(
                    f"ini option {opt.ini} = {raw!r}: {exc} (or pass {opt.flag})"
                ) from None
    return opt.default

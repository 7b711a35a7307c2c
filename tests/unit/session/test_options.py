"""The option table: each default passes its own parser (values are validated when parsed), names
follow the naming rule, and every option has one dest and one flag."""

from __future__ import annotations

import argparse

import pytest

from pytest_aimeasure.session import options


@pytest.mark.parametrize("opt", options.OPTIONS, ids=lambda o: o.flag)
def test_each_default_is_a_value_its_parser_accepts(opt: options.Option) -> None:
    if opt.default is None or opt.flag_only:
        return
    if opt.parse is options.html_report_path:
        return  # no default
    assert opt.parse(str(opt.default)) == opt.default


def test_flags_dests_and_ini_keys_are_unique() -> None:
    for attribute in ("flag", "dest"):
        values = [getattr(o, attribute) for o in options.OPTIONS]
        assert len(values) == len(set(values)), attribute
    keys = [o.ini for o in options.OPTIONS if o.ini]
    assert len(keys) == len(set(keys))


def test_the_ini_key_follows_the_flag() -> None:
    assert options.ini_name("--judge-var-floor") == "aimeasure_judge_var_floor"
    assert options.ini_name("--aimeasure-store") == "aimeasure_store"


@pytest.mark.parametrize(
    ("parse", "text", "value"),
    [
        (options.positive_int, "3", 3),
        (options.non_negative_float, "0", 0.0),
        (options.samples_setting, " AUTO ", "auto"),
        (options.samples_setting, "5", 5),
        (options.boolean, "yes", True),
        (options.boolean, "off", False),
        (options.choice("fail", "warn", "off"), "Warn", "warn"),
    ],
)
def test_parsers_accept(parse: object, text: str, value: object) -> None:
    assert callable(parse)
    assert parse(text) == value


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (options.positive_int, "0", "expected a whole number >= 1, got '0'"),
        (options.positive_float, "nan", "expected a number > 0, got 'nan'"),
        (options.samples_setting, "many", "expected a whole number >= 1 or 'auto', got 'many'"),
        (options.boolean, "maybe", "expected true or false, got 'maybe'"),
        (options.choice("on", "off"), "sometimes", "expected one of on, off; got 'sometimes'"),
        (options.non_empty, "  ", "expected a non-empty value"),
    ],
)
def test_parsers_refuse_with_what_was_expected(parse: object, text: str, message: str) -> None:
    assert callable(parse)
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        parse(text)
    assert str(raised.value) == message


# -- naming ---------------------------------------------------------------------------------------
def test_every_flag_is_prefixed_and_every_ini_key_follows_its_flag() -> None:
    for opt in options.OPTIONS:
        assert opt.flag in options.UNPREFIXED or opt.flag.startswith(("--judge-", "--aimeasure-")), (
            f"{opt.flag} could collide with another plugin: name it --judge-... or --aimeasure-..."
        )
        if opt.ini:
            assert opt.ini == options.ini_name(opt.flag), (
                f"{opt.flag}: ini key must be {options.ini_name(opt.flag)}"
            )

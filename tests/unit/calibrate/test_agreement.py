"""The agreement statistics against published reference values and hand-checked small cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_aimeasure.calibrate.agreement import (
    confusion,
    krippendorff_alpha,
    level,
    mean_ci,
    spearman,
    weighted_kappa,
)
from pytest_aimeasure.calibrate.anchors import Anchor
from pytest_aimeasure.calibrate.records import Thresholds
from pytest_aimeasure.calibrate.runner import CalibrationTarget, analyse
from pytest_aimeasure.measure.models import Fingerprint

# Krippendorff, K. (2011). "Computing Krippendorff's Alpha-Reliability", section C: four observers, twelve
# units, values 1-5, missing data (None). Published: α nominal = 0.743, α interval = 0.849.
K2011_C = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]


def _units(table: list[list[int | None]]) -> list[list[float]]:
    return [[row[u] for row in table if row[u] is not None] for u in range(len(table[0]))]  # type: ignore[misc]


def test_krippendorff_2011_four_observers_missing_data() -> None:
    units = _units(K2011_C)
    assert krippendorff_alpha(units, metric="nominal") == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha(units, metric="interval") == pytest.approx(0.849, abs=5e-4)


def test_krippendorff_2011_two_observers_binary() -> None:
    # Same paper, section A: two observers, ten units, binary data. Published: α = 0.095.
    a = [0, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    b = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]
    assert krippendorff_alpha([[x, y] for x, y in zip(a, b, strict=True)], metric="nominal") == pytest.approx(
        0.095, abs=5e-4
    )


def test_alpha_undefined_without_variation_and_perfect_with_agreement() -> None:
    assert krippendorff_alpha([[3, 3], [3, 3]]) is None
    assert krippendorff_alpha([[1, 1], [5, 5], [3, 3]]) == 1.0
    assert krippendorff_alpha([[4]]) is None  # a lone value is not pairable


def test_cohen_kappa_textbook_two_by_two() -> None:
    # Wikipedia, "Cohen's kappa", worked example: 50 applications, both yes 20, A yes/B no 5, A no/B yes
    # 10, both no 15: p_o = 0.7, p_e = 0.5, κ = 0.4. With two levels every weighting gives Cohen's κ.
    a = [1] * 20 + [1] * 5 + [2] * 10 + [2] * 15
    b = [1] * 20 + [2] * 5 + [1] * 10 + [2] * 15
    for weights in ("none", "linear", "quadratic"):
        assert weighted_kappa(a, b, weights=weights) == pytest.approx(0.4)  # type: ignore[arg-type]


def test_quadratic_kappa_hand_checked_three_levels() -> None:
    # Human 1,2,3,4,5 against judge 2,3,4,5,5 (one point high, capped at 5). k = 5, w = (i-j)²/16.
    # Observed disagreement: four pairs at distance 1 → 4 · (1/16) / 5 = 0.05.
    # Expected: rows 1..5 each 1/5; judge columns 2, 3, 4 each 1/5, column 5 2/5, so Σ w·r·c =
    # Σ_i [(i-2)² + (i-3)² + (i-4)² + 2(i-5)²] / (16·25) = (15 + 10 + 15 + 60) / 400 = 0.25.
    # κ = 1 − 0.05 / 0.25 = 0.8.
    human, judge = [1, 2, 3, 4, 5], [2, 3, 4, 5, 5]
    assert weighted_kappa(human, judge) == pytest.approx(0.8)


@given(st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5)), min_size=2, max_size=40))
def test_quadratic_kappa_equals_the_moment_formula(pairs: list[tuple[int, int]]) -> None:
    # Quadratic-weighted κ on equally spaced levels equals 2·s_xy / (s_x² + s_y² + (x̄ − ȳ)²) with
    # population moments (Cohen 1968; Schuster 2004): an independent route to the same number.
    x = [p[0] for p in pairs]
    y = [p[1] for p in pairs]
    n = len(pairs)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in pairs) / n
    sxx = sum((a - mx) ** 2 for a in x) / n
    syy = sum((b - my) ** 2 for b in y) / n
    denominator = sxx + syy + (mx - my) ** 2
    kappa = weighted_kappa(x, y)
    if denominator == 0:
        assert kappa is None
    else:
        assert kappa == pytest.approx(2 * sxy / denominator, abs=1e-9)


def test_spearman_textbook_with_reference_value() -> None:
    # Wikipedia, "Spearman's rank correlation coefficient", example: IQ against hours of TV a week,
    # ten people; ρ = −29/165 ≈ −0.1758.
    iq = [106, 100, 86, 101, 99, 103, 97, 113, 112, 110]
    tv = [7, 27, 2, 50, 28, 29, 20, 12, 6, 17]
    assert spearman(iq, tv) == pytest.approx(-29 / 165)


def test_spearman_ties_use_average_ranks() -> None:
    # x ranks 1.5,1.5,3,4; y ranks 1,2,3,4 → Pearson of those = 0.9486832980505138 (hand: r = 4.5/√(4.5·5)).
    assert spearman([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    assert spearman([2, 2, 2], [1, 2, 3]) is None


def test_level_rounds_half_up_and_clamps() -> None:
    assert [level(v) for v in (1.0, 1.49, 1.5, 2.5, 4.6, 5.0)] == [1, 1, 2, 3, 5, 5]


def test_confusion_and_mean_ci_hand_checked() -> None:
    table = confusion([1, 2, 2, 5], [2, 2, 3, 5])
    assert table[0] == [0, 1, 0, 0, 0]
    assert table[1] == [0, 1, 1, 0, 0]
    assert table[4] == [0, 0, 0, 0, 1]
    assert sum(map(sum, table)) == 4
    ci = mean_ci([1.0, 2.0, 3.0])  # mean 2, sd 1, se 1/√3, t(0.975, 2) = 4.302652729749464
    assert ci.mean == 2.0
    assert ci.ci_high == pytest.approx(2 + 4.302652729749464 / math.sqrt(3), abs=1e-6)
    assert not ci.excludes_zero  # [-0.48, 4.48]
    assert mean_ci([1.0, 1.0, 1.0]).excludes_zero  # no spread: a zero-width interval at 1


FP = Fingerprint(
    provider="scripted",
    model="m",
    temperature=0.0,
    samples=2,
    prompt_hash="p",
    rubric_hash="r",
    plugin_major=0,
)


def _anchor(i: int, labels: dict[str, int]) -> Anchor:
    return Anchor(id=f"a{i}", dimension="tone", text=f"text {i}", labels=labels, source=f"f.yaml:{i}")


def test_analyse_hand_checked_small_case() -> None:
    # Four anchors, two raters. Human means 1.5, 2, 4, 5 → levels 2, 2, 4, 5. The judge's samples:
    # a0 [2,2] (mean 2), a1 [3,4] (3.5 → level 4), a2 [4,4], a3 [5,5].
    anchors = [
        _anchor(0, {"ann": 1, "bob": 2}),
        _anchor(1, {"ann": 2, "bob": 2}),
        _anchor(2, {"ann": 4, "bob": 4}),
        _anchor(3, {"ann": 5, "bob": 5}),
    ]
    judge = {"a0": [2, 2], "a1": [3, 4], "a2": [4, 4], "a3": [5, 5]}
    target = CalibrationTarget(
        "tone", "5 = calm", anchors, ["f.yaml"], Thresholds(min_kappa=0.6, max_abs_bias=0.5)
    )
    c = analyse(target, judge, fingerprint=FP, judge_model="scripted")
    # Confusion: human 2 → judge 2 (a0) and judge 4 (a1); human 4 → 4; human 5 → 5.
    assert c.agreement.confusion[1] == [0, 1, 0, 1, 0]
    assert c.agreement.confusion[3] == [0, 0, 0, 1, 0]
    assert c.agreement.confusion[4] == [0, 0, 0, 0, 1]
    assert c.agreement.exact == 0.75
    assert c.agreement.within_one == 0.75  # a1 is two levels off
    # Bias per anchor: +0.5, +1.5, 0, 0 → mean 0.5; human level 2 holds a0 and a1: mean +1.0.
    assert c.bias.mean == 0.5
    assert [(b.level, b.n, b.mean_bias) for b in c.bias.by_level] == [(2, 2, 1.0), (4, 1, 0.0), (5, 1, 0.0)]
    # sd of the biases = √(1/3·(0+1+0.25+0.25)) = √0.5; half-width = t(0.975,3)·√0.5/2 = 3.182446·0.353553
    assert c.bias.ci_high == pytest.approx(0.5 + 3.182446305284263 * math.sqrt(0.5) / 2, abs=1e-4)
    # Repeatability: variances 0, 0.5, 0, 0 → pooled 0.125, SD 0.3536; 3 of 4 anchors agree.
    assert c.repeatability.within_sd == pytest.approx(math.sqrt(0.125), abs=1e-4)
    assert c.repeatability.all_agree == 0.75
    assert c.repeatability.var_floor is None  # four anchors are not enough to replace the floor
    assert c.human_alpha is not None and 0.9 < c.human_alpha < 1.0
    assert c.passed is True  # |bias| 0.5 is not above 0.5; κ is high

"""What the drift-rule simulations share: a simulated dimension's item ids, the judge fingerprint of a
simulated ruler, and measurements built from score lists as the judge engine would aggregate them.

Imported by ``aa_simulation.py``, ``noise_model_sim.py`` and ``adaptive_sim.py`` (run as ``python
benchmarks/<script>.py``, which puts this folder on ``sys.path``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_aimeasure.measure.models import Fingerprint, Measurement, Sample
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, item_stats

DIMENSION = "quality"

FINGERPRINT = Fingerprint(
    provider="simulated",
    model="noise",
    temperature=0.0,
    prompt_hash="p",
    rubric_hash="r",
    tool_mode="scripted",
    plugin_major=0,
)
"""One ruler for every simulated run: the runs stay comparable (N is not part of the ruler)."""


def item_id(i: int) -> str:
    """The stable id of the simulated suite's ``i``-th item (as ``compare()`` pairs items by it)."""
    return f"{DIMENSION}::tests/test_sim.py::test_item[{i}]"


def measurements(
    run: Mapping[str, Sequence[int]],
    *,
    tolerance: float,
    floor: float = 1.0,
    var_floor: float = VAR_FLOOR_DEFAULT,
) -> list[Measurement]:
    """One measurement per item of ``run`` (item id → its samples' scores)."""
    out = []
    for key, scores in run.items():
        st = item_stats(scores, var_floor=var_floor)
        out.append(
            Measurement(
                item_id=key,
                nodeid=key.split("::", 1)[1],
                dimension=DIMENSION,
                floor=floor,
                tolerance=tolerance,
                samples=[
                    Sample(index=k, dimension=DIMENSION, score=s, rationale="r") for k, s in enumerate(scores)
                ],
                mean=st.mean,
                sd=st.sd,
                n=st.n,
                ci_low=st.ci_low,
                ci_high=st.ci_high,
                fingerprint=FINGERPRINT,
            )
        )
    return out

"""The a-priori error model bounds every error measured in the shipped H200 table."""

from __future__ import annotations

import math
from pathlib import Path

import yaml

from fftmatvec.tuning.select import model_error


def test_model_bounds_the_shipped_measurements():
    table = yaml.safe_load((Path(__file__).parents[1] / "tuning" / "sm_90.yaml").read_text())
    worst = 0.0
    for e in table["entries"]:
        n = e["nd"] if e["op"] == "rmatvec" else e["nm"]
        for p in e["points"]:
            if p["precision"] != "ddddd":
                worst = max(worst, p["error_max"] / model_error(p["precision"], n))
    assert 0.5 < worst <= 1.0, worst  # an upper bound, and not a loose one
    assert math.isfinite(worst)

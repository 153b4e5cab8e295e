"""The demo's uncertainty step: data-space posterior against CG on the demo's own problem."""

import json

import numpy as np

from fftmatvec.demo import run_demo


def test_demo_posterior_against_cg(tmp_path):
    s = run_demo("tiny", "cpu", "ddddd", tmp_path, quiet=True)
    p = s["posterior"]
    assert p["n_data"] == s["nd"] * s["nt"]
    # the data-space MAP is the float64 CG MAP, and the mixed-precision one, within 1e-8
    assert p["cg_converged"] and p["cg_mixed_converged"]
    assert p["map_rel_diff_cg"] < 1e-8 and p["map_rel_diff_cg_mixed"] < 1e-8
    # mixed precision read fewer Khat bytes than float64 CG, with products in both precisions
    assert "ddddd" in p["cg_mixed_products"] and len(p["cg_mixed_products"]) == 2
    assert 0 < p["cg_mixed_khat_bytes"] < p["cg_khat_bytes"]
    assert p["mean_seconds"] > 0 and p["cg_seconds"] > 0
    # posterior std at the figure's three times: positive, below the prior's, and most of the
    # true source within two of them
    assert len(p["std_times"]) == 3 and all(0 < v < 1 for v in p["std_mean_at_times"])
    assert p["truth_within_2std_fraction"] > 0.5
    assert json.loads((tmp_path / "summary.json").read_text())["posterior"] == json.loads(
        json.dumps(p))
    assert np.isfinite(p["factor_seconds"])

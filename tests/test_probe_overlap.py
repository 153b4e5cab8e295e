"""The chunking of scripts/probe_overlap.py (CPU only)."""

import pytest
from conftest import load_script


@pytest.mark.parametrize("nm,fractions,cuts", [
    (5000, [0.5, 0.5], [0, 2500, 5000]),
    (5000, [0.3, 0.7], [0, 1500, 5000]),
    (5000, [0.25, 0.25, 0.5], [0, 1250, 2500, 5000]),
    (3, [0.1, 0.1, 0.8], [0, 1, 2, 3]),  # every chunk keeps a row
    (2, [0.9, 0.1], [0, 1, 2]),
])
def test_chunk_cuts(nm, fractions, cuts):
    probe = load_script("probe_overlap")
    got = probe.chunk_cuts(nm, fractions)
    assert got == cuts
    assert all(b > a for a, b in zip(got, got[1:]))


@pytest.mark.parametrize("nm,fractions,match", [
    (10, [0.5, 0.6], "sum to 1"),
    (10, [1.5, -0.5], "positive"),
    (10, [], "positive"),
    (2, [0.25, 0.25, 0.5], "3 chunks of 2 rows"),
])
def test_chunk_cuts_rejects(nm, fractions, match):
    probe = load_script("probe_overlap")
    with pytest.raises(ValueError, match=match):
        probe.chunk_cuts(nm, fractions)

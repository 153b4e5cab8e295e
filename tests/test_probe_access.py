"""The access-pattern probe of scripts/probe_khat_access.py (CPU only: its layout and source)."""

import numpy as np
import pytest
from conftest import load_script


@pytest.mark.parametrize("nd,nm,nfp,ft,pair", [(5, 3, 16, 8, 2), (4, 2, 24, 8, 1), (3, 4, 8, 16, 2)])
def test_blocked_layout(nd, nm, nfp, ft, pair):
    """Khat (nd, nm, nfp) as [d / pair][f / ft][m][d % pair][f % ft], zero-padded: every element
    where the probe's blocked kernel reads it, and zeros past the ends."""
    probe = load_script("probe_khat_access")
    rng = np.random.default_rng(1)
    data = rng.integers(1, 2**31, size=(nd, nm, nfp), dtype=np.uint32)
    out, nft = probe.blocked(np, data.reshape(-1), nd, nm, nfp, ft, pair)
    assert nft == -(-nfp // ft)
    assert out.shape == (-(-nd // pair), nft, nm, pair, ft) and out.flags.c_contiguous
    d, m, f = np.meshgrid(np.arange(nd), np.arange(nm), np.arange(nfp), indexing="ij")
    np.testing.assert_array_equal(out[d // pair, f // ft, m, d % pair, f % ft], data)
    assert int(out.astype(np.int64).sum()) == int(data.astype(np.int64).sum())  # the rest is 0


def test_probe_source():
    """One entry point per (family, tile, mode), each tile within a block's shared memory."""
    probe = load_script("probe_khat_access")
    src = probe.source()
    for fam, tiles in probe.FAMILIES.items():
        for tile in tiles:
            assert probe.smem_bytes(fam, tile) <= 227 * 1024, (fam, tile)
            for mode in probe.MODES[fam]:
                assert src.count(f" {probe.entry(fam, tile, mode)}(") == 1
    assert all(tile[2] in (1, 2) for tile in probe.FAMILIES["pl"])


@pytest.mark.parametrize("freq_major", [False, True])
@pytest.mark.parametrize("shape", [(10, 37, 64), (3, 8, 1024)])
def test_run_probe_reads_every_word_once(shape, freq_major):
    """scripts/probe_khat_runs.py: every launch reads each word of the array exactly once (rows
    past the end and ragged splits included), so that its rate counts the bytes it reads."""
    probe = load_script("probe_khat_runs")
    launches = probe.cases(shape, [16, 32, 64, 256, 4096], [1, 4, 16])
    assert {c[0] for c in launches} == ({16, 32, 64, 256} if shape[2] == 64 else {16, 32, 64, 256, 4096})
    for run, R, F, n_split, chunk, grid in launches:
        assert R * F == 1024 and n_split == grid[1]
        hits = probe.words_read(shape, R, F, chunk, grid, freq_major)
        assert (hits == 1).all(), (run, n_split)

"""fftmatvec.inverse on a DistributedBlockToeplitz, under mpiexec on 2 and 4 CPU ranks.

The checks live in tests/mpi/check_inverse.py (dense float64 oracle on every grid of the
ranks); each run has a timeout, so that a hang fails the test.
"""

import pytest
from test_distributed import _run


@pytest.mark.mpi
@pytest.mark.parametrize("n", [2, 4])
def test_inverse_on_a_grid_against_dense(n):
    res = _run(n, "check_inverse.py")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    assert res.stdout.split()[:2] == ["OK", str(n)], res.stdout

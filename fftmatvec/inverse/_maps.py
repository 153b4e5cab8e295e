"""The operator as the inverse-problem code sees it: ``F`` and ``F^T`` on global batches.

The posterior and the solvers work on whole vectors ``(k, Nm, Nt)`` and ``(k, Nd, Nt)`` and
count the ``Khat`` bytes their products read. :class:`Maps` wraps a
:class:`~fftmatvec.BlockToeplitz` directly; for a
:class:`~fftmatvec.DistributedBlockToeplitz` every rank holds the global batch, hands the
operator its slices (``distribute``) and gathers the result (``collect``), so that the
algorithms above run unchanged, and redundantly, on every rank.

Replicas: on a grid of several replica groups (``ProcessGrid(comm, replicas=R)``) the operator
itself splits every batch across the groups (``distribute`` gives each group its share of the
right-hand sides, ``collect`` joins them), so the batched products that form the data-space
Hessian run on all the groups at once.
"""

from __future__ import annotations

from .._errors import FFTMatvecTypeError, FFTMatvecValueError
from ..distributed.layout import block_partition
from ..operator import BlockToeplitz
from ..precision import PrecisionConfig

__all__ = ["Maps"]


def _is_distributed(F) -> bool:
    from ..distributed import DistributedBlockToeplitz

    return isinstance(F, DistributedBlockToeplitz)


class Maps:
    """``F`` and ``F^T`` on global batches, with a count of the ``Khat`` bytes read.

    Parameters
    ----------
    F : BlockToeplitz or DistributedBlockToeplitz
    """

    def __init__(self, F):
        self.distributed = _is_distributed(F)
        if not (self.distributed or isinstance(F, BlockToeplitz)):
            raise FFTMatvecTypeError(
                f"F must be a BlockToeplitz or a DistributedBlockToeplitz, got {type(F).__name__}")
        self.F = F
        self.xp = F.xp
        self.nd, self.nm, self.nt = F.nd, F.nm, F.nt
        self.precision = PrecisionConfig(F.precision).letters
        self.comm = F.grid.base_comm if self.distributed else None
        nbytes = F.khat_nbytes
        if self.distributed:  # every rank's Khat together: what one product reads
            nbytes = self.comm.allreduce(nbytes)
        self.khat_nbytes = int(nbytes)
        self.bytes_read = 0  # Khat bytes read by the products of this object so far

    def with_precision(self, precision) -> "Maps":
        """The same operator in another precision (sharing ``Khat`` where it can)."""
        if PrecisionConfig(precision).letters == self.precision:
            return self
        if self.distributed:
            raise FFTMatvecValueError(
                f"a DistributedBlockToeplitz runs in the precision it was built in "
                f"({self.precision!r}); got precision {str(precision)!r}: build the operator in "
                f"that precision, or pass precision=None")
        return Maps(self.F.with_precision(precision))

    def agree(self, what: str, fn):
        """``fn()``; on a grid a failure on any rank raises
        :class:`~fftmatvec.FFTMatvecDistributedError` on every rank (after ``fn`` ran on all),
        so that no rank waits in a collective for one that gave up."""
        if not self.distributed:
            return fn()
        from ..distributed.comm import sync

        exc, out = None, None
        try:
            out = fn()
        except Exception as e:  # raised on every rank at the sync point below
            exc = e
        sync(self.comm, what, exc, f"(rank {self.comm.rank})")
        return out

    # ---- products on global batches -------------------------------------------------------
    def forward(self, X):
        """``F X`` for ``X`` ``(k, Nm, Nt)``: ``(k, Nd, Nt)``."""
        self.bytes_read += self.khat_nbytes
        F = self.F
        if not self.distributed:
            return F.matmat(X)
        return F.collect(F.matmat(F.distribute(X, "param")), "obs")

    def adjoint(self, Y):
        """``F^T Y`` for ``Y`` ``(k, Nd, Nt)``: ``(k, Nm, Nt)``."""
        self.bytes_read += self.khat_nbytes
        F = self.F
        if not self.distributed:
            return F.rmatmat(Y)
        return F.collect(F.rmatmat(F.distribute(Y, "obs")), "param")

    # ---- the blocks of the data-space Hessian ----------------------------------------------
    def sensor_chunks(self, chunks: int) -> list[tuple[int, int]]:
        """Sensor ranges of the Hessian's block columns (at most ``chunks``, none empty). On one
        process the lower triangle of blocks is computed from per-chunk operators; on a grid
        every block column is a product of the whole operator, and the blocks are the units
        that replica groups share."""
        n = max(1, min(chunks, self.nd))
        return [(a, b) for a, b in block_partition(self.nd, n) if b > a]

    def chunk_operators(self, chunks, precision) -> list:
        """One operator per sensor chunk, ``K[a:b]`` in ``precision`` (one process), or
        ``None`` (a grid: the whole operator serves every block)."""
        if self.distributed:
            return None
        F = self.F
        kernel = F._kernel  # the kernel the operator was built from (fingerprinted there)
        return [BlockToeplitz(kernel[a:b], precision, fft_len=F.fft_len) for a, b in chunks]

    @staticmethod
    def forward_chunks(subs, X) -> list:
        """``[F_I X for F_I in subs]`` (chunk operators of one kernel, one precision).

        In ``ddddd`` the five stages are composed from the operators' stage-level building
        blocks so that ``X``'s padding and FFT (the parameter side, ``k Nm`` series: the larger
        part of a product's work when ``Nm >> Nd``) run once for all chunks; each chunk then
        runs only its stage 3 (its rows of ``Khat``), inverse FFT and unpadding. Precisions
        with a reduced stage scale inputs per operator, so there each chunk runs a product."""
        lead = subs[0]
        if lead.precision.letters != "ddddd":
            return [sub.matmat(X) for sub in subs]
        xhat = lead.fft(lead.broadcast_and_pad(X))
        return [sub.unpad_and_reduce(sub.ifft(sub.sbgemv(xhat))) for sub in subs]

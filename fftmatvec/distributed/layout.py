"""Block partitions of the kernel and of both vectors over a ``pr x pc`` process grid.

Pure functions of the sizes and the grid shape: no communicator, unit-tested in-process.

Rank ``(r, c)`` owns the kernel block ``K[rows(r), cols(c), :]``. The parameter slice
``cols(c)`` of process column ``c`` is split further over the ``pr`` ranks of that column, and
the observation slice ``rows(r)`` of process row ``r`` over the ``pc`` ranks of that row, so
each entry of either vector lives on exactly one rank::

    param_range(r, c) = cols(c)[split(len(cols(c)), pr)[r]]
    obs_range(r, c)   = rows(r)[split(len(rows(r)), pc)[c]]

Every partition follows ``q, s = divmod(n, parts)``: the first ``s`` parts get ``q + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import FFTMatvecValueError

__all__ = ["block_partition", "chunk_pieces", "Layout"]


def block_partition(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``(start, stop)`` ranges covering ``range(n)``, the first
    ``n % parts`` one longer than the rest (some empty when ``n < parts``)."""
    if parts < 1:
        raise FFTMatvecValueError(f"parts must be >= 1, got {parts}")
    if n < 0:
        raise FFTMatvecValueError(f"n must be >= 0, got {n}")
    q, s = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + q + (1 if i < s else 0)
        out.append((start, stop))
        start = stop
    return out


def chunk_pieces(counts, chunks: int, minimum: int = 1) -> list[list[tuple[int, int]]]:
    """Cut every rank's slice into the same number of pieces; chunk ``j`` is the ``j``-th
    piece of each slice, so that a collective over the ranks' slices can run chunk by chunk.

    Parameters
    ----------
    counts : sequence of int
        Rows of each rank's slice, in the communicator's rank order.
    chunks : int
        Most chunks.
    minimum : int
        Fewest rows of a chunk on average (summed over the ranks): at most
        ``sum(counts) // minimum`` chunks, and one at least.

    Returns
    -------
    list of lists of (start, stop)
        ``out[j][q]``: the rows of rank ``q``'s slice in chunk ``j``, counted from the start of
        that slice (``block_partition(counts[q], n)[j]`` for ``n`` chunks: a rank's pieces differ
        by one row at most, and a rank with fewer rows than chunks has empty ones). A chunk
        empty on every rank is left out (but one chunk is always returned).
    """
    if chunks < 1 or minimum < 1:
        raise FFTMatvecValueError(f"chunks and minimum must be >= 1, got {chunks}, {minimum}")
    counts = [int(n) for n in counts]
    if any(n < 0 for n in counts):
        raise FFTMatvecValueError(f"counts must be >= 0, got {counts}")
    n = max(1, min(int(chunks), sum(counts) // int(minimum)))
    parts = [block_partition(m, n) for m in counts]
    out = [[p[j] for p in parts] for j in range(n)]
    kept = [pieces for pieces in out if any(b > a for a, b in pieces)]
    return kept or out[:1]


def check_fit(nd: int, nm: int, pr: int, pc: int) -> None:
    """Raise when a ``pr x pc`` grid has more process rows than sensors or more process
    columns than parameters (a rank would own an empty kernel block)."""
    bad = []
    if pr > nd:
        bad.append(f"{pr} process rows need at least {pr} sensors, Nd={nd}")
    if pc > nm:
        bad.append(f"{pc} process columns need at least {pc} parameters, Nm={nm}")
    if bad:
        raise FFTMatvecValueError(
            f"the {pr}x{pc} process grid does not fit the kernel (Nd={nd}, Nm={nm}): "
            + "; ".join(bad) + " (choose a grid with rows <= Nd and cols <= Nm)"
        )


@dataclass(frozen=True)
class Layout:
    """Who owns what, for ``nd`` sensors and ``nm`` parameters on a ``pr x pc`` grid."""

    nd: int
    nm: int
    pr: int
    pc: int

    def __post_init__(self):
        check_fit(self.nd, self.nm, self.pr, self.pc)

    # ---- the kernel block ------------------------------------------------------------------
    def rows(self, r: int) -> tuple[int, int]:
        """Sensor range ``(start, stop)`` of process row ``r``."""
        return block_partition(self.nd, self.pr)[r]

    def cols(self, c: int) -> tuple[int, int]:
        """Parameter range ``(start, stop)`` of process column ``c``."""
        return block_partition(self.nm, self.pc)[c]

    # ---- the vectors -----------------------------------------------------------------------
    def param_ranges_in_col(self, c: int) -> list[tuple[int, int]]:
        """Global parameter ranges owned by ranks ``(0, c) .. (pr-1, c)``, in order."""
        a, b = self.cols(c)
        return [(a + s, a + e) for s, e in block_partition(b - a, self.pr)]

    def obs_ranges_in_row(self, r: int) -> list[tuple[int, int]]:
        """Global observation ranges owned by ranks ``(r, 0) .. (r, pc-1)``, in order."""
        a, b = self.rows(r)
        return [(a + s, a + e) for s, e in block_partition(b - a, self.pc)]

    def param_range(self, r: int, c: int) -> tuple[int, int]:
        return self.param_ranges_in_col(c)[r]

    def obs_range(self, r: int, c: int) -> tuple[int, int]:
        return self.obs_ranges_in_row(r)[c]

    def owned(self, space: str, r: int, c: int) -> tuple[int, int]:
        """Global ``(start, stop)`` of the slice rank ``(r, c)`` owns in ``space``."""
        if space == "param":
            return self.param_range(r, c)
        if space == "obs":
            return self.obs_range(r, c)
        raise FFTMatvecValueError(f"space must be 'param' or 'obs', got {space!r}")

    def size(self, space: str) -> int:
        if space == "param":
            return self.nm
        if space == "obs":
            return self.nd
        raise FFTMatvecValueError(f"space must be 'param' or 'obs', got {space!r}")

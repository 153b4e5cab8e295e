"""The Pareto front of time against error."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["pareto_front"]


def pareto_front(points: Sequence[Mapping[str, float]], time_key: str = "time",
                 error_key: str = "error_max") -> list[int]:
    """Indices of the points no other point dominates, fastest first.

    A point dominates another when it is no slower and no less accurate, and strictly better in
    one of the two. Ties (the same time and error) keep the first.

    Parameters
    ----------
    points : sequence of mappings
        Each with ``time_key`` and ``error_key`` numbers.

    Returns
    -------
    list of int
        Indices into ``points``, by increasing time (so by decreasing error).
    """
    order = sorted(range(len(points)), key=lambda i: (points[i][time_key], points[i][error_key], i))
    front, best = [], float("inf")
    for i in order:
        e = points[i][error_key]
        if e < best:
            front.append(i)
            best = e
    return front

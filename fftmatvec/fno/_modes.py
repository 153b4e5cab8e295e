"""Mode bookkeeping of the FNO spectral convolution (neuraloperator's dense-weight convention).

``n_modes`` counts both frequency signs on every spatial axis but the last; on the last axis
(a real FFT) ``n_modes[-1] // 2 + 1`` non-negative frequencies are kept. Along a non-last axis
the weight index ``j`` holds frequency ``j - m // 2`` (the fftshifted, centred order).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from .._errors import FFTMatvecTypeError, FFTMatvecValueError


def kept_modes(n_modes: int | Sequence[int]) -> tuple[int, ...]:
    """The weight's mode extents for ``n_modes`` given as neuraloperator takes them."""
    if isinstance(n_modes, (int, np.integer)):
        n_modes = (int(n_modes),)
    try:  # integers only: 6.5 modes is a mistake, not 6
        modes = [operator.index(m) for m in n_modes]
    except TypeError:
        raise FFTMatvecTypeError(
            f"n_modes: expected an int or a sequence of ints, got {n_modes!r}"
        ) from None
    if not 1 <= len(modes) <= 3 or min(modes) < 1:
        raise FFTMatvecValueError(f"n_modes: expected 1 to 3 positive ints, got {tuple(modes)}")
    modes[-1] = modes[-1] // 2 + 1
    return tuple(modes)


def check_shapes(x_shape, weight_shape, modes) -> None:
    """Raise unless ``x`` is ``(B, Cin, *spatial)`` and the weight ``(Cin, Cout, *modes)``."""
    d = len(modes)
    if len(x_shape) != d + 2:
        raise FFTMatvecValueError(
            f"x: expected {d + 2} dimensions (B, Cin, *spatial), got shape {tuple(x_shape)}"
        )
    if tuple(weight_shape[2:]) != tuple(modes) or len(weight_shape) != d + 2:
        raise FFTMatvecValueError(
            f"weight: expected shape (Cin, Cout, {', '.join(map(str, modes))}), got "
            f"{tuple(weight_shape)}"
        )
    if weight_shape[0] != x_shape[1]:
        raise FFTMatvecValueError(
            f"weight: expected Cin = {x_shape[1]} (x's channels), got {weight_shape[0]}"
        )
    spatial = x_shape[2:]
    for a, (n, m) in enumerate(zip(spatial[:-1], modes[:-1])):
        if m > n:
            raise FFTMatvecValueError(
                f"n_modes: axis {a} keeps {m} modes, more than its size {n}"
            )
    if modes[-1] > spatial[-1] // 2 + 1:
        raise FFTMatvecValueError(
            f"n_modes: the last axis keeps {modes[-1]} modes, more than its "
            f"{spatial[-1] // 2 + 1} non-negative frequencies"
        )


def check_bias(shape, dtype, cout: int) -> None:
    """Raise unless a bias of ``shape`` and ``dtype`` holds ``cout`` real values."""
    if int(np.prod(shape)) != cout:
        raise FFTMatvecValueError(
            f"bias: expected Cout = {cout} values (any shape of that size), got shape "
            f"{tuple(shape)}"
        )
    if "complex" in str(dtype):
        raise FFTMatvecTypeError(f"bias: expected real values, got {dtype}")


def mode_indices(spatial, modes, output: bool = False) -> list[np.ndarray]:
    """Per axis, the (unshifted) FFT bins of the kept modes in the weight's order.

    With ``output``, the bins the product is written to: neuraloperator applies ``fftshift``
    (not its inverse) before the inverse transform, so on a non-last axis of odd size ``n``
    the output of frequency ``k`` lands on bin ``k - 1`` (``k + 2 (n // 2)`` modulo ``n``).
    """
    idx = [(np.arange(m) - m // 2 + (2 * (n // 2) if output else 0)) % n
           for n, m in zip(spatial[:-1], modes[:-1])]
    idx.append(np.arange(modes[-1]))
    return idx


def hermitian_weights(n_last: int, m_last: int) -> np.ndarray:
    """``c_k``: 1 on the DC (and Nyquist, ``n_last`` even) column of the last axis, else 2."""
    c = np.full(m_last, 2.0)
    c[0] = 1.0
    if n_last % 2 == 0 and m_last == n_last // 2 + 1:
        c[-1] = 1.0
    return c

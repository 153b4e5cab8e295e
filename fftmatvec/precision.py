"""Per-stage precision configurations.

A configuration is a five-letter string, one letter per stage of the FFT matvec
(``broadcast_and_pad``, ``fft``, ``sbgemv``, ``ifft``, ``unpad_and_reduce``), compatible with the
``-prec`` option of the public FFTMatvec code:

* ``d``: float64 / complex128;
* ``s``: float32 / complex64;
* ``h`` (stage 3 only): the Fourier-space kernel ``Khat`` stored as complex float16 with a
  float32 scale per block, products accumulated in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._errors import FFTMatvecTypeError, FFTMatvecValueError

__all__ = ["PrecisionConfig", "STAGES"]

STAGES = ("broadcast_and_pad", "fft", "sbgemv", "ifft", "unpad_and_reduce")

_REAL = {"d": np.dtype(np.float64), "s": np.dtype(np.float32)}
_COMPLEX = {"d": np.dtype(np.complex128), "s": np.dtype(np.complex64)}


@dataclass(frozen=True)
class PrecisionConfig:
    """A validated precision configuration.

    Parameters
    ----------
    spec : str or PrecisionConfig
        Five letters from ``{d, s}`` (``h`` allowed in position 3), case-insensitive.

    Attributes
    ----------
    letters : str
        The normalised (lower-case) string.
    """

    letters: str

    def __init__(self, spec: str | PrecisionConfig = "ddddd") -> None:
        if isinstance(spec, PrecisionConfig):
            object.__setattr__(self, "letters", spec.letters)
            return
        if not isinstance(spec, str):
            raise FFTMatvecTypeError(
                f"precision must be a 5-letter string such as 'dssdd', got {type(spec).__name__}"
            )
        letters = spec.strip().lower()
        if len(letters) != 5:
            raise FFTMatvecValueError(
                f"precision must have exactly 5 letters (one per stage: {', '.join(STAGES)}), "
                f"got {spec!r} with {len(letters)}"
            )
        for pos, (letter, stage) in enumerate(zip(letters, STAGES)):
            allowed = "dsh" if pos == 2 else "ds"
            if letter not in allowed:
                raise FFTMatvecValueError(
                    f"precision {spec!r}: letter {pos + 1} ({stage}) must be one of "
                    f"{', '.join(repr(a) for a in allowed)}, got {letter!r}"
                )
        object.__setattr__(self, "letters", letters)

    # ---- per-stage dtypes -------------------------------------------------------------
    @property
    def pad_dtype(self) -> np.dtype:
        """Real dtype of the zero-padded time series (stage 1's output)."""
        return self.real_dtype("broadcast_and_pad")

    @property
    def sbgemv_dtype(self) -> np.dtype:
        """Complex dtype in which stage 3 computes (``h`` computes in complex64)."""
        return self.complex_dtype("sbgemv")

    @property
    def reduce_dtype(self) -> np.dtype:
        """Real dtype of the unpadded output and of any distributed reduction (stage 5)."""
        return self.real_dtype("unpad_and_reduce")

    @property
    def half(self) -> bool:
        return self.letters[2] == "h"

    def stage_letter(self, stage: str) -> str:
        return self.letters[STAGES.index(stage)]

    def real_dtype(self, stage: str) -> np.dtype:
        """Real dtype a stage computes in (``h`` computes in float32)."""
        letter = self.stage_letter(stage)
        return _REAL["s" if letter == "h" else letter]

    def complex_dtype(self, stage: str) -> np.dtype:
        """Complex dtype a stage computes in (``h`` computes in complex64)."""
        letter = self.stage_letter(stage)
        return _COMPLEX["s" if letter == "h" else letter]

    @classmethod
    def all_strings(cls, letters: str = "ds") -> list[str]:
        """Every configuration over ``letters`` (``h`` only ever in position 3)."""
        out = [""]
        for pos in range(5):
            allowed = [c for c in letters if c != "h" or pos == 2]
            out = [p + c for p in out for c in allowed]
        return out

    def __str__(self) -> str:
        return self.letters

    def __repr__(self) -> str:
        return f"PrecisionConfig({self.letters!r})"

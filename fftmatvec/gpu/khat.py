"""``Khat`` stored for the package's kernels (:class:`KhatStore`): its arrays, its layout and
the strides the kernels address it with.

``Khat`` is stored in blocks of frequencies, ``(blocks, Nd, Nm, B)``, as :func:`khat_layout`
says: the stage-3 kernels read it coalesced in both directions, and read and write the FFT
stages' layouts ``(k, n, Nf)`` directly, with no transpose pass. What is stored is
``Khat / L``: the normalisation of the inverse FFT is folded in. With float16 storage each
element is a 32-bit word of two float16 halves, and each row a float32 scale per frequency.
"""

from __future__ import annotations

import numpy as np

from .._matmul import quantize_half
from .rules import KHAT_BLOCK, KHAT_MAX_WASTE, PAD, _ELEM_BYTES, _ONE_BLOCK_SHIFT

__all__ = ["KhatStore", "khat_layout"]


def khat_layout(store: str, nfp: int) -> tuple[int, int, int]:
    """(frequencies per block, blocks, khat_foff's shift) of a stored ``Khat`` with ``nfp``
    padded frequencies (:data:`KHAT_BLOCK`)."""
    block = KHAT_BLOCK.get(store)
    if block is not None and (block <= 0 or block & (block - 1) or block % (16 // _ELEM_BYTES[store])):
        raise ValueError(f"KHAT_BLOCK[{store!r}] = {block}: a block of Khat's frequencies must "
                         f"be a power of two of whole 16-byte chunks ({16 // _ELEM_BYTES[store]} "
                         f"frequencies)")
    blocks = 1 if block is None else -(-nfp // block)
    if blocks == 1 or blocks * block > (1 + KHAT_MAX_WASTE) * nfp:
        return nfp, 1, _ONE_BLOCK_SHIFT  # one block: (Nd, Nm, Nfp)
    return block, blocks, block.bit_length() - 1


class KhatStore:
    """``Khat / L`` of ``nd`` sensors and ``nm`` parameters over ``nf`` frequencies, stored as
    ``store`` (``c128``, ``c64``, ``c32h``) on the array module ``xp`` (CuPy; NumPy in host
    tests). ``data``: ``(blocks, Nd, Nm, B)``; ``scale``: the float16 rows' scales
    ``(Nd, Nfp)``, else None; ``nfp``: the frequencies padded to the kernels' multiple
    (:data:`PAD`); ``whole``: the rows and columns of the array the strides address (a block's
    are its whole array's). :meth:`zeros` makes one to fill (:meth:`store_rows`), :meth:`block`
    a view of a block of it."""

    def __init__(self, xp, store: str, nd: int, nm: int, nf: int, fft_len: int, data, scale,
                 whole: tuple | None = None):
        self.xp, self.store = xp, store
        self.nd, self.nm, self.nf, self.fft_len = nd, nm, nf, fft_len
        self.nfp = -(-nf // PAD[store]) * PAD[store]
        self.block_freqs, self.blocks, self.shift = khat_layout(store, self.nfp)
        self.data, self.scale = data, scale
        self._whole = (nd, nm) if whole is None else tuple(whole)

    @classmethod
    def zeros(cls, xp, store: str, nd: int, nm: int, nf: int, fft_len: int,
              dtype) -> "KhatStore":
        """A zeroed ``Khat`` of elements of ``dtype`` (``uint32`` words for ``c32h``)."""
        nfp = -(-nf // PAD[store]) * PAD[store]
        block, blocks, _ = khat_layout(store, nfp)
        data = xp.zeros((blocks, nd, nm, block), dtype=dtype)
        scale = xp.zeros((nd, nfp), dtype=np.float32) if store == "c32h" else None
        return cls(xp, store, nd, nm, nf, fft_len, data, scale)

    @property
    def compute(self) -> np.dtype:
        """The complex dtype stage 3 computes in on this storage: complex128 for ``c128``,
        complex64 for ``c64`` and ``c32h``."""
        return np.dtype(np.complex128 if self.store == "c128" else np.complex64)

    def scales_input(self, adjoint: bool) -> bool:
        """Whether a product's stage-3 input must carry the float16 row scales: adjoints with
        ``c32h`` storage (the kernels of the adjoint read no scales)."""
        return bool(adjoint) and self.scale is not None

    @property
    def nbytes(self) -> int:
        """Bytes of ``Khat`` as stored (without the few padding frequencies)."""
        return int(self.data.itemsize * self.nd * self.nm * self.nf
                   + (0 if self.scale is None else 4 * self.nd * self.nf))

    def store_rows(self, i0: int, khat_rows) -> None:
        """Store rows ``i0:i0+c`` of ``Khat`` given as ``(c, Nm, Nf)`` complex128, divided by
        ``L`` (stage 4 then runs the raw, unnormalised complex-to-real transform)."""
        xp = self.xp
        i1 = i0 + khat_rows.shape[0]
        khat_rows = khat_rows * (1.0 / self.fft_len)
        nf = self.nf
        if self.scale is None:
            words = khat_rows
        else:
            q, s = quantize_half(xp, khat_rows, axis=1)  # q (c, Nm, Nf, 2) float16, s (c, Nf)
            bits = q.view(np.uint16).astype(np.uint32)
            words = bits[..., 0] | (bits[..., 1] << 16)
            self.scale[i0:i1, :nf] = s
        B = self.block_freqs
        for b in range(self.blocks):  # frequencies b B .. b B + B - 1 in block b
            f0, f1 = b * B, min(nf, (b + 1) * B)
            if f1 > f0:
                self.data[b, i0:i1, :, :f1 - f0] = words[..., f0:f1]

    def strides(self, adjoint: bool) -> tuple[int, int, int, int]:
        """(so, sr, shift, block stride) that address ``Khat`` for the kernels of one direction
        (hip_kernels/common.cuh: khat_foff): output rows are Nd forward, Nm adjoint; those of
        the whole array for a block."""
        B = self.block_freqs
        nd, nm = self._whole
        so, sr = (B, nm * B) if adjoint else (nm * B, B)
        return so, sr, self.shift, nd * nm * B

    def khat(self):
        """The stored ``Khat`` as ``(Nd, Nm, Nfp)`` (a copy; raw float16 words for ``h``)."""
        d = self.data.transpose(1, 2, 0, 3).reshape(self.nd, self.nm, -1)
        return self.xp.ascontiguousarray(d[:, :, :self.nfp])

    def block(self, i0: int, i1: int, j0: int, j1: int) -> "KhatStore":
        """The block ``Khat[i0:i1, j0:j1]`` read in place: its ``data`` and ``scale`` start at
        the block's first element, its shape is the block's, its strides the whole array's."""
        if not (0 <= i0 < i1 <= self.nd and 0 <= j0 < j1 <= self.nm):
            raise ValueError(f"a block of Khat within its ({self.nd}, {self.nm}) rows and "
                             f"columns, got rows {i0}:{i1}, columns {j0}:{j1}")
        return KhatStore(self.xp, self.store, i1 - i0, j1 - j0, self.nf, self.fft_len,
                         self.data[:, i0:i1, j0:j1],  # its pointer: the block's first element
                         None if self.scale is None else self.scale[i0:i1], self._whole)

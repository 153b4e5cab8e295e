"""The FNO layer's plan: which kernels its DFT chain runs (:func:`fno_chain` and the rules it
reads), from the layer's shape, the device and the plan keys ``fno_*`` (``FFTMATVEC_PLAN``, a
layer's FNO tuning table entry). The thresholds below are the rules; docs/benchmarks.md holds
the measurements behind them."""

from __future__ import annotations

import functools

import numpy as np

from .. import backend, kernels
from ..gpu.plan import mode as plan_mode
from ..gpu.plan import unavailable

# The forward transforms of the last axis (rows of L points to m bins) take the row FFT kernels
# by default where L m / (L + 2 m), the DFT GEMM's flops per byte over 4, is at least this:
# below it the GEMM is as fast.
FNO_ROWS_R2C_MIN = 16.0
# The inverse transforms (the synthesis and the adjoint of the analysis) take the row kernels by
# default where the kernels' warp form takes the axis by default (fftmatvec/fno/_rows.py:
# row_warp_auto: rows of 128 or 256 points); elsewhere their GEMMs are as fast.
FNO_ROWS_C2R_WARP = True
# Both transforms take the row kernels by default where their column form takes the axis by
# default (fftmatvec/fno/_rows.py: row_cols_auto: rows of 64 R points, 16 <= R <= 256, keeping
# at most 129 bins).
FNO_ROWS_COLS = True
# The last two axes as one kernel a plane (fftmatvec/fno/_rows.py: Plane), both ways, by default
# where the first of them keeps at least this fraction of its frequencies (the pass form: below
# it the chain's cheaper GEMMs are as fast); plan fno_plane=1 forces it.
FNO_PLANE_MIN_FRACTION = 0.25
# The same where the kernels' warp form takes the plane.
FNO_PLANE_WARP_MIN_FRACTION = 0.125
# The plane kernels' direct form (fftmatvec/fno/_rows.py: DirectPlane, the truncated DFTs of
# both axes as register-tiled sums, a block a plane) by default for the planes whose lengths the
# FFT forms cannot take (a prime factor past 5: 85 = 5 x 17), which otherwise run a GEMM an
# axis; where the FFT forms take the plane they are faster. Plan fno_direct=1 forces it where
# it takes the plane, fno_direct=0 keeps the GEMMs.
FNO_DIRECT = True
# The one-axis layers' split modes (fftmatvec/fno/_dft.py: SplitChain) by default also where the
# row kernels take the last axis (writing and reading the modes modes-major): off, the split
# ties or loses there. Plan fno_split=1 forces it; tune-fno times it per layer.
FNO_SPLIT_WITH_ROW_KERNELS = False
# The one-axis layers' paired modes (fftmatvec/fno/_dft.py: PairedChain) by default where the
# row kernels take all four transforms of the axis: the kernels write the modes modes-major in
# complex pairs and read them back, so the complex GEMM reads and writes them in place, without
# the two permutes of the interleaved chain. Plan fno_paired=0 keeps the other layouts.
FNO_PAIRED = True
# The two-axis layers' paired modes by default where the plane kernels take the plane (both
# ways, fno_plane), in place of the interleaved chain's two permutes around the complex GEMM.
# Plan fno_paired=0 keeps the planes' modes interleaved.
FNO_PAIRED_PLANE = True
# The paired modes' forward channel product (Y[m] = X[m] W[m]) on the package's kernel
# (fftmatvec/fno/_product.py, fno_modes_cgemm_f32_b<NB> in hip_kernels/fno.cuh) for batches of
# at most this many rows (both channel counts even); cuBLAS's batched complex GEMM above it.
FNO_PRODUCT_MAX_BATCH = 16
# A one-axis layer's forward without gradients as one kernel (fftmatvec/fno/_fused1d.py: the
# analysis, the channel product and the synthesis between one read of x and one write of y),
# where it takes the layer and its blocks (of at most 8 batch rows) fill at least
# FNO_FUSED_MIN_FILL of the waves of multiprocessors they take: the kernel's time is a wave's
# whatever its blocks, the chain's three launches take time in proportion to the batch.
FNO_FUSED = True
FNO_FUSED_MIN_FILL = 0.75
# The paired chains' bias added by the synthesis's end kernel (the row and plane kernels'
# inverse transforms) to the constant mode as it loads it, where the chain's middle would run a
# kernel of its own for it (fftmatvec/fno/_dft.py: PairedChain.end_bias); with it off the
# kernels are handed a null bias.
FNO_END_BIAS = True


def _fno_mode(key: str, tuned) -> str:
    """``"auto"``, ``"0"`` or ``"1"`` for the FNO plan ``key``: ``FFTMATVEC_PLAN``, else the
    layer's tuned plan ``tuned`` (pairs ``(key, value)`` of an FNO tuning table's entry,
    :mod:`fftmatvec.fno._tuning`), else ``"auto"``."""
    return plan_mode(_Tuned(dict(tuned)) if tuned else None, key)


class _Tuned:
    """The tuned plan of an FNO layer as :func:`fftmatvec.gpu.plan.mode` reads an engine's."""

    __slots__ = ("tuned",)

    def __init__(self, tuned):
        self.tuned = tuned


def fno_rows(n_last: int, m_last: int, dtype, device_id: int, tuned=()) -> frozenset:
    """Which transforms of the FNO layer's last axis (``n_last`` points, ``m_last`` bins kept)
    the DFT chain (:mod:`fftmatvec.fno._dft`) runs on the row FFT kernels
    (:mod:`fftmatvec.fno._rows`) instead of GEMMs with the DFT matrices: a subset of
    ``{"r2c", "c2r"}`` (the forward transforms: the analysis and the adjoint of the synthesis;
    the inverse ones: the synthesis and the adjoint of the analysis). By default
    :func:`fno_rows_auto` where the kernels take the axis (float32 on a GPU, a 5-smooth complex
    length that fits a block; the inverse ones not where plan ``fno_warp=0`` keeps the kernels
    in their pass form, slower than the GEMMs there); plan key ``fno_rows``: ``0`` none, ``1``
    both, an error where the kernels cannot; ``tuned``: the layer's tuned plan
    (:func:`_fno_mode`)."""
    mode = _fno_mode("fno_rows", tuned)
    if mode == "0":
        return frozenset()
    warp = _fno_mode("fno_warp", tuned) != "0"
    return _fno_rows(int(n_last), int(m_last), np.dtype(dtype).str, int(device_id), mode, warp)


def fno_rows_auto(n_last: int, m_last: int, smem_per_block: int = 48 * 1024,
                  warp: bool = True) -> frozenset:
    """The transforms of :func:`fno_rows` by default: the forward ones where the GEMM's flops
    per byte pass :data:`FNO_ROWS_R2C_MIN`; the inverse ones where their
    warp form takes the axis by default (:func:`fftmatvec.fno._rows.row_warp_auto`, a block's
    ``smem_per_block`` bytes of shared memory fitting, ``warp``: the kernels not held to their
    pass form by plan ``fno_warp=0``): :data:`FNO_ROWS_C2R_WARP`; both
    where their column form takes the axis by default (:func:`fftmatvec.fno._rows.row_cols_auto`,
    fitting, ``warp``): :data:`FNO_ROWS_COLS`."""
    from . import _rows

    dense = n_last * m_last / (n_last + 2 * m_last)
    out = {"r2c"} if dense >= FNO_ROWS_R2C_MIN else set()
    if (FNO_ROWS_C2R_WARP and warp and _rows.row_warp_auto("c2r", n_last, m_last)
            and _rows.row_warp_supported(n_last, m_last, smem_per_block)):
        out.add("c2r")
    if (FNO_ROWS_COLS and warp and _rows.row_cols_auto(n_last, m_last)
            and _rows.row_cols_supported(n_last, m_last, smem_per_block)):
        out |= {"r2c", "c2r"}
    return frozenset(out)


def _fno_kernels_why(dtype) -> str | None:
    """Why the FNO layer's FFT kernels cannot run a layer computing in ``dtype`` (None where
    they can): they run in float32, launched through CuPy."""
    if np.dtype(dtype) != np.float32:
        return f"they run in float32, the layer computes in {np.dtype(dtype)}"
    if not kernels.available():
        return "no GPU is present to CuPy (the kernels launch through it)"
    return None


def _block_smem(device_id: int) -> int:
    """The bytes of shared memory one block may take on device ``device_id``."""
    with backend.cupy.cuda.Device(device_id):
        return backend.shared_memory_limits()[1]


@functools.lru_cache(maxsize=256)
def _fno_rows(n_last: int, m_last: int, dtype: str, device_id: int, mode: str,
              warp: bool = True) -> frozenset:
    """:func:`fno_rows` for a ``mode`` of ``"auto"`` or ``"1"``, once per layer shape (on the
    path of every call)."""
    why = _fno_rows_why(n_last, m_last, dtype, device_id)
    if unavailable("fno_rows", mode, "the FNO row kernels cannot run this layer", why):
        return frozenset()
    return (frozenset({"r2c", "c2r"}) if mode == "1"
            else fno_rows_auto(n_last, m_last, _block_smem(device_id), warp))


def _fno_rows_why(n_last: int, m_last: int, dtype, device_id: int) -> str | None:
    """Why the row kernels cannot take a last axis of ``n_last`` points keeping ``m_last``
    bins of a layer computing in ``dtype`` on device ``device_id`` (None where they can)."""
    why = _fno_kernels_why(dtype)
    if why is None:
        from . import _rows

        smem = _block_smem(device_id)
        if not _rows.supported(n_last, m_last, smem):
            why = (f"the row kernels take no last axis of {n_last} points keeping {m_last} "
                   f"bins (a 5-smooth complex length that fits {smem} bytes of shared memory, "
                   f"or 64 R points, {_rows.COLS_MIN_R} <= R <= {_rows.COLS_THREADS})")
    return why


def fno_plane(spatial, modes, dtype, device_id: int, tuned=()) -> frozenset:
    """Which steps of the FNO layer's DFT chain run the last two axes (a plane) at once on the
    plane kernels (:class:`fftmatvec.fno._rows.Plane`) instead of a GEMM an axis: a subset of
    ``{"r2c", "c2r"}`` (the forward transforms: the analysis and the adjoint of the synthesis;
    the inverse ones: the synthesis and the adjoint of the analysis). By default
    :func:`fno_plane_auto` where the kernels take the plane (two or more axes, float32 on a
    GPU, 5-smooth complex lengths that fit a block, or other lengths in the direct form:
    :func:`fno_direct`); plan key ``fno_plane``: ``0`` none, ``1`` both, an error where the
    kernels cannot; ``tuned`` as for :func:`fno_rows`."""
    mode = _fno_mode("fno_plane", tuned)
    if mode == "0":
        return frozenset()
    return _fno_plane(tuple(int(n) for n in spatial), tuple(int(m) for m in modes),
                      np.dtype(dtype).str, int(device_id), mode, _fno_mode("fno_direct", tuned))


def fno_plane_auto(spatial, modes, warp: bool = False, direct: bool = False) -> frozenset:
    """The steps of :func:`fno_plane` by default: both, where the layer has two or more axes and
    the first axis of the plane keeps at least
    :data:`FNO_PLANE_MIN_FRACTION` of its frequencies, or
    :data:`FNO_PLANE_WARP_MIN_FRACTION` where the kernels' warp form
    takes the plane (``warp``), or at any fraction in the direct form (``direct``: its sums
    cost in proportion to the modes)."""
    least = FNO_PLANE_WARP_MIN_FRACTION if warp else FNO_PLANE_MIN_FRACTION
    if len(spatial) < 2 or (modes[-2] < least * spatial[-2] and not direct):
        return frozenset()
    return frozenset({"r2c", "c2r"})


@functools.lru_cache(maxsize=256)
def _fno_plane(spatial: tuple, modes: tuple, dtype: str, device_id: int, mode: str,
               direct_mode: str = "auto") -> frozenset:
    """:func:`fno_plane` for a ``mode`` of ``"auto"`` or ``"1"`` and ``fno_direct``'s
    ``direct_mode``, once per layer shape."""
    why, warp, direct = _fno_plane_why(spatial, modes, dtype, device_id, direct_mode)
    if unavailable("fno_plane", mode, "the FNO plane kernels cannot run this layer", why):
        return frozenset()
    return (frozenset({"r2c", "c2r"}) if mode == "1"
            else fno_plane_auto(spatial, modes, warp, direct))


def _fno_plane_why(spatial: tuple, modes: tuple, dtype, device_id: int,
                   direct_mode: str = "auto"):
    """``(why, warp, direct)``: why the plane kernels cannot take the last two axes of a layer
    computing in ``dtype`` on device ``device_id`` (None where they can), whether their warp
    form takes the plane, and whether they take it in the direct form (``direct_mode``, plan
    ``fno_direct``'s mode: :func:`fno_direct`; by default where the FFT forms cannot, as
    :data:`FNO_DIRECT` says)."""
    why = "the layer has one axis" if len(spatial) < 2 else _fno_kernels_why(dtype)
    warp = direct = False
    if why is None:
        from . import _rows

        smem = _block_smem(device_id)
        plane, kept = tuple(spatial[-2:]), tuple(modes[-2:])
        fft = _rows.plane_supported(*plane, *kept, smem)
        if direct_mode == "1" or (direct_mode == "auto" and FNO_DIRECT and not fft):
            direct = _rows.direct_supported(*plane, *kept, smem)
        warp = not direct and _rows.warp_supported(*plane, *kept, smem)
        if not (fft or direct):
            why = (f"they take no plane of {plane[0]} x {plane[1]} points keeping "
                   f"{kept[0]} x {kept[1]} modes (5-smooth complex lengths, a row and a "
                   f"column fitting {smem} bytes of shared memory, or in the direct form at "
                   f"most {_rows.DIRECT_MAX_MODES} bins of the last axis and "
                   f"{_rows.DIRECT_MAX_MODES0} modes of the first)")
    return why, warp, direct


def fno_direct(spatial, modes, dtype, device_id: int, tuned=()) -> bool:
    """Whether the FNO layer's plane kernels (:func:`fno_plane`) run in their direct form
    (:class:`fftmatvec.fno._rows.DirectPlane`: truncated DFTs as register-tiled sums, any plane
    size, at most :data:`~fftmatvec.fno._rows.DIRECT_MAX_MODES` bins of the last axis): by
    default (:data:`FNO_DIRECT`) where it takes a plane that the FFT forms
    cannot (lengths with prime factors past 5: 85 = 5 x 17); plan key ``fno_direct``: ``0``
    never, ``1`` wherever it takes the plane (an error elsewhere); ``tuned`` as for
    :func:`fno_rows`."""
    mode = _fno_mode("fno_direct", tuned)
    if mode == "0":
        return False
    why, _, direct = _fno_plane_why(tuple(int(n) for n in spatial),
                                    tuple(int(m) for m in modes), dtype, device_id, mode)
    if mode == "1" and why is None and not direct:
        from . import _rows

        why = (f"the direct form takes at most {_rows.DIRECT_MAX_MODES} bins of the last axis "
               f"and {_rows.DIRECT_MAX_MODES0} modes of the first, a plane fitting a block; got "
               f"{tuple(spatial[-2:])} keeping {tuple(modes[-2:])}")
    if unavailable("fno_direct", mode, "the planes' direct form cannot serve this layer", why):
        return False
    return direct


def fno_chain(batch: int, cin: int, cout: int, spatial, modes, dtype, device_id: int,
              kernels: bool, tuned=()):
    """The FNO layer's DFT chain, ``(rows, plane, layout, variant, product, fused)``: the last
    axis's
    transforms on the row kernels (:func:`fno_rows`), the last two axes on the plane kernels
    (:func:`fno_plane`), the layout of the modes (``"paired"``: :func:`fno_paired`, all four
    transforms of the layer on the row kernels of its one axis or the plane kernels of its
    two; ``"split"``: :func:`fno_split`; else ``"interleaved"``;
    :data:`fftmatvec.fno._dft.LAYOUTS`), the kernels' form (:func:`fno_variant`), whether
    the paired modes' forward channel product runs on the package's kernel
    (:func:`fno_product`) and whether a forward without gradients runs as one kernel
    (:func:`fno_fused`); the kernels only where ``kernels`` (float32 on a GPU); ``tuned``:
    the plan of the layer's FNO tuning table entry (pairs ``(key, value)``), which
    ``FFTMATVEC_PLAN`` overrides key by key."""
    rows = fno_rows(spatial[-1], modes[-1], dtype, device_id, tuned) if kernels else frozenset()
    split = fno_split(batch, cin, cout, spatial, dtype, row_kernels=bool(rows), tuned=tuned)
    paired = fno_paired(spatial, modes, dtype, device_id, kernels, tuned)
    both = frozenset({"r2c", "c2r"})
    if paired and len(spatial) == 1:
        rows, plane, layout = both, frozenset(), "paired"
    elif paired:
        rows, plane, layout = frozenset(), both, "paired"
    else:
        layout = "split" if split else "interleaved"
        plane = fno_plane(spatial, modes, dtype, device_id, tuned) if kernels and not split \
            else frozenset()
    direct = bool(plane) and fno_direct(spatial, modes, dtype, device_id, tuned)
    variant = ("direct" if direct else
               fno_variant(spatial, modes, rows, plane, device_id, tuned) if kernels else "auto")
    product = fno_product(batch, cin, cout, layout, kernels, tuned)
    fused = fno_fused(batch, cin, cout, spatial, modes, layout, variant, kernels, device_id,
                      tuned)
    return rows, plane, layout, variant, product, fused


def fno_fused(batch: int, cin: int, cout: int, spatial, modes, layout: str, variant: str,
              kernels: bool, device_id: int, tuned=()) -> bool:
    """Whether a forward without gradients of the FNO layer runs as one kernel
    (:class:`fftmatvec.fno._fused1d.Layer1d`: the analysis, the channel product and the
    synthesis between one read of ``x`` and one write of ``y``): by default
    (:data:`FNO_FUSED`) for one-axis layers on the paired modes
    (``layout``) whose rows, channels and kept bins the kernel takes
    (:func:`fftmatvec.fno._fused1d.supported`), the row kernels not forced into their pass form
    (``variant``), float32 on a GPU (``kernels``), where its blocks fill at least
    :data:`FNO_FUSED_MIN_FILL` of the waves they take (the kernel's
    time is a wave's, the chain's grows with the batch); plan key
    ``fno_fused``: ``0`` never, ``1`` every layer it takes (an error elsewhere); ``tuned`` as
    for :func:`fno_rows`. Training keeps the chain (its backward reads the modes)."""
    mode = _fno_mode("fno_fused", tuned)
    if mode == "0" or (mode == "auto" and not FNO_FUSED):
        return False
    spatial, modes = tuple(int(n) for n in spatial), tuple(int(m) for m in modes)
    if len(spatial) != 1 or layout != "paired":
        why = (f"it takes one-axis layers on the paired modes, got {len(spatial)} axes, "
               f"{layout} modes")
    elif not kernels:
        why = "the kernel runs float32 layers on a GPU"
    elif variant == "passes":
        why = "plan fno_warp=0 keeps the row kernels' pass form"
    else:
        from . import _fused1d

        smem = _block_smem(device_id)
        why = None
        if not _fused1d.supported(spatial[0], modes[0], cin, cout, smem):
            channels = " or ".join(map(str, _fused1d.CHANNELS))
            why = (f"it takes rows of 64, 128 or 256 points and {channels} channels in and out,"
                   f" {_fused1d.MIN_BATCH_ROWS} batch rows' modes fitting "
                   f"{smem} bytes of shared memory; got {spatial[0]} points keeping {modes[0]} "
                   f"bins, {cin} and {cout} channels")
        elif mode == "auto":
            nb = _fused1d.batch_rows(cin, modes[0], smem)
            blocks, sms = -(-batch // nb), _sm_count(device_id)
            if blocks < FNO_FUSED_MIN_FILL * sms * -(-blocks // sms):
                return False
    return not unavailable("fno_fused", mode, "the one-kernel layer cannot serve this layer", why)


@functools.lru_cache(maxsize=16)
def _sm_count(device_id: int) -> int:
    """The multiprocessors of device ``device_id``."""
    props = backend.cupy.cuda.runtime.getDeviceProperties(device_id)
    return int(props["multiProcessorCount"])


def fno_product(batch: int, cin: int, cout: int, layout: str, kernels: bool, tuned=()) -> bool:
    """Whether the FNO layer's forward channel product on the paired modes (``layout``
    ``"paired"``) runs on the package's kernel (:class:`fftmatvec.fno._product.ModeProduct`)
    rather than cuBLAS: by default for batches of at most
    :data:`FNO_PRODUCT_MAX_BATCH` rows and even channel counts
    (:func:`fftmatvec.fno._product.supported`), float32 on a GPU (``kernels``); plan key
    ``fno_product``: ``0`` never, ``1`` every paired layer it takes (an error elsewhere);
    ``tuned`` as for :func:`fno_rows`."""
    mode = _fno_mode("fno_product", tuned)
    if mode == "0":
        return False
    from ._product import supported

    if layout != "paired":
        why = f"the modes are {layout}, not paired"
    elif not kernels:
        why = "the kernel runs float32 layers on a GPU"
    elif not supported(cin, cout):
        why = f"it takes even channel counts, up to 512 output channels, got {cin} and {cout}"
    elif mode == "auto" and batch > FNO_PRODUCT_MAX_BATCH:
        return False
    else:
        why = None
    return not unavailable("fno_product", mode, "the channel product's kernel cannot serve "
                           "this layer", why)


def fno_paired(spatial, modes, dtype, device_id: int, kernels: bool, tuned=()) -> bool:
    """Whether the FNO layer's DFT chain keeps its modes modes-major in complex pairs
    (:class:`fftmatvec.fno._dft.PairedChain`: the row kernels of a one-axis layer, or the plane
    kernels of a two-axis one, run all four transforms in that layout, the complex GEMM reads
    and writes it in place). By default for one-axis layers where the row kernels take the axis
    (:data:`FNO_PAIRED`; ``kernels``: float32 on a GPU; a 5-smooth complex
    length that fits a block) and neither the split modes (plan ``fno_split=1``) nor the GEMMs
    (plan ``fno_rows=0``) are forced, and for two-axis layers that the plane kernels take both
    ways by default (:data:`FNO_PAIRED_PLANE`, :func:`fno_plane_auto`;
    not beside plan ``fno_plane=0``); plan key ``fno_paired``: ``0`` never, ``1`` every layer
    it takes (an error elsewhere, and beside ``fno_split=1``); ``tuned`` as for
    :func:`fno_rows`."""
    mode = _fno_mode("fno_paired", tuned)
    spatial, modes = tuple(int(n) for n in spatial), tuple(int(m) for m in modes)
    d = len(spatial)
    if mode == "0" or (mode == "auto" and not (FNO_PAIRED if d == 1 else FNO_PAIRED_PLANE)):
        return False
    if d > 2:
        why = f"the layer has {d} axes"
    elif d == 1 and _fno_mode("fno_split", tuned) == "1":
        why = "plan fno_split=1 keeps the modes split"
    elif d == 1 and _fno_mode("fno_rows", tuned) == "0":
        why = "plan fno_rows=0 keeps the last axis on GEMMs"
    elif d == 2 and _fno_mode("fno_plane", tuned) == "0":
        why = "plan fno_plane=0 keeps the plane on GEMMs"
    elif not kernels:
        why = f"the {'row' if d == 1 else 'plane'} kernels run float32 layers on a GPU"
    elif d == 1:  # ``kernels``: the layer computes in float32
        why = _fno_rows_why(spatial[0], modes[0], np.float32, int(device_id))
    else:
        why, warp, direct = _fno_plane_why(spatial, modes, np.float32, int(device_id),
                                           _fno_mode("fno_direct", tuned))
        if why is None and mode == "auto" and not fno_plane_auto(spatial, modes, warp, direct):
            return False  # the plane on GEMMs, as fno_plane takes it
    return not unavailable("fno_paired", mode, "the paired modes cannot serve this layer", why)


def fno_variant(spatial, modes, rows, plane, device_id: int, tuned=()) -> str:
    """The form of the FNO layer's row and plane kernels (:class:`fftmatvec.fno._rows.LastAxis`,
    :class:`~fftmatvec.fno._rows.Plane` take it as ``variant``) for a layer taking the row
    kernels ``rows`` and the plane kernels ``plane`` (:func:`fno_rows`, :func:`fno_plane`): by
    default ``"auto"`` (the kernels' own rule: a plane's warp form wherever it takes the plane,
    a row's where :data:`fftmatvec.fno._rows.ROW_WARP_AUTO`); plan key ``fno_warp``: ``0`` the
    pass form, ``1`` the warp form (an error where a kernel the layer takes has none);
    ``tuned`` as for :func:`fno_rows`."""
    mode = _fno_mode("fno_warp", tuned)
    if mode != "1":
        return "passes" if mode == "0" else "auto"
    why = None
    if rows or plane:
        from . import _rows

        smem = _block_smem(device_id)
        if plane and not _rows.warp_supported(*spatial[-2:], *modes[-2:], smem):
            why = (f"the plane of {spatial[-2]} x {spatial[-1]} points keeping {modes[-2]} x "
                   f"{modes[-1]} modes has none (rows of {_rows.WARP_ROWS} complex values, "
                   f"columns of {_rows.WARP_COLUMNS})")
        elif not plane and not _rows.row_warp_supported(spatial[-1], modes[-1], smem):
            why = (f"the last axis of {spatial[-1]} points keeping {modes[-1]} bins has none "
                   "(rows of 64, 128 or 256 points)")
    unavailable("fno_warp", mode, "the kernels' warp form cannot serve this layer", why)
    return "warp"


def fno_ends(x_shape, itemsize: int, cout: int, tuned=(), training: bool = True,
             kernel_ends: bool = False) -> bool:
    """Whether the CUDA graphs of an FNO layer (input ``x_shape`` of ``itemsize`` bytes an
    element, ``cout`` output channels) hold only its chains' middles, the first and the last
    step run outside them (:func:`fftmatvec.fno._graphs.ends_outside`: by default above
    :data:`~fftmatvec.fno._graphs.ENDS_MIN_BYTES` of input and output where gradients are
    wanted, ``training``, unless a one-axis layer's ends are the package's kernels
    (``kernel_ends``), else above :data:`~fftmatvec.fno._graphs.ENDS_MIN_BYTES_INFERENCE`);
    plan key ``fno_ends``: ``0`` the whole chains in the graphs, ``1`` the middles at any size;
    ``tuned`` as for :func:`fno_rows`. One decision serves the forward and the backward (the
    backward's input and output are the forward's output and input in size)."""
    mode = _fno_mode("fno_ends", tuned)
    if mode == "auto":
        from ._graphs import ends_outside

        return ends_outside(x_shape, itemsize, cout, training, kernel_ends)
    return mode == "1"


def fno_split(batch: int, cin: int, cout: int, spatial, dtype, row_kernels: bool = False,
              tuned=()) -> bool:
    """Whether the FNO layer's DFT chain keeps its modes modes-major and split
    (:class:`fftmatvec.fno._dft.SplitChain`: no permute around the channel product, the weight
    copied into its real and imaginary parts) rather than interleaved
    (:class:`fftmatvec.fno._dft.Chain`). By default (on any device) for one-axis layers in
    float32 or float64 where :func:`~fftmatvec.fno._dft.split_pays`, and where the row kernels
    of :func:`fno_rows` take the axis (``row_kernels``; they write and read either layout) only
    with :data:`FNO_SPLIT_WITH_ROW_KERNELS`; plan key ``fno_split``: ``0``
    never, ``1`` every layer it takes (an error elsewhere: more than one axis, or 16-bit
    storage); ``tuned`` as for :func:`fno_rows`."""
    mode = _fno_mode("fno_split", tuned)
    if mode == "0":
        return False
    from ._dft import split_pays

    spatial = tuple(int(n) for n in spatial)
    try:
        name = np.dtype(dtype).name
    except TypeError:  # a torch dtype
        name = str(dtype).rsplit(".", 1)[-1]
    why = (f"the layer has {len(spatial)} axes" if len(spatial) != 1 else
           None if name in ("float32", "float64") else
           f"it computes in float32 or float64, the layer in {name}")
    if unavailable("fno_split", mode, "the split modes cannot serve this layer", why):
        return False
    if mode == "1":
        return True
    if row_kernels and not FNO_SPLIT_WITH_ROW_KERNELS:
        return False
    return split_pays(int(batch), int(cin), int(cout), spatial)

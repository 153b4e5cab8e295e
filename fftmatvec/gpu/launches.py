"""Stage 3's launch builders: the per-frequency products with ``Khat`` on the package's kernels
(GEMV, staged, cp.async, input-in-registers, tensor cores) as typed launches
(:class:`_Launch`: kernel, right-hand sides, grid, block, tile, split-K), and their default
tiles. Which of them a product takes is the planner's choice (:mod:`fftmatvec.gpu.planner`);
a :class:`~fftmatvec.gpu.planning.PlanningView` holds both, for a problem, a device, rules and
overrides (:func:`~fftmatvec.gpu.planning.make_plan`). Nothing here allocates or launches."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..precision import PrecisionConfig
from .rules import (ASYNC_TILES, MMA_MAX_KB, PIPE_TILES, STAGED_TILES, TILES, WIDE_TILES,
                    XREG_MAX_ND, XREG_ND, XREG_TILES, _CPLX_SUFFIX, _MMA_ROWS, _STAGED_J,
                    _STORE_SUFFIX)


@dataclass(frozen=True)
class _Launch:
    name: str
    kb: int
    grid: tuple
    block: tuple
    splits: int
    red_chunk: int
    staged: bool = False  # the staged kernels' arguments (sbgemvs_* and sbgemva_*)
    mma: bool = False
    smem: int = 0  # bytes of dynamic shared memory (tensor-core and cp.async launches)
    resident: int = 0  # blocks resident on the device at once (tensor-core launches)
    freq_major: bool = False  # consecutive blocks take consecutive frequency tiles (tensor cores)
    xreg_rows: int = 0  # output rows per block of an input-in-registers adjoint (sbgemvx_*), else 0
    serial_sum: bool = False  # split-K partials added one thread an output (reduce_serial_*)

    def describe(self) -> str:
        """The launch in words: kernel family, right-hand sides, kernel, grid, split-K."""
        family = ("tensor cores" if self.mma else "input in registers" if self.xreg_rows
                  else "cp.async" if self.name.startswith("sbgemva_")
                  else "staged" if self.staged else "GEMV")
        split = (f", split-K {self.splits} x {self.red_chunk} rows" if self.splits > 1
                 else "")
        sides = f"{self.kb} right-hand side" + ("s" if self.kb > 1 else "")
        return f"{family}, {sides}: {self.name}, grid {self.grid}, block {self.block}{split}"


def async_chunks(tile) -> int:
    """W of a cp.async tile (RT, TY, J, NS[, W]): chunks of 16 bytes per thread and row."""
    return tile[4] if len(tile) > 4 else 1


def _holding(n: int, compiled) -> int | None:
    """The smallest of the ``compiled`` counts (ascending) that holds ``n``, or None."""
    return next((c for c in compiled if c >= n), None)


def serial_sum(rules, num_sms: int, n: int, splits: int) -> bool:
    """Whether the split-K sum of ``splits`` partial results of ``n`` outputs each runs one
    thread per output (``reduce_serial_*``: few splits over many outputs, the rules'
    ``reduce_serial_*``), else lanes of threads summing each output's splits."""
    return (splits <= rules.reduce_serial_max_splits
            and n >= rules.reduce_serial_min_outputs * num_sms)


def _i64(v) -> np.int64:
    return np.int64(v)


def rows_launch(rows: int, cols: int, num_sms: int) -> tuple[tuple, tuple]:
    """(grid, block) of the row kernels (pad, unpad, the float16 adjoint's input scaling) over
    ``rows`` rows of ``cols`` elements on a device of ``num_sms`` multiprocessors: blockDim.x
    threads along a row (about four elements each, 32 to 256), 256 threads per block, enough
    long-lived blocks to fill the device, each looping over its rows; with too few rows for
    that, several blocks share each row (grid.y column chunks)."""
    bx = 32
    while bx < 256 and bx * 4 < cols:
        bx *= 2
    by = 256 // bx
    target = 8 * num_sms
    row_blocks = max(1, min(math.ceil(rows / by), target))
    col_blocks = max(1, min(math.ceil(cols / (4 * bx)), target // row_blocks, 65535))
    return (row_blocks, col_blocks), (bx, by)


def _split_k(splits: int, n_red: int, step: int) -> tuple[int, int]:
    """(splits, rows per split) for ``splits`` wanted over ``n_red`` reduction rows, each
    split a multiple of ``step`` rows (the kernel's chunk); fewer splits when rounding up the
    chunks leaves some empty."""
    red_chunk = -(-math.ceil(n_red / splits) // step) * step
    return math.ceil(n_red / red_chunk), red_chunk


def _fill_splits(base: int, target: int, max_splits: int) -> int:
    """Split-K count that brings ``base`` blocks up to ``target`` (whole rounds of the device's
    block slots), at most ``max_splits``; 1 when ``base`` already reaches it."""
    if base >= target:
        return 1
    return max(1, min(math.ceil(target / base), max_splits))


def pipe_max_splits(n_red: int, tile) -> int:
    """The most splits a tensor-core launch with ``tile`` = (MT, V, WR, WF, KS, NS) takes over
    ``n_red`` reduction rows: each split keeps at least 2 x NS stages of KS rows."""
    ks, ns = tile[4], tile[5]
    return max(1, n_red // (2 * ns * ks))


def pipe_split_time(splits: int, chunk: int, base: int, resident: int, partial_bytes: int,
                    model) -> float:
    """``PIPE_SPLIT_MODEL``'s time (microseconds) of a launch of ``splits`` splits of ``chunk``
    reduction rows, ``base`` blocks per split, ``resident`` blocks on the device at once,
    ``partial_bytes`` of partial sums per split; ``model`` = (a, w, b)."""
    a, w, b = model
    t = math.ceil(base * splits / resident) * (a * chunk + w)
    return t + (b * splits * partial_bytes / 1e6 if splits > 1 else 0.0)


def pipe_split_count(base: int, resident: int, n_red: int, step: int, max_splits: int,
                     partial_bytes: int, model, max_rows: int | None = None) -> int:
    """The split-K count, 1 to ``max_splits``, that minimises ``pipe_split_time`` over
    ``n_red`` reduction rows split in whole multiples of ``step``, with at most ``max_rows``
    rows a split where that leaves ``max_splits`` or fewer splits."""
    best_t, best = math.inf, 1
    first = 1 if max_rows is None else max(1, min(max_splits, math.ceil(n_red / max_rows)))
    # past 64 rounds of blocks the rounding of the last one no longer matters
    top = max(first, min(max_splits, math.ceil(64 * resident / max(1, base))))
    seen = set()
    for want in range(first, top + 1):
        splits, chunk = _split_k(want, n_red, step)
        if splits in seen:
            continue
        seen.add(splits)
        t = pipe_split_time(splits, chunk, base, resident, partial_bytes, model)
        if t < best_t * (1 - 1e-9):
            best_t, best = t, splits
    return best


# the element of each storage as the kernels read it: its itemsize sizes their shared memory
_STORED_ELEMENT = {"c128": np.complex128, "c64": np.complex64, "c32h": np.uint32}


class LaunchBuilders:
    """Stage 3's launch builders and their default tiles, for ``problem``
    (:class:`~fftmatvec.gpu.planning.Problem`: its shape and storage) on ``device``
    (:class:`~fftmatvec.gpu.planning.DeviceInfo`: multiprocessors, shared memory, threads and
    registers per multiprocessor, ``device.code``) under ``rules``
    (:class:`~fftmatvec.gpu.rules.Rules`) and ``overrides``
    (:class:`~fftmatvec.gpu.overrides.Overrides`: ``dmma_c64`` names the tensor-core kernels).
    A :class:`~fftmatvec.gpu.planner.Planner` asks them for the launches it chooses; a tuning
    sweep calls them with tiles and rules of its own. Nothing is compiled, allocated or
    launched."""

    def __init__(self, problem, device, rules, overrides):
        letter = PrecisionConfig(problem.precision).letters[2]
        self.store = _STORE_SUFFIX[letter]
        self.nd, self.nm, self.nf = problem.nd, problem.nm, problem.nf
        self.compute = np.dtype(np.complex128 if letter == "d" else np.complex64)
        # the stored element: its itemsize sizes the kernels' shared memory
        self.data = np.empty(0, dtype=_STORED_ELEMENT[self.store])
        self.device, self.rules, self.resolved = device, rules, overrides
        self.arch, self.num_sms = device.arch, device.multiprocessors
        self.smem_per_sm, self.smem_per_block = device.smem_per_sm, device.smem_per_block
        self.threads_per_sm, self.regs_per_sm = device.threads_per_sm, device.regs_per_sm

    @property
    def pipe_store(self) -> str:
        """The storage name of the tensor-core kernels and their tables: ``c64dmma`` for
        complex64 storage on FP64 MMAs (by default on :data:`DMMA_C64_ARCHS`;
        ``dmma_c64=0`` / ``=1`` never / always), else :attr:`store`."""
        if self.store != "c64":
            return self.store
        mode = self.resolved.get("dmma_c64")
        dmma = self.rules.dmma_c64 if mode == "auto" else mode == "1"
        return "c64dmma" if dmma else "c64"

    def _tile(self, kb: int, n_out: int, adjoint: bool) -> tuple[int, int]:
        """(RT, V) for a launch of ``kb`` right-hand sides (defaults from the sweeps of
        scripts/tune_sbgemv.py; see docs/gpu.md)."""
        if kb > 1:
            # several right-hand sides: the product becomes arithmetic-bound; the largest
            # register tile keeps the vector reads per multiply-add low
            return max((rt, v) for rt, k, v in TILES[self.store] if k == kb)
        # One right-hand side: 16-byte loads; RT rows share each vector read. Skinny outputs
        # take fewer rows per thread (and more split-K blocks) so no thread idles.
        rt, v = {
            ("c128", False): (2, 1), ("c128", True): (4, 1),
            ("c64", False): (4, 2), ("c64", True): (2, 2),
            ("c32h", False): (4, 4), ("c32h", True): (8, 2),
        }[(self.store, adjoint)]
        if n_out < 16:
            rt = {"c128": 1, "c64": 2, "c32h": 2}[self.store]
            v = {"c128": 1, "c64": 2, "c32h": 4}[self.store]
        return rt, v


    def _pipe_tile(self, n_out: int, n_red: int, adjoint: bool):
        """(tile, rounds of resident blocks its split-K fills, or None for the fitted model) of
        a tensor-core launch: the 16-row tile of ``PIPE_FEW`` for few outputs (forward) or few
        reduction rows (adjoint), else the storage's default."""
        store = self.pipe_store
        few = self.rules.pipe_few.get((store, bool(adjoint)))
        if few is not None and (n_red if adjoint else n_out) <= self.rules.pipe_few_rows:
            return few, self.rules.pipe_few_waves
        return self.rules.pipe_defaults[(store, bool(adjoint))], None


    def _async_default(self, n_out: int, n_red: int, adjoint: bool, in_dtype):
        """(tile, split-K target) of the cp.async kernel: the narrow tile for forward products
        with few outputs; ``ASYNC_FILL_ALT``'s tile where it fills the device's block slots
        better than a default that fills less than ``ASYNC_MIN_FILL`` of its last round."""
        if not adjoint and n_out <= self.rules.async_few_rows:
            return self.rules.async_few[self.store]
        key = (self.store, bool(adjoint))
        default, alt = self.rules.async_defaults[key], self.rules.async_fill_alt.get(key)
        if alt is None:
            return default
        fill = self.async_fill(*default, n_out, n_red, in_dtype, adjoint)
        if fill < self.rules.async_min_fill and self.async_fill(*alt, n_out, n_red, in_dtype, adjoint) > fill:
            return alt
        return default


    def _wide_default(self, kb: int, n_out: int, n_red: int, adjoint: bool):
        """((RT, V, W), (BX, TY), split-K target in blocks per multiprocessor) of the wide GEMV
        tile that serves one right-hand side by default (``WIDE_DEFAULTS``, TY cut to the rows
        there are), or None: products
        with fewer than ``ASYNC_FEW_ROWS`` outputs, frequencies that fill less than
        ``WIDE_MIN_FILL`` of the blocks' spans, or too few blocks, even split, for
        ``WIDE_MIN_BLOCKS_PER_SM`` per multiprocessor keep the tiles of one group."""
        wide = self.rules.wide_defaults.get((self.store, bool(adjoint))) if kb == 1 else None
        if wide is None or n_out < self.rules.async_few_rows:
            return None
        (rt, v, w), (bx, ty), per_sm = wide
        span = bx * w * v  # frequencies of one block
        if self.nf < self.rules.wide_min_fill * math.ceil(self.nf / span) * span:
            return None
        ty = max(1, min(ty, math.ceil(n_out / rt)))
        base, splits = self._gemv_blocks(n_out, n_red, rt, v, w, bx, ty, per_sm)
        if base * splits < self.rules.wide_min_blocks_per_sm * self.num_sms:
            return None
        return (rt, v, w), (bx, ty), per_sm


    def _serial_sum(self, rows: int, splits: int) -> bool:
        """:func:`serial_sum` of a launch's ``rows`` output rows (right-hand sides times
        outputs) of ``nf`` frequencies, where it splits (False without split-K)."""
        return splits > 1 and serial_sum(self.rules, self.num_sms, rows * self.nf, splits)

    def _xreg_fw(self) -> int:
        """The frequencies per block of an input-in-registers launch (:data:`XREG_TILES`)."""
        return min(XREG_TILES[self.store], key=lambda fw: (-(-self.nf // fw) * fw, -fw))


    def _xreg_name(self, fw: int, in_dtype, out_dtype) -> str:
        return (f"sbgemvx_{self.store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_"
                f"{_CPLX_SUFFIX[np.dtype(out_dtype)]}_n{_holding(self.nd, XREG_ND)}_f{fw}")


    def xreg_smem(self, fw: int) -> int:
        """Bytes of shared memory of an input-in-registers launch of ``fw`` frequencies."""
        _, rs, ns = XREG_TILES[self.store][fw]
        return ns * rs * _holding(self.nd, XREG_ND) * fw * self.data.itemsize


    def xreg_rows(self, fw: int) -> int:
        """Output rows per block of an input-in-registers launch of ``fw`` frequencies, before
        the grid's limit: :data:`XREG_FEW_ROWS` for few sensors, else :data:`XREG_ROWS`."""
        return self.rules.xreg_few_rows.get((self.store, _holding(self.nd, XREG_ND), fw), self.rules.xreg_rows)


    def _launch_xreg(self, kb: int, in_dtype, out_dtype, fw: int | None = None,
                     rows: int | None = None) -> _Launch:
        """An adjoint launch of ``kb`` <= 16 right-hand sides with the input in registers
        (``hip_kernels/sbgemvx.cuh``): blocks of ``fw`` frequencies (default
        :meth:`_xreg_fw`) and ``rows`` output rows (default :meth:`xreg_rows`)."""
        if not 1 <= kb <= MMA_MAX_KB:
            raise ValueError(f"an input-in-registers launch takes 1 to {MMA_MAX_KB} right-hand "
                             f"sides, got {kb}")
        if self.nd > XREG_MAX_ND:
            raise ValueError(f"the input-in-registers kernel takes at most {XREG_MAX_ND} "
                             f"reduction rows, got {self.nd}")
        fw = self._xreg_fw() if fw is None else fw
        if fw not in XREG_TILES.get(self.store, {}):
            raise ValueError(f"no input-in-registers kernel of {fw} frequencies for {self.store}")
        bg, rs, _ = XREG_TILES[self.store][fw]
        rows = self.xreg_rows(fw) if rows is None else rows
        rows = max(rows, -(-self.nm // 65535))  # the grid's y extent
        rows = -(-rows // rs) * rs
        smem = self.xreg_smem(fw)
        if smem > self.smem_per_block:
            raise ValueError(f"the input-in-registers kernel needs {smem} bytes of shared "
                             f"memory, the device allows {self.smem_per_block} per block")
        grid = (-(-self.nf // fw), -(-self.nm // rows))
        block = (fw * -(-kb // bg), 1)
        return _Launch(self._xreg_name(fw, in_dtype, out_dtype), kb, grid, block, 1, 0,
                       smem=smem, xreg_rows=rows)


    def _pipe_name(self, tile, in_dtype, out_dtype) -> str:
        mt, v, wr, wf, ks, ns = tile
        return (f"sbgemmp_{self.pipe_store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_"
                f"{_CPLX_SUFFIX[np.dtype(out_dtype)]}_m{mt}_v{v}_w{wr}x{wf}_k{ks}_s{ns}")


    def pipe_smem(self, tile, in_dtype) -> int:
        """Bytes of shared memory of a pipelined launch with ``tile`` = (MT, V, WR, WF, KS, NS)."""
        mt, v, wr, wf, ks, ns = tile
        rows = _MMA_ROWS * mt * wr
        freqs = wf * v
        per_stage = ks * freqs * (rows * self.data.itemsize + 16 * np.dtype(in_dtype).itemsize)
        return per_stage * ns


    def _launch_pipe(self, kb, n_out, n_red, in_dtype, out_dtype, tile=None,
                     adjoint=False) -> _Launch:
        """A tensor-core launch for ``kb`` <= 16 right-hand sides; ``tile`` = (MT, V, WR, WF,
        KS, NS) overrides the default (:meth:`_pipe_tile`). The split-K count minimises
        ``PIPE_SPLIT_MODEL``'s time over the counts that leave each split at least 2 x NS
        stages, or for the few-row tile fills ``PIPE_FEW_WAVES`` rounds of the device's resident
        blocks; the rules' ``pipe_splits`` sets it, and their ``pipe_waves`` the rounds."""
        if not 1 <= kb <= MMA_MAX_KB:
            raise ValueError(f"a tensor-core launch takes 1 to {MMA_MAX_KB} right-hand sides, got {kb}")
        waves = self.rules.pipe_waves
        if tile is None:
            tile, few_waves = self._pipe_tile(n_out, n_red, adjoint)
            if waves is None:
                waves = few_waves
        tile = tuple(tile)
        store = self.pipe_store
        if tile not in PIPE_TILES[store]:
            raise ValueError(f"pipelined tile {tile} is not compiled for {store}")
        mt, v, wr, wf, ks, _ = tile
        smem = self.pipe_smem(tile, in_dtype)
        if smem > self.smem_per_block:
            raise ValueError(f"pipelined tile {tile} needs {smem} bytes of shared memory, "
                             f"the device allows {self.smem_per_block} per block")
        rows = _MMA_ROWS * mt * wr
        base = math.ceil(n_out / rows) * math.ceil(self.nf / (wf * v))
        threads = 32 * wr * wf
        # the split kernel writes partial sums in the compute dtype: its registers decide
        resident = self.num_sms * self.resident_blocks(
            self._pipe_name(tile, in_dtype, self.compute), threads, smem)
        max_splits = pipe_max_splits(n_red, tile)
        if self.rules.pipe_splits is not None:
            splits = max(1, min(self.rules.pipe_splits, max_splits))
        elif waves is not None:
            splits = _fill_splits(base, waves * resident, max_splits)
        else:
            splits = pipe_split_count(base, resident, n_red, ks, max_splits,
                                      kb * n_out * self.nf * self.compute.itemsize,
                                      self.rules.pipe_split_model[(store, bool(adjoint))],
                                      self.rules.pipe_max_split_rows.get(store))
        splits, red_chunk = _split_k(splits, n_red, ks)
        name = self._pipe_name(tile, in_dtype, self.compute if splits > 1 else out_dtype)
        # Adjoints whose row tiles outnumber the resident blocks take the frequency tiles of a
        # row tile together: a round of blocks in the row order would read 128-byte runs of one
        # frequency tile, far apart. Forward products keep the row order: their row tiles share
        # the large vectors' tiles in L2.
        freq_major = bool(adjoint) and math.ceil(n_out / rows) > resident
        if self.rules.pipe_freq_major is not None:
            freq_major = bool(self.rules.pipe_freq_major)
        return _Launch(name, kb, (base, splits), (32, wr * wf), splits, red_chunk, mma=True,
                       smem=smem, resident=resident, freq_major=freq_major,
                       serial_sum=self._serial_sum(kb * n_out, splits))


    def resident_blocks(self, name: str | None, threads: int, smem: int) -> int:
        """Blocks of kernel ``name`` (``threads`` threads, ``smem`` bytes of dynamic shared
        memory) that one multiprocessor holds at once: the least of what its shared memory
        (1 KB reserved per block), threads and registers allow. The registers come from the
        compiled kernel; where the driver does not report them, or ``name`` is None, they are
        left out."""
        by_smem = self.smem_per_sm // (smem + 1024) if smem else 32
        by_threads = self.threads_per_sm // threads
        by_regs = 32
        regs = 0 if name is None else self.kernel_regs(name)
        if regs:
            per_warp = -(-regs * 32 // 256) * 256  # registers are allocated 256 per warp
            by_regs = (self.regs_per_sm // per_warp) // max(1, threads // 32)
        return max(1, min(by_smem, by_threads, by_regs, 32))


    def kernel_regs(self, name: str) -> int:
        """Registers per thread of kernel ``name`` in the device's code object (0 where the
        driver does not report them or there is no such kernel): ``device.code.num_regs``."""
        return self.device.code.num_regs(name)


    def _launch_staged(self, n_out, n_red, in_dtype, out_dtype, tile=None) -> _Launch:
        """A launch of the staged kernel; ``tile`` = (RT, V, TY) overrides the defaults."""
        if tile is None:
            rt, v = {"c128": (2, 1), "c64": (4, 2), "c32h": (4, 4)}[self.store]
            if self.store == "c32h" and n_out <= 16:
                rt = 1
            ty = 16
        else:
            rt, v, ty = tile
            if not 1 <= ty <= 16:  # the kernel's launch bound: 512 threads
                raise ValueError(f"staged blocks have 1 to 16 rows of 32 threads, got {ty}")
        if (rt, v) not in STAGED_TILES[self.store]:
            raise ValueError(f"staged tile (RT={rt}, V={v}) is not compiled for {self.store}")
        ty = max(1, min(ty, math.ceil(n_out / rt)))
        threads = 32 * ty
        base = math.ceil(n_out / (rt * ty)) * math.ceil(self.nf / (32 * v))
        per_sm = self.rules.staged_threads_per_sm or (2048 if self.store == "c64" else 1024)
        target = self.num_sms * max(1, per_sm // threads)
        splits = _fill_splits(base, target, math.ceil(n_red / _STAGED_J))
        splits, red_chunk = _split_k(splits, n_red, _STAGED_J)
        out_sfx = _CPLX_SUFFIX[self.compute if splits > 1 else np.dtype(out_dtype)]
        name = f"sbgemvs_{self.store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_{out_sfx}_r{rt}_v{v}"
        return _Launch(name, 1, (base, splits), (32, ty), splits, red_chunk, staged=True,
                       serial_sum=self._serial_sum(n_out, splits))


    def _async_grid(self, tile, waves: int, n_out: int, n_red: int, in_dtype,
                    adjoint: bool = False):
        """(blocks of one split, split-K count, reduction rows per split, block slots of the
        device) of a cp.async launch: when the blocks fill less than ``waves`` rounds of the
        slots the shared memory and threads leave, split-K makes that many rounds of them
        (where one split fills a round, only down to :data:`ASYNC_SPLIT_ROWS` rows per split)."""
        rt, ty, j, ns = tile[:4]
        smem = self.async_smem(tile, in_dtype)
        base = math.ceil(n_out / (rt * ty)) * math.ceil(self.nf / self._async_freqs(tile))
        slots = self.num_sms * self.resident_blocks(None, 32 * ty, smem)
        # each split keeps at least 2 * NS stages of reduction steps, and where one split's
        # blocks fill a round, ASYNC_SPLIT_ROWS rows
        most = n_red // (2 * ns * j)
        rows = self.rules.async_split_rows.get((self.store, bool(adjoint)))
        if rows is not None and base >= slots:
            most = max(1, min(most, n_red // rows))
        splits = _fill_splits(base, waves * slots, most)
        splits, red_chunk = _split_k(splits, n_red, j)
        return base, splits, red_chunk, slots


    def async_fill(self, tile, waves: int, n_out: int, n_red: int, in_dtype,
                   adjoint: bool = False) -> float:
        """The share of the block slots that a launch's rounds keep busy: its blocks over the
        rounds they take times the slots (1 when the last round is full)."""
        base, splits, _, slots = self._async_grid(tile, waves, n_out, n_red, in_dtype, adjoint)
        blocks = base * splits
        return blocks / (math.ceil(blocks / slots) * slots)


    def _async_freqs(self, tile) -> int:
        """Frequencies a cp.async block covers: 32 threads x W chunks of 16 bytes of Khat."""
        return 32 * (16 // self.data.itemsize) * async_chunks(tile)


    def _async_name(self, tile, in_dtype, out_dtype) -> str:
        rt, ty, j, ns = tile[:4]
        w = async_chunks(tile)
        return (f"sbgemva_{self.store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_"
                f"{_CPLX_SUFFIX[np.dtype(out_dtype)]}_r{rt}_y{ty}_j{j}_s{ns}"
                + (f"_w{w}" if w > 1 else ""))


    def async_smem(self, tile, in_dtype) -> int:
        """Bytes of shared memory of a cp.async launch with ``tile`` = (RT, TY, J, NS[, W])."""
        rt, ty, j, ns = tile[:4]
        w = async_chunks(tile)
        freqs = self._async_freqs(tile)
        per_stage = j * (rt * 32 * ty * 16 * w + freqs * np.dtype(in_dtype).itemsize)
        return per_stage * ns


    def _launch_async(self, n_out, n_red, in_dtype, out_dtype, tile=None,
                      adjoint=False) -> _Launch:
        """A launch of the cp.async one-vector kernel; ``tile`` = (RT, TY, J, NS[, W]) overrides the
        default. When the blocks fill less than the rules' ``async_waves`` rounds of the block slots the
        shared memory and threads leave, split-K makes that many rounds of them."""
        default, waves = self._async_default(n_out, n_red, adjoint, in_dtype)
        tile = default if tile is None else tuple(tile)
        if self.rules.async_waves is not None:
            waves = self.rules.async_waves
        if tile not in ASYNC_TILES[self.store]:
            raise ValueError(f"cp.async tile {tile} is not compiled for {self.store}")
        ty = tile[1]
        smem = self.async_smem(tile, in_dtype)
        if smem > self.smem_per_block:
            raise ValueError(f"cp.async tile {tile} needs {smem} bytes of shared memory, "
                             f"the device allows {self.smem_per_block} per block")
        base, splits, red_chunk, _ = self._async_grid(tile, waves, n_out, n_red, in_dtype,
                                                      adjoint)
        name = self._async_name(tile, in_dtype, self.compute if splits > 1 else out_dtype)
        return _Launch(name, 1, (base, splits), (32, ty), splits, red_chunk, staged=True, smem=smem,
                       serial_sum=self._serial_sum(n_out, splits))


    def _launch_gemv(self, kb, n_out, n_red, in_dtype, out_dtype, tile=None,
                     adjoint=False) -> _Launch:
        """A launch of the GEMV kernels for ``kb`` right-hand sides; ``tile`` = (RT, V, BX,
        TY[, W]) overrides the default (:meth:`_wide_default`, else :meth:`_tile`)."""
        bx = ty = None
        w, per_sm = 1, self.rules.gemv_blocks_per_sm
        if tile is not None:  # (rt, v, bx, ty) or (rt, v, bx, ty, w) from a tuning sweep
            rt, v, bx, ty, w = (tuple(tile) + (1,))[:5]
        else:
            wide = self._wide_default(kb, n_out, n_red, adjoint)
            if wide is not None:
                (rt, v, w), (bx, ty), per_sm = wide
            else:
                rt, v = self._tile(kb, n_out, adjoint)
        if w == 1 and (rt, kb, v) not in TILES[self.store]:
            raise ValueError(f"tile (RT={rt}, KB={kb}, V={v}) is not compiled for {self.store}")
        if w != 1 and (kb != 1 or (rt, v, w) not in WIDE_TILES[self.store]):
            raise ValueError(f"tile (RT={rt}, KB={kb}, V={v}, W={w}) is not compiled for "
                             f"{self.store}")
        if bx is None:
            bx = 32 if math.ceil(self.nf / v) <= 32 else 64
            ty = max(1, min(128 // bx, math.ceil(n_out / rt)))  # 128-thread blocks
        base, splits = self._gemv_blocks(n_out, n_red, rt, v, w, bx, ty, per_sm)
        splits, red_chunk = _split_k(splits, n_red, 1)
        out_sfx = _CPLX_SUFFIX[self.compute if splits > 1 else np.dtype(out_dtype)]
        name = (f"sbgemv_{self.store}_{_CPLX_SUFFIX[np.dtype(in_dtype)]}_{out_sfx}"
                f"_r{rt}_k{kb}_v{v}" + (f"_w{w}" if w > 1 else ""))
        return _Launch(name, kb, (base, splits), (bx, ty), splits, red_chunk,
                       serial_sum=self._serial_sum(kb * n_out, splits))


    def _gemv_blocks(self, n_out, n_red, rt, v, w, bx, ty, per_sm) -> tuple[int, int]:
        """(blocks of one split, split-K count) of a GEMV launch: blocks of bx x ty threads, each
        thread RT rows x W groups of V frequencies, split until ``per_sm`` blocks of 128 threads
        per multiprocessor are reached, each split keeping at least 32 reduction rows."""
        base = math.ceil(math.ceil(self.nf / v) / (bx * w)) * math.ceil(n_out / (ty * rt))
        target = per_sm * self.num_sms * max(1, 128 // (bx * ty))
        return base, _fill_splits(base, target, n_red // 32)

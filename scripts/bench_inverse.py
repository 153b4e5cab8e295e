#!/usr/bin/env python
"""Offline/online cost of the data-space posterior (fftmatvec.inverse).

For a random decaying kernel of size ``NdxNmxNt`` it measures, in one run:

* ``product``: the batched product ``H_d`` is made of, ``F (Γpr (F^T E))`` for a batch of ``k``
  observation unit vectors on the whole operator (one adjoint, one prior application, one
  forward product), after warm-up, median of ``--repeat``: its throughput in columns per second;
* ``form``: :meth:`DataSpacePosterior.factor` without its Cholesky (the ``Nd Nt`` columns of
  ``H_d``, the lower triangle of sensor-chunk blocks; the second of two calls, the first
  warming up), and its throughput as a ratio to the product's (the target is at least 0.8);
* ``cholesky``: the factorisation of ``H_d``, and the inverse ``H_d^{-1}`` the online mean uses
  (both as :meth:`DataSpacePosterior.factor` records them);
* ``mean``: one online :meth:`DataSpacePosterior.mean` of a new observation (median), with
  the floor of its read of ``H_d^{-1}`` (``8 (Nd Nt)^2`` bytes at the device-to-device copy
  bandwidth) beside it.

GPU times come from device events, CPU times from ``perf_counter``.

Usage: python scripts/bench_inverse.py [--size 100x5000x100] [--device gpu|cpu]
       [--batch K] [--chunks C] [--precision ddddd] [--prior diagonal|separable] [--repeat 5]
CPU smoke test: python scripts/bench_inverse.py --device cpu --size 6x40x12 --repeat 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _sync(xp):
    if xp is not np:
        xp.cuda.Device().synchronize()


def _timed(xp, fn):
    """``(seconds, result)`` of one call of ``fn``, waited for."""
    _sync(xp)
    if xp is np:
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, out
    start, stop = xp.cuda.Event(), xp.cuda.Event()
    start.record()
    out = fn()
    stop.record()
    stop.synchronize()
    return xp.cuda.get_elapsed_time(start, stop) * 1e-3, out


def _median(xp, fn, repeat):
    fn()  # warm-up
    return statistics.median(_timed(xp, fn)[0] for _ in range(repeat))


def _prior(kind, nm, nt, xp, rng):
    from fftmatvec import inverse

    if kind == "diagonal":
        return inverse.DiagonalPrior(xp.asarray(rng.uniform(0.5, 2.0, (nm, nt))))
    # separable: a sparse tridiagonal SPD space covariance, exponential correlation in time
    if xp is np:
        import scipy.sparse as sp
    else:
        import cupyx.scipy.sparse as sp
    off = 0.45 * xp.ones(nm - 1)
    space = sp.diags([off, xp.ones(nm), off], [-1, 0, 1], format="csr")
    return inverse.SeparablePrior(space, xp.exp(-xp.arange(nt) / 5.0))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="100x5000x100", help="NdxNmxNt")
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--batch", type=int, default=None,
                    help="columns per batched product (default: the posterior's, sized to memory)")
    ap.add_argument("--precision", default="ddddd", help="precision of the products forming H_d")
    ap.add_argument("--prior", choices=("diagonal", "separable"), default="diagonal")
    ap.add_argument("--chunks", type=int, default=None,
                    help="sensor chunks of H_d's block columns (1: whole-operator products; "
                         "default: the posterior's)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    from fftmatvec import BlockToeplitz, backend, inverse

    xp = np
    if args.device == "gpu":
        if not backend.gpu_available():
            raise SystemExit("no GPU: use --device cpu")
        xp = backend.cupy
    nd, nm, nt = (int(v) for v in args.size.lower().split("x"))
    rng = np.random.default_rng(0)
    K = rng.standard_normal((nd, nm, nt)) * np.exp(-np.arange(nt) / (nt / 4))
    F = BlockToeplitz(xp.asarray(K), args.precision)
    prior = _prior(args.prior, nm, nt, xp, rng)
    noise = 1e-2
    post = inverse.DataSpacePosterior(F, prior, noise, batch=args.batch, chunks=args.chunks)
    k = post.batch_size
    n = nd * nt

    # the batched product H_d is made of, on the whole operator
    cols = rng.choice(n, size=min(k, n), replace=False)
    E = xp.zeros((len(cols), nd, nt))
    E[xp.arange(len(cols)), xp.asarray(cols // nt), xp.asarray(cols % nt)] = 1.0
    G = post.prior
    t_prod = _median(xp, lambda: F.matmat(G.matmat(F.rmatmat(E))), args.repeat)
    prod_rate = len(cols) / t_prod

    # forming H_d: the phases factor() records (wall times after the device is done)
    post.factor(progress=False)  # warm-up: kernels compiled and plans made on first use
    post.factor(progress=False)
    info = post.factor_info
    t_form, t_chol, t_inv = info["form_seconds"], info["cholesky_seconds"], info["inverse_seconds"]
    form_rate = n / t_form

    d_new = F.matvec(xp.asarray(rng.standard_normal((nm, nt)))) + xp.asarray(
        0.1 * rng.standard_normal((nd, nt)))
    t_mean = _median(xp, lambda: post.mean(d_new), max(args.repeat, 5))
    bw = None
    if xp is not np:
        a = xp.empty(2**28, dtype=np.uint8)
        b = xp.empty_like(a)
        t_copy = _median(xp, lambda: b.__setitem__(slice(None), a), 5)
        bw = 2 * a.nbytes / t_copy  # device-to-device copy: read + write bytes per second
        del a, b
    floor = None if bw is None else 8 * n * n / bw  # H_d^-1 read once

    print(f"bench_inverse: (Nd, Nm, Nt) = ({nd}, {nm}, {nt}), Nd*Nt = {n}, device "
          f"{args.device}, precision {args.precision}, prior {args.prior}, batch {k}, chunks "
          f"{post.factor_info['chunks']}")
    print(f"{'what':<34}{'seconds':>12}{'columns/s':>14}{'ratio':>9}")
    print(f"{'batched product F G F^T E (k=' + str(len(cols)) + ')':<34}{t_prod:>12.4g}"
          f"{prod_rate:>14.4g}{1.0:>9.3f}")
    print(f"{'form H_d (lower block triangle)':<34}{t_form:>12.4g}{form_rate:>14.4g}"
          f"{form_rate / prod_rate:>9.3f}")
    print(f"{'Cholesky of H_d':<34}{t_chol:>12.4g}")
    print(f"{'H_d^-1 from the factor (for mean)':<34}{t_inv:>12.4g}")
    print(f"{'online mean() of a new observation':<34}{t_mean:>12.4g}")
    if floor is not None:
        print(f"{'  floor: H_d^-1 read at copy bw':<34}{floor:>12.4g}{'':>14}"
              f"{floor / t_mean:>9.3f}")
    print(f"Khat bytes read forming H_d: {post.factor_info['khat_bytes_read']:.4g} "
          f"({post.factor_info['khat_bytes_read'] / F.khat_nbytes:.1f} x Khat)")


if __name__ == "__main__":
    main()

"""``fftmatvec info``: versions, backend, GPU, and where kernels and tuning tables come from."""

from __future__ import annotations

import json
import os
import platform


def register(sub) -> None:
    p = sub.add_parser("info", help="print versions, backend, GPU and kernel/tuning sources")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    p.set_defaults(func=run)


def collect() -> dict:
    import numpy
    import scipy

    from .. import __version__, backend, gpu, kernels

    info: dict = {
        "fftmatvec": __version__,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
    }
    for mod in ("h5py", "yaml", "mpi4py", "cupy"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:
            info[mod] = None
    gpu_ok = backend.gpu_available()
    info["backends"] = ["numpy"] + (["cupy"] if gpu_ok else [])
    info.update(backend.device_description())
    info["kernels"] = kernels.describe()
    # the overrides of FFTMATVEC_PLAN as an operator built now would read them
    env = gpu.parse_overrides(os.environ.get(gpu.ENV), gpu.ENV)
    overrides = gpu.Overrides.resolve(env=os.environ.get(gpu.ENV))
    info["batches"] = gpu.batch_kernels(info.get("arch"), overrides)
    ok, why = gpu.callbacks.support()
    info["fft_callbacks"] = "stages 1 and 5 inside cuFFT (LTO callbacks)" if ok else f"off: {why}"
    smem = backend.shared_memory_limits()[1] if gpu_ok else None
    info["row_ffts"] = gpu.row_fft_line(gpu_ok, smem, overrides)
    info["fused_adjoint"] = gpu.fused_adjoint_line(gpu_ok, overrides)
    info["plan"] = (", ".join(f"{k}={v}" for k, v in env.items()) + f" ({gpu.ENV})" if env
                    else "the built-in rules (docs/gpu.md); override with FFTMATVEC_PLAN")
    from ..tuning import select

    paths = select.table_paths()
    info["tuning"] = (", ".join(str(p) for p in paths) + " (precision='auto' looks here in order)"
                      if paths else "no tables found: precision='auto' uses the error model")
    from ..fno import _tuning

    try:
        fno = _tuning.table_paths()
    except Exception as exc:  # noqa: BLE001 - a bad FFTMATVEC_FNO_TUNING_PATH: said, not raised
        info["fno_tuning"] = f"unreadable: {exc}"
    else:
        info["fno_tuning"] = (", ".join(str(p) for p in fno) + " (the FNO layers look here in "
                              "order)" if fno else "no tables: the FNO layers take the built-in "
                              "rules (fftmatvec tune-fno writes one)")
    return info


def run(args) -> int:
    info = collect()
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    width = max(len(k) for k in info)
    for key, value in info.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        print(f"{key:<{width}}  {value}")
    return 0

"""Matrix and vector files written with h5py directly, as the public FFTMatvec documentation
describes them (not through fftmatvec.io), for the I/O and command-line tests."""

from __future__ import annotations

import os

import h5py
import numpy as np


def meta_lines(nd, nm, nt, prefix="adj/vec_", ext=".h5", reindex=1, p2q=0, reverse_dof=1, checksum=None):
    lines = [nd, nm, nt, prefix, ext, reindex, p2q, reverse_dof]
    if checksum is not None:
        lines.append(checksum)
    return [str(v) for v in lines]


def write_fftmatvec_dir(root, K, *, prefix="adj/vec_", checksum=None, p2q=0, lines=None,
                        row_attrs=None, **create_kw):
    """An FFTMatvec matrix directory for kernel ``K`` (Nd, Nm, Nt).

    ``lines`` replaces the meta file's lines; ``row_attrs`` maps a row index to attributes that
    override (value) or delete (None) the defaults of that row file.
    """
    nd, nm, nt = K.shape
    binary = os.path.join(root, "binary")
    os.makedirs(os.path.dirname(os.path.join(binary, prefix + "x")), exist_ok=True)
    if lines is None:
        lines = meta_lines(nd, nm, nt, prefix, p2q=p2q, checksum=checksum)
    with open(os.path.join(binary, "meta_adj"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    for i in range(nd):
        with h5py.File(os.path.join(binary, f"{prefix}{i:06d}.h5"), "w") as f:
            ds = f.create_dataset("vec", data=K[i].reshape(-1), **create_kw)  # SOTI: (Nm, Nt)
            attrs = {"reindex": 1, "n_param": nm, "param_steps": nt}
            if checksum:
                attrs["checksum"] = checksum
            attrs.update((row_attrs or {}).get(i, {}))
            for k, v in attrs.items():
                if v is not None:
                    ds.attrs[k] = v
    return root


def row_file(root, i, prefix="adj/vec_"):
    return os.path.join(root, "binary", f"{prefix}{i:06d}.h5")


def write_native(path, K, *, dtype=np.float64, chunks=True, attrs_on="root", **create_kw):
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("kernel", data=K.astype(dtype), chunks=chunks, **create_kw)
        target = f.attrs if attrs_on == "root" else ds.attrs
        target["format"] = "fftmatvec-btt"
        target["version"] = 1
    return path


def write_vector(path, v, space="param", **extra):
    n, nt = v.shape
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("vec", data=v.reshape(-1))
        ds.attrs["reindex"] = 1
        if space == "param":
            ds.attrs["n_param"] = n
            ds.attrs["param_steps"] = nt
        else:
            ds.attrs["n_obs"] = n
            ds.attrs["obs_steps"] = nt
        for k, val in extra.items():
            if val is None:
                del ds.attrs[k]
            else:
                ds.attrs[k] = val
    return path


def truncate(path, fraction=0.5):
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.truncate(int(size * fraction))
    return path

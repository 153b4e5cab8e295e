"""Type aliases shared by the hints of the public API."""

from __future__ import annotations

import os
from typing import Any

#: An array of NumPy, CuPy or PyTorch (or any DLPack producer the function accepts). ``Any``
#: so that the hints import none of the optional array libraries.
Array = Any

#: A file or directory path: a string or an ``os.PathLike`` of one.
PathLike = str | os.PathLike[str]

#: An mpi4py communicator (``mpi4py.MPI.Comm``). ``Any`` so that the hints import no mpi4py.
Comm = Any

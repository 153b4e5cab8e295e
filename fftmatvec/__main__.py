"""``python -m fftmatvec``: the ``fftmatvec`` command, where the console script is not on the
PATH."""

import sys

from fftmatvec.cli import main

sys.exit(main())

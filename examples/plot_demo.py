"""
A source in an advection-diffusion equation, recovered
=======================================================

The demo of ``fftmatvec demo`` at its smallest size: a time-dependent source in a 2-D
advection-diffusion equation is recovered from noisy point-sensor data. The kernel of the
parameter-to-observable map comes from the PDE, the operator is checked against time stepping,
and the MAP estimate is solved for by conjugate gradients on ``F^T F / sigma^2 + R``, every
product applied by :class:`~fftmatvec.BlockToeplitz`.
"""

import pathlib
import tempfile

import matplotlib.image as mpimg
import matplotlib.pyplot as plt

import fftmatvec.demo as demo

out = pathlib.Path(tempfile.mkdtemp())
summary = demo.run_demo("tiny", device="cpu", out=str(out), quiet=True)

# %%
# The sizes, the operator's error against time stepping, and the solve.
s = summary
print(f"{s['nd']} sensors, {s['nm']} source cells, {s['nt']} time steps")
print(f"F against time stepping: relative error {s['operator_rel_error']:.1e}, "
      f"F^T {s['adjoint_rel_error']:.1e}")
print(f"CG: {s['cg_iterations']} iterations, converged: {s['cg_converged']}")
print(f"relative error of the recovered source {s['reconstruction_rel_error']:.2f}, "
      f"data misfit over the noise {s['data_misfit_rms_over_noise']:.2f}")

# %%
# The figure the demo writes: the true and the recovered source, and the data.
fig, ax = plt.subplots(figsize=(10, 7))
ax.imshow(mpimg.imread(out / "demo.png"))
ax.set_axis_off()
fig.tight_layout()

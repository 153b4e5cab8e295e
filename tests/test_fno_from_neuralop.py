"""``SpectralConv.from_neuralop`` refuses what the layer does not compute, and the layer
refuses a grid with no points, with the package's errors."""

import pytest

from fftmatvec import FFTMatvecTypeError, FFTMatvecValueError

torch = pytest.importorskip("torch")


def _neuralop():
    mod = pytest.importorskip("neuralop.layers.spectral_convolution")
    return mod.SpectralConv


@pytest.mark.parametrize("option", [{"resolution_scaling_factor": 2.0},
                                    {"resolution_scaling_factor": [1.0, 0.5]},
                                    {"fno_block_precision": "half"},
                                    {"fno_block_precision": "mixed"}])
def test_from_neuralop_refuses_what_the_constructor_refuses(option):
    """A layer on another output grid or with mixed-precision blocks computes something else
    than this layer: refused, as the constructor refuses the same keywords."""
    from fftmatvec.fno import SpectralConv

    key, value = next(iter(option.items()))
    theirs = _neuralop()(3, 4, [6, 8], **option)
    with pytest.raises(FFTMatvecValueError, match=key):
        SpectralConv.from_neuralop(theirs)
    with pytest.raises(FFTMatvecValueError, match=key):
        SpectralConv(3, 4, (6, 8), **option)


def test_from_neuralop_takes_the_neutral_values():
    """The same options at their same-grid, full-precision values are accepted (a scaling of 1
    on every axis, as neuraloperator's FNO passes for its inner blocks) and compute as the
    original."""
    from fftmatvec.fno import SpectralConv

    torch.manual_seed(3)
    theirs = _neuralop()(3, 4, [6, 8], resolution_scaling_factor=1.0,
                         fno_block_precision="full")
    ours = SpectralConv.from_neuralop(theirs)
    x = torch.randn(2, 3, 12, 10)
    with torch.no_grad():
        y_ref, y = theirs(x), ours(x)
    assert y.shape == y_ref.shape and y.dtype == y_ref.dtype
    assert float((y - y_ref).norm() / y_ref.norm()) < 1e-5


@pytest.mark.parametrize("layer", [None, 3, "SpectralConv", torch.nn.Linear(2, 3)])
def test_from_neuralop_needs_a_spectral_conv(layer):
    from fftmatvec.fno import SpectralConv

    with pytest.raises(FFTMatvecTypeError, match="layer must be a neuraloperator SpectralConv"):
        SpectralConv.from_neuralop(layer)


@pytest.mark.parametrize("shape", [(2, 3, 0), (2, 3, 8, 0), (2, 3, 0, 10), (1, 3, 0, 0),
                                   (1, 3, 4, 5, 0)])
def test_zero_size_grid_is_refused(shape):
    """An axis of the grid without points: a clear error naming the input's shape (not
    ``math domain error`` from a cost estimate, nor a complaint about ``n_modes``)."""
    from fftmatvec.fno import SpectralConv

    d = len(shape) - 2
    layer = SpectralConv(3, 4, (4,) * d)
    x = torch.randn(shape)
    with pytest.raises(FFTMatvecValueError, match=r"x: .*at least one point.*" + str(shape[2:])):
        layer(x)

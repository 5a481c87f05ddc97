"""Kernels of random finite-width networks (sk_deq.kernels.montecarlo): symmetric, and PSD where a Gram matrix is."""

from hypothesis import given, settings
from hypothesis import strategies as st

from sk_deq.kernels import monte_carlo_implicit_kernel
from tests._properties import KERNELS, SETTINGS, _check_kernel_function, two_samples


@settings(max_examples=20, **SETTINGS)
@given(XY=two_samples(), activation=st.sampled_from(["relu", "tanh"]), kernel=st.sampled_from(KERNELS))
def test_monte_carlo_kernel_of_one_network_is_symmetric_and_psd(XY, activation, kernel):
    kw = dict(kernel=kernel, tau0=1.0, n_hidden=64, random_state=0)
    # a Gram matrix of features is PSD; the NTK's elementwise quotient need not be at finite width
    _check_kernel_function(
        lambda A, B: monte_carlo_implicit_kernel(A, activation, 0.2, Y=B, **kw), *XY, rtol=1e-9, psd=kernel != "ntk"
    )

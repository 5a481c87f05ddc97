"""The four equations, the NTK coefficients and the explicit recursion.

Three independent checks:

* closed forms (ReLU) and the defining identities;
* finite differences of exact infinite-width kernel *entries*: the
  coefficients are the Taylor coefficients of a kernel entry in
  ``(x^T y, ||x||^2, ||y||^2)`` around ``(0, tau0^2, tau0^2)``;
* random finite-width networks (Monte Carlo, autograd).
"""

import math

import numpy as np
import pytest

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sk_deq.activations import HardTanh, LeakyReLU, Quadratic, get_activation
from sk_deq.theory import (
    KernelCoefficients,
    deq_ck_coefficients,
    deq_ntk_coefficients,
    explicit_coefficients,
    explicit_kernel_entry,
    implicit_kernel_entry,
    tau_fixed_point,
)
from tests._properties import ANY_FLOATS, SETTINGS, _clear_error_or_finite

ACTS = ["relu", "tanh", "erf", "sigmoid", "gelu", "silu", "softplus", "elu", "leaky_relu"]


def taylor_coefficients(entry, tau0, eps=2e-2):
    """(linear, norm, inner, diagonal, diagonal slope) of a kernel entry by central differences."""
    s = tau0**2
    lin = (entry(s, s, eps) - entry(s, s, -eps)) / (2 * eps)
    inner = (entry(s, s, eps) + entry(s, s, -eps) - 2 * entry(s, s, 0.0)) / (2 * eps**2)
    norm = (
        entry(s + eps, s + eps, 0)
        - entry(s + eps, s - eps, 0)
        - entry(s - eps, s + eps, 0)
        + entry(s - eps, s - eps, 0)
    ) / (4 * eps**2)
    diag = entry(s, s, s)
    slope = (entry(s + eps, s + eps, s + eps) - entry(s - eps, s - eps, s - eps)) / (2 * eps)
    return lin, norm, inner, diag, slope


# ---------------------------------------------------------------------------
# (E0)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("sigma_a2,tau0", [(0.2, 1.0), (0.5, 0.6), (0.9, 2.0)])
def test_tau_solves_E0(act, sigma_a2, tau0):
    tau = tau_fixed_point(act, sigma_a2, tau0)
    var = get_activation(act).moments(tau).var
    assert tau**2 == pytest.approx(sigma_a2 * var + (1 - sigma_a2) * tau0**2, rel=1e-11)


def test_tau_relu_closed_form():
    # Var_t[relu] = t^2 (pi - 1) / (2 pi), so tau^2 = sb tau0^2 / (1 - sa (pi - 1) / (2 pi))
    sa, t0 = 0.2, 1.3
    expected = math.sqrt((1 - sa) * t0**2 / (1 - sa * (math.pi - 1) / (2 * math.pi)))
    assert tau_fixed_point("relu", sa, t0) == pytest.approx(expected, rel=1e-12)
    assert deq_ck_coefficients("relu", sa, t0, sigma_b2=0.5).tau == pytest.approx(
        math.sqrt(0.5 * t0**2 / (1 - sa * (math.pi - 1) / (2 * math.pi))), rel=1e-12
    )


def simulate_deq(X, activation, sigma_a2, m, rng, center, iters=300):
    """A plain finite-width DEQ by fixed-point iteration (independent of sk_deq.kernels)."""
    act = get_activation(activation)
    A = rng.standard_normal((m, m))
    U = math.sqrt(1 - sigma_a2) * rng.standard_normal((m, X.shape[1])) @ X.T
    Z = np.zeros((m, X.shape[0]))
    for _ in range(iters):
        H = math.sqrt(sigma_a2) * A @ Z + U
        Z_new = (act(H) - center) / math.sqrt(m)
        if np.max(np.abs(Z_new - Z)) < 1e-10:
            break
        Z = Z_new
    return Z_new, H


@pytest.mark.parametrize("act", ["relu", "tanh", "gelu"])
def test_tau_and_centring_match_a_random_deq(act):
    """tau^2 is the pre-activation variance of a wide DEQ at ||x|| = tau0, and phi is centred there."""
    rng = np.random.default_rng(0)
    sa, t0, m, n = 0.3, 1.2, 3000, 40
    c = deq_ck_coefficients(act, sa, t0)
    X = rng.standard_normal((n, 50))
    X *= t0 / np.linalg.norm(X, axis=1, keepdims=True)
    Z, H = simulate_deq(X, act, sa, m, rng, c.moments.mean)
    assert np.mean(H**2) == pytest.approx(c.tau**2, rel=0.02)
    assert abs(np.mean(Z) * math.sqrt(m)) < 0.02  # features centred
    assert np.mean(np.sum(Z**2, axis=0)) == pytest.approx(c.moments.var, rel=0.02)


def test_tau_iteration_diverges_for_fast_growing_activation():
    # phi0 = x^2: tau^2 = 2 sa tau^4 + sb tau0^2 has no solution when 8 sa sb tau0^2 > 1
    with pytest.raises(ValueError, match=r"diverges.*smaller sigma_a2"):
        tau_fixed_point(lambda x: x**2, 0.5, 2.0)
    # ... and a solution when it is small
    tau = tau_fixed_point(lambda x: x**2, 0.05, 1.0)
    assert tau**2 == pytest.approx(2 * 0.05 * tau**4 + 0.95, rel=1e-10)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5, np.nan, np.inf])
def test_sigma_a2_outside_unit_interval_is_rejected(bad):
    with pytest.raises(ValueError, match=r"sigma_a2 must lie in the open interval \(0, 1\)"):
        deq_ck_coefficients("relu", bad, 1.0)


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
def test_bad_tau0_is_rejected(bad):
    with pytest.raises(ValueError, match="tau0 must be positive and finite"):
        deq_ck_coefficients("relu", 0.2, bad)
    with pytest.raises(ValueError, match="tau0"):
        explicit_coefficients(["relu"], bad)


def test_type_errors_are_clear():
    with pytest.raises(TypeError, match="sigma_a2 must be a real number"):
        deq_ck_coefficients("relu", "big", 1.0)
    with pytest.raises(ValueError, match="Unknown activation"):
        deq_ck_coefficients("rellu", 0.2, 1.0)
    with pytest.raises(ValueError, match="sigma_b2"):
        deq_ck_coefficients("relu", 0.2, 1.0, sigma_b2=-1.0)


def test_non_contracting_recursion_is_reported():
    # A steep linear activation already breaks (E0) ...
    with pytest.raises(ValueError, match="diverges"):
        deq_ck_coefficients(LeakyReLU(3.0, 3.0), 0.2, 1.0)
    # ... while sin(5x) has a bounded variance (tau converges) but E[phi'^2] ~ 12.5,
    # so the NTK recursion (1 - sigma_a2 d) does not contract.
    wiggle = get_activation(lambda x: np.sin(5 * x))
    assert deq_ck_coefficients(wiggle, 0.2, 1.0).tau > 0
    with pytest.raises(ValueError, match=r"not contracting.*sigma_a2 \* d.*smaller sigma_a2"):
        deq_ntk_coefficients(wiggle, 0.2, 1.0)


# ---------------------------------------------------------------------------
# (E1)-(E4)


def test_four_equations_relu_closed_form():
    sa, sb, t0 = 0.2, 0.8, 1.0
    c = deq_ck_coefficients("relu", sa, t0)
    g1, g2, g4 = 0.25, 1 / (2 * math.pi * c.tau**2), (math.pi - 1) / math.pi
    a1 = sb / (1 - sa * g1)
    a4 = sb / (1 - sa * g4 / 2)
    assert c.alpha1 == pytest.approx(a1, rel=1e-12)
    assert c.alpha4 == pytest.approx(a4, rel=1e-10)
    assert c.alpha2 == pytest.approx(sa * g2 * a4**2 / (4 * (1 - sa * g1)), rel=1e-10)
    assert c.alpha3 == pytest.approx(sa * g2 * a1**2 / (2 * (1 - sa * g1)), rel=1e-10)


@pytest.mark.parametrize("act", ["relu", "tanh", "gelu"])
def test_four_equations_are_the_taylor_coefficients_of_the_exact_implicit_ck(act):
    sa, t0 = 0.2, 1.1
    c = deq_ck_coefficients(act, sa, t0)
    lin, norm, inner, diag, slope = taylor_coefficients(lambda a, b, x: implicit_kernel_entry(act, sa, t0, a, b, x), t0)
    assert lin == pytest.approx(c.alpha1, rel=1e-5)
    assert diag == pytest.approx(c.tau**2, rel=1e-10)
    assert slope == pytest.approx(c.alpha4, rel=1e-5)
    # second-order coefficients (zero for odd tanh); FD error is O(eps^2)
    assert norm == pytest.approx(c.alpha2, rel=2e-3, abs=1e-6)
    assert inner == pytest.approx(c.alpha3, rel=2e-3, abs=1e-6)
    if act != "tanh":  # a wrong constant (e.g. 2 alpha2) would be caught
        assert abs(norm - 2 * c.alpha2) > 0.1 * c.alpha2


def test_exact_implicit_ck_entry_matches_a_random_deq():
    """The per-entry fixed point of the exact Implicit-CK is the limit of sigma_a2 Z^T Z + sigma_b2 X^T X."""
    rng = np.random.default_rng(3)
    sa, m, draws = 0.3, 1500, 6
    X = np.array([[1.1, 0.0, 0.0], [0.5, 0.8, 0.0], [-0.2, 0.3, 0.9]])
    t0 = math.sqrt(np.mean(np.sum(X**2, axis=1)))
    for act in ["relu", "tanh"]:
        c = deq_ck_coefficients(act, sa, t0)
        G = np.zeros((3, 3))
        for _ in range(draws):
            Z, _ = simulate_deq(X, act, sa, m, rng, c.moments.mean)
            G += (sa * Z.T @ Z + (1 - sa) * X @ X.T) / draws
        XX = X @ X.T
        exact = np.array(
            [[implicit_kernel_entry(act, sa, t0, XX[i, i], XX[j, j], XX[i, j]) for j in range(3)] for i in range(3)]
        )
        np.testing.assert_allclose(G, exact, atol=0.01 * np.max(np.abs(exact)))


# ---------------------------------------------------------------------------
# NTK (theory page, 'Implicit-NTK')


@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_ntk_coefficients_are_the_taylor_coefficients_of_the_exact_implicit_ntk(act):
    sa, t0 = 0.2, 1.0
    k = deq_ntk_coefficients(act, sa, t0)
    lin, norm, inner, diag, _ = taylor_coefficients(
        lambda a, b, x: implicit_kernel_entry(act, sa, t0, a, b, x, kernel="ntk"), t0
    )
    assert lin == pytest.approx(k.beta1, rel=1e-4)
    assert diag == pytest.approx(k.kappa**2, rel=1e-10)
    assert norm == pytest.approx(k.beta2, rel=2e-3, abs=1e-6)
    assert inner == pytest.approx(k.beta3, rel=2e-3, abs=1e-6)


def test_ntk_relations_between_ck_and_ntk_quantities():
    k = deq_ntk_coefficients("gelu", 0.3, 0.9)
    c = k.ck
    assert k.a1 == pytest.approx((c.alpha1 - c.sigma_b2) / c.sigma_a2, rel=1e-12)
    assert k.a2 == pytest.approx(c.alpha2 / c.sigma_a2, rel=1e-12)
    assert k.a3 == pytest.approx(c.alpha3 / c.sigma_a2, rel=1e-12)
    assert k.z == pytest.approx((c.tau**2 - c.sigma_b2 * c.tau0**2) / c.sigma_a2, rel=1e-10)
    assert k.kernel().equations()[0] == k.beta1


def test_implicit_ntk_is_the_ntk_of_readout_and_recurrent_weights():
    """K* = Sigma* / (1 - sigma_a2 Sigmadot*) equals the empirical NTK, with respect to the
    readout v and A, of random DEQs differentiated by autograd through unrolled iterations."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    sa, m, draws, iters = 0.2, 300, 10, 40
    X = torch.tensor([[1.0, 0.2, 0.0], [0.1, 0.9, 0.3], [-0.4, 0.2, 0.8]], dtype=torch.float64)
    t0 = float(torch.sqrt(torch.mean(torch.sum(X**2, 1))))
    act = get_activation("tanh")
    center = deq_ck_coefficients(act, sa, t0).moments.mean
    K = torch.zeros(3, 3, dtype=torch.float64)
    for _ in range(draws):
        A = torch.randn(m, m, dtype=torch.float64, requires_grad=True)
        B = torch.randn(m, 3, dtype=torch.float64)
        v = torch.randn(m, dtype=torch.float64, requires_grad=True)
        grads = []
        for x in X:
            z = torch.zeros(m, dtype=torch.float64)
            for _ in range(iters):
                z = (act.torch(math.sqrt(sa) * A @ z + math.sqrt(1 - sa) * B @ x) - center) / math.sqrt(m)
            gA, gv = torch.autograd.grad(v @ z, (A, v))
            grads.append(torch.cat([gA.ravel(), gv]))
        Gm = torch.stack(grads)
        K += Gm @ Gm.T / draws
    XX = (X @ X.T).numpy()
    exact = np.array(
        [
            [implicit_kernel_entry(act, sa, t0, XX[i, i], XX[j, j], XX[i, j], kernel="ntk") for j in range(3)]
            for i in range(3)
        ]
    )
    np.testing.assert_allclose(K.numpy(), exact, atol=0.04 * np.max(np.abs(exact)))


# ---------------------------------------------------------------------------
# explicit networks (theory page, 'Explicit networks')

EXPLICIT_STACKS = [
    [LeakyReLU(1.215, 0.0048), LeakyReLU(0.945, 0.56)],
    [HardTanh(0.76, 1.2)],
    [Quadratic(0.3, 0.7)],
    ["tanh", "gelu"],
]


@pytest.mark.parametrize("layers", EXPLICIT_STACKS, ids=lambda L: "+".join(map(str, L)))
@pytest.mark.parametrize("kernel,first", [("ck", False), ("ntk", False), ("ntk", True)])
def test_explicit_recursion_gives_the_taylor_coefficients_of_the_exact_kernel(layers, kernel, first):
    t0 = 1.1
    co = explicit_coefficients(layers, t0, ntk_input_layer=first)
    k = co.kernel(kernel)
    lin, norm, inner, diag, _ = taylor_coefficients(
        lambda a, b, x: explicit_kernel_entry(layers, t0, a, b, x, kernel=kernel, ntk_input_layer=first), t0
    )
    assert lin == pytest.approx(k.linear, rel=1e-4)
    assert diag == pytest.approx(k.diagonal, rel=1e-10)
    assert norm == pytest.approx(k.norm, rel=2e-3, abs=1e-7)
    assert inner == pytest.approx(k.inner, rel=2e-3, abs=1e-7)


def test_explicit_recursion_closed_form_one_leaky_layer():
    a, b, t0 = 1.3, 0.2, 0.9
    co = explicit_coefficients([LeakyReLU(a, b)], t0)
    G1, G2 = (a + b) ** 2 / 4, (a - b) ** 2 / (2 * math.pi * t0**2)
    assert (co.a1, co.a2, co.a3) == pytest.approx((G1, G2 / 4, G2 / 2), rel=1e-12)
    var = t0**2 * ((a * a + b * b) * (math.pi - 1) + 2 * a * b) / (2 * math.pi)
    assert co.tau**2 == pytest.approx(var, rel=1e-12)
    assert co.taus == (t0,)
    assert co.centers[0] == pytest.approx((a - b) * t0 / math.sqrt(2 * math.pi), rel=1e-12)
    # NTK of one layer with W_1 frozen is the CK; with W_1 trained it adds G1 X^T X and d tau0^2
    assert co.kernel("ntk").equations() == pytest.approx(co.kernel("ck").equations())
    full = explicit_coefficients([LeakyReLU(a, b)], t0, ntk_input_layer=True)
    assert full.b1 == pytest.approx(2 * G1) and full.kappa2 == pytest.approx(var + (a * a + b * b) / 2 * t0**2)


@pytest.mark.parametrize("first", [False, True])
def test_explicit_ntk_matches_autograd_empirical_ntk(first):
    """Empirical NTK by torch.func at finite width, averaged over draws, against the exact kernel."""
    torch = pytest.importorskip("torch")
    from torch.func import functional_call, jacrev, vmap

    torch.manual_seed(1)
    layers = [get_activation("tanh"), LeakyReLU(1.1, 0.3)]
    t0_data = torch.tensor(
        [[1.0, 0.3, -0.2, 0.0], [0.2, -0.8, 0.5, 0.4], [-0.6, 0.1, 0.7, -0.3], [0.3, 0.3, 0.3, 0.9]],
        dtype=torch.float64,
    )
    X = t0_data
    t0 = float(torch.sqrt(torch.mean(torch.sum(X**2, 1))))
    centers = explicit_coefficients(layers, t0).centers
    m, draws = 600, 16

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.W1 = torch.nn.Parameter(torch.randn(m, 4, dtype=torch.float64))
            self.W2 = torch.nn.Parameter(torch.randn(m, m, dtype=torch.float64))
            self.v = torch.nn.Parameter(torch.randn(m, dtype=torch.float64))

        def forward(self, x):
            y = (layers[0].torch(self.W1 @ x) - centers[0]) / math.sqrt(m)
            y = (layers[1].torch(self.W2 @ y) - centers[1]) / math.sqrt(m)
            return self.v @ y

    K = torch.zeros(4, 4, dtype=torch.float64)
    for _ in range(draws):
        net = Net()
        params = {k: v.detach() for k, v in net.named_parameters() if first or k != "W1"}
        jac = vmap(jacrev(lambda p, x, net=net: functional_call(net, p, (x,))), in_dims=(None, 0))(params, X)
        flat = torch.cat([j.reshape(4, -1) for j in jac.values()], dim=1)
        K += flat @ flat.T / draws
    XX = (X @ X.T).numpy()
    exact = np.array(
        [
            [
                explicit_kernel_entry(layers, t0, XX[i, i], XX[j, j], XX[i, j], kernel="ntk", ntk_input_layer=first)
                for j in range(4)
            ]
            for i in range(4)
        ]
    )
    np.testing.assert_allclose(K.detach().numpy(), exact, atol=0.04 * np.max(np.abs(exact)))


def test_explicit_needs_a_layer():
    with pytest.raises(ValueError, match="at least one layer"):
        explicit_coefficients([], 1.0)


def test_kernel_coefficients_identity_and_kernel_name():
    k = KernelCoefficients(0.5, 0.1, 0.2, 1.0, 2.0)
    assert k.identity == pytest.approx(1.0 - 4.0 * 0.5)
    np.testing.assert_allclose(k.equations(), [0.5, 0.1, 0.2, -1.0])
    with pytest.raises(ValueError, match="kernel must be"):
        explicit_coefficients(["relu"], 1.0).kernel("nngp")


@pytest.mark.parametrize("activation", ["relu", "leaky_relu"])
def test_tau_has_the_same_relative_precision_at_every_scale(activation):
    """Positively homogeneous phi: tau is proportional to tau0, to rounding (the stopping rule is relative)."""
    ref = tau_fixed_point(activation, 0.2, 1.0)
    for tau0 in np.logspace(-6, 6, 7):
        assert tau_fixed_point(activation, 0.2, tau0) / tau0 == pytest.approx(ref, rel=1e-13)


@pytest.mark.parametrize("activation", ["tanh", "erf"])
@pytest.mark.parametrize("tau0", [1e4, 1e8, 1e12])
def test_feature_kernel_coefficients_keep_their_precision_at_large_scale(activation, tau0):
    """tanh and erf tend to sign(x) at large tau0, where tau0^2 * linear -> 2/pi and identity -> 1 - 2/pi.

    (alpha1 - sigma_b2) / sigma_a2 and (tau^2 - sigma_b2 tau0^2) / sigma_a2 lose every digit there when
    computed as differences; the coefficients must not.
    """
    fk = deq_ck_coefficients(activation, 0.2, tau0).feature_kernel()
    assert tau0**2 * fk.linear == pytest.approx(2 / math.pi, rel=1e-3)
    assert fk.identity == pytest.approx(1 - 2 / math.pi, rel=1e-3)
    # and exactly consistent with the definitions at a scale where the differences are still accurate
    c = deq_ck_coefficients(activation, 0.2, 1.0)
    f1 = c.feature_kernel()
    assert f1.linear == pytest.approx((c.alpha1 - c.sigma_b2) / c.sigma_a2, rel=1e-13)
    assert f1.diagonal == pytest.approx((c.tau**2 - c.sigma_b2) / c.sigma_a2, rel=1e-12)
    assert c.implicit_kernel().identity == pytest.approx(c.tau**2 - c.alpha1, rel=1e-12)


# -- properties (hypothesis) ---------------------------------------------------------------------------------------


COEFFICIENTS = ["tau", "alpha1", "alpha2", "alpha3", "alpha4"]


NTK_COEFFICIENTS = ["beta1", "beta2", "beta3", "kappa"]


@settings(max_examples=40, **SETTINGS)
@given(
    activation=st.sampled_from(["relu", "tanh", "gelu", "erf", "silu", "softplus", "elu", "sigmoid"]),
    sigma_a2=st.floats(0.02, 0.9),
    log_tau0=st.floats(-3, 3),
    direction=st.sampled_from(["sigma_a2", "tau0"]),
)
def test_theory_coefficients_are_continuous_in_sigma_a2_and_tau0(activation, sigma_a2, log_tau0, direction):
    """A relative step of 1e-7 in either argument moves every coefficient by at most 1e-5 (relative)."""
    tau0 = 10.0**log_tau0
    try:
        a = deq_ntk_coefficients(activation, sigma_a2, tau0)
    except ValueError:
        assume(False)  # this DEQ has no stable kernel; covered by the rejection tests
    h = 1e-7
    s2, t2 = (sigma_a2 * (1 + h), tau0) if direction == "sigma_a2" else (sigma_a2, tau0 * (1 + h))
    b = deq_ntk_coefficients(activation, s2, t2)
    for name in COEFFICIENTS:
        x, y = getattr(a.ck, name), getattr(b.ck, name)
        assert abs(y - x) <= 1e-5 * max(abs(x), 1e-12 * a.ck.tau**2), (name, x, y)
    for name in NTK_COEFFICIENTS:
        x, y = getattr(a, name), getattr(b, name)
        assert abs(y - x) <= 1e-5 * max(abs(x), 1e-12 * a.ck.tau**2), (name, x, y)


@settings(max_examples=60, **SETTINGS)
@given(sigma_a2=ANY_FLOATS, tau0=ANY_FLOATS, activation=st.sampled_from(["relu", "tanh", "gelu", "sigmoid"]))
def test_theory_on_arbitrary_parameters(sigma_a2, tau0, activation):
    def coefficients():
        c = deq_ck_coefficients(activation, sigma_a2, tau0)
        return [c.tau, c.alpha1, c.alpha2, c.alpha3, c.alpha4, *c.feature_kernel().equations()]

    _clear_error_or_finite(coefficients)

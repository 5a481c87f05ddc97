"""Activations: named forms, torch forms, derivatives and the families' closed forms."""

import math
import pickle
import warnings

import numpy as np
import pytest

from sk_deq.activations import ACTIVATIONS, Activation, HardTanh, LeakyReLU, Quadratic, get_activation

FAMILY_CASES = [
    LeakyReLU(1.15, 0.005),
    LeakyReLU(-0.3, 0.8),
    HardTanh(0.76, 1.2),
    HardTanh(2.0, 0.1),
    Quadratic(0.3, 0.8),
    Quadratic(-0.5, 0.0),
]
MOMENT_FIELDS = ("mean", "var", "d1", "d2", "sq_d2", "d1_sq")


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_named_torch_form_equals_numpy_form(name):
    torch = pytest.importorskip("torch")
    act = get_activation(name)
    x = np.linspace(-5, 5, 101)
    got = act.torch(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(got, act(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("act", FAMILY_CASES, ids=repr)
def test_family_torch_form_equals_numpy_form(act):
    torch = pytest.importorskip("torch")
    x = np.linspace(-5, 5, 101)
    np.testing.assert_allclose(act.torch(torch.as_tensor(x)).numpy(), act(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_named_derivative_matches_autograd(name):
    torch = pytest.importorskip("torch")
    act = get_activation(name)
    x = torch.linspace(-4, 4, 97, dtype=torch.float64).requires_grad_(True)
    (grad,) = torch.autograd.grad(act.torch(x).sum(), x)
    keep = np.abs(x.detach().numpy()) > 1e-9  # skip the kink
    np.testing.assert_allclose(act.derivative(x.detach().numpy())[keep], grad.numpy()[keep], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("act", FAMILY_CASES, ids=repr)
@pytest.mark.parametrize("t", [0.2, 1.0, 3.7])
def test_family_closed_forms_match_quadrature_engine(act, t):
    closed = act.moments(t)
    generic = Activation.moments(act, t)  # the engine, bypassing the closed form
    for field in MOMENT_FIELDS:
        assert getattr(closed, field) == pytest.approx(getattr(generic, field), rel=1e-10, abs=1e-12), field


@pytest.mark.parametrize("act", FAMILY_CASES[:5], ids=repr)
def test_family_closed_forms_match_monte_carlo(act):
    """Independent of the engine: sampled moments (5 standard errors)."""
    rng = np.random.default_rng(1)
    t = 0.9
    x = t * rng.standard_normal(2_000_000)
    m = act.moments(t)
    fx = act(x)
    for value, sample in [(m.mean, fx), (m.var, (fx - fx.mean()) ** 2), (m.d1_sq, act.derivative(x) ** 2)]:
        se = sample.std() / math.sqrt(len(x))
        assert abs(value - sample.mean()) < 5 * se + 1e-12
    # Stein: E[sigma'] = E[x sigma(x)] / t^2 and E[(sigma^2)''] = E[(x^2/t^2 - 1) sigma_c(x)^2] / t^2
    s1 = x * fx / t**2
    assert abs(m.d1 - s1.mean()) < 5 * s1.std() / math.sqrt(len(x))
    s4 = (x**2 / t**2 - 1) * (fx - m.mean) ** 2 / t**2
    assert abs(m.g4 - s4.mean()) < 5 * s4.std() / math.sqrt(len(x))


def test_relu_moments_closed_form():
    m = get_activation("relu").moments(2.0)
    assert m.mean == pytest.approx(2.0 / math.sqrt(2 * math.pi), rel=1e-13)
    assert m.var == pytest.approx(4.0 * (math.pi - 1) / (2 * math.pi), rel=1e-12)
    assert m.g1 == pytest.approx(0.25, rel=1e-13)
    assert m.g2 == pytest.approx(1 / (2 * math.pi * 4.0), rel=1e-11)
    assert m.g4 == pytest.approx((math.pi - 1) / math.pi, rel=1e-11)
    assert m.d == pytest.approx(0.5, rel=1e-13)


@pytest.mark.parametrize(
    "name,odd",
    [("tanh", True), ("erf", True), ("sigmoid", True), ("relu", False), ("gelu", False), ("softplus", False)],
)
def test_oddness(name, odd):
    act = get_activation(name)
    assert act.odd is odd
    # detection from the function alone agrees with the declared flag
    assert Activation(act._func).odd is odd
    if odd:
        m = act.moments(1.3)
        assert m.d2 == 0.0 and m.mean == pytest.approx(float(act(np.zeros(1))[0]))


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_centring_constant_centres(name):
    act = get_activation(name)
    t = 0.8
    c = act.mean(t)
    rng = np.random.default_rng(2)
    x = t * rng.standard_normal(1_000_000)
    centred = act(x) - c
    assert abs(centred.mean()) < 5 * centred.std() / 1000 + 1e-12


def test_user_callable_uses_numeric_derivative():
    act = Activation(lambda x: np.sin(x) + 0.1 * x**2, name="wiggle")
    x = np.linspace(-3, 3, 31)
    np.testing.assert_allclose(act.derivative(x), np.cos(x) + 0.2 * x, rtol=1e-8, atol=1e-9)
    m = act.moments(1.0)
    assert m.d1 == pytest.approx(math.exp(-0.5), rel=1e-10)  # E[cos(xi)] + 0.2 E[xi]
    assert act.name == "wiggle" and not act.odd


def test_names_and_aliases():
    assert get_activation("swish") is get_activation("silu")
    assert get_activation("ReLU") is get_activation("relu")
    act = HardTanh(1.0, 2.0)
    assert get_activation(act) is act
    wrapped = get_activation(np.tanh)
    assert isinstance(wrapped, Activation) and wrapped.odd


def test_unknown_name_lists_known_names():
    with pytest.raises(ValueError, match=r"Unknown activation 'relux'.*gelu.*tanh"):
        get_activation("relux")
    with pytest.raises(TypeError, match="name, an Activation or a callable"):
        get_activation(3.0)
    with pytest.raises(TypeError, match="callable"):
        Activation(3.0)


def test_moments_reject_bad_scale_and_overflow():
    with pytest.raises(ValueError, match="positive"):
        get_activation("tanh").moments(0.0)
    with pytest.raises(ValueError, match="positive"):
        LeakyReLU().moments(-1.0)
    blowup = Activation(lambda x: np.exp(x * x), name="blowup")
    with np.errstate(over="ignore"), pytest.raises(ValueError, match="not finite"):
        blowup.moments(3.0)


def test_hard_tanh_needs_positive_threshold():
    with pytest.raises(ValueError, match="threshold"):
        HardTanh(1.0, 0.0)


@pytest.mark.parametrize("act", list(ACTIVATIONS.values()) + FAMILY_CASES, ids=repr)
def test_pickle_round_trip(act):
    back = pickle.loads(pickle.dumps(act))
    assert back == act
    x = np.linspace(-2, 2, 9)
    np.testing.assert_array_equal(back(x), act(x))


def test_family_repr_and_params():
    assert repr(LeakyReLU(1.5, 0.25)) == "LeakyReLU(a=1.5, b=0.25)"
    assert Quadratic(0.1, 0.9).params == {"c2": 0.1, "c1": 0.9}
    assert repr(get_activation("tanh")) == "Activation('tanh')"


# ---------------------------------------------------------------------------
# numpy and torch callables


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("make", [lambda t: t.sin, lambda t: np.sin, lambda t: t.nn.functional.silu])
def test_numpy_and_torch_callables_give_the_same_activation(make):
    torch = _torch()
    act = get_activation(make(torch))
    x = np.linspace(-3, 3, 41)
    ref = np.sin(x) if act.name == "sin" else x / (1 + np.exp(-x))
    np.testing.assert_allclose(act(x), ref, rtol=1e-14, atol=1e-15)
    # derivative: autograd (torch) or the torch twin of a numpy ufunc, checked against the closed form
    dref = np.cos(x) if act.name == "sin" else (1 + np.exp(-x) + x * np.exp(-x)) / (1 + np.exp(-x)) ** 2
    np.testing.assert_allclose(act.derivative(x), dref, rtol=1e-7, atol=1e-9)
    t = torch.from_numpy(x).requires_grad_()
    act.torch(t).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), dref, rtol=1e-12, atol=1e-14)


def test_torch_callable_derivative_comes_from_autograd_exactly():
    torch = _torch()
    act = get_activation(torch.sin)
    x = np.linspace(-3, 3, 13)
    np.testing.assert_allclose(act.derivative(x), np.cos(x), rtol=1e-15, atol=1e-16)
    # and the moments agree with the numpy form's: E[sin'(t xi)] = exp(-t^2 / 2)
    assert act.moments(1.3).d1 == pytest.approx(math.exp(-(1.3**2) / 2), rel=1e-12)
    assert act.moments(1.3).d1 == pytest.approx(get_activation(np.sin).moments(1.3).d1, rel=1e-12)


def test_torch_module_activation_matches_the_named_one():
    torch = _torch()
    from sk_deq.theory import deq_ck_coefficients

    a = deq_ck_coefficients(torch.nn.GELU(), 0.2, 1.0)
    b = deq_ck_coefficients("gelu", 0.2, 1.0)
    for name in ("tau", "alpha1", "alpha2", "alpha3", "alpha4"):
        assert getattr(a, name) == pytest.approx(getattr(b, name), rel=1e-10)


def test_numpy_ufunc_uses_its_torch_twin_without_deprecation_warnings():
    torch = _torch()
    act = get_activation(np.sin)
    t = torch.linspace(-2, 2, 9, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # np.sin on a tensor warned about __array_wrap__ before
        y = act.torch(t)
    assert y.requires_grad  # stays in autograd (np.sin on a grad tensor raised a RuntimeError before)
    y.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), np.cos(t.detach().numpy()), rtol=1e-6)


def test_numpy_only_callable_goes_through_numpy_with_its_derivative_as_gradient():
    torch = _torch()
    act = Activation(lambda x: np.where(x > 0, x, 0.1 * x), breakpoints=(0.0,))
    t = torch.tensor([-2.0, -0.5, 0.5, 2.0], dtype=torch.float64, requires_grad=True)
    y = act.torch(t)
    np.testing.assert_allclose(y.detach().numpy(), [-0.2, -0.05, 0.5, 2.0])
    y.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [0.1, 0.1, 1.0, 1.0], rtol=1e-8)
    # float32 in, float32 out
    assert act.torch(torch.ones(3, dtype=torch.float32)).dtype == torch.float32


def test_callables_that_take_neither_arrays_nor_tensors_are_clear_errors():
    _torch()
    with pytest.raises(TypeError, match="accepts neither a numpy array nor a torch tensor"):
        get_activation(lambda x: x.no_such_method()).moments(1.0)
    with pytest.raises(TypeError, match="same shape"):
        get_activation(lambda x: 1.0 if np.ndim(x) == 0 else np.float64(x.sum())).moments(1.0)

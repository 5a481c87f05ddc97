"""The named activations and the families: numpy and torch forms, derivatives, moments and closed forms."""

import math
import pickle

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


# The families' in-place torch forms (``_torch_inplace``: no autograd, over the pre-activations' buffer; the
# networks' no-grad forward) against their torch forms: the same values to the last bit, at every element
# position (widths with and without vector tails, one and two threads), special values included.
@pytest.mark.parametrize("act", [*FAMILY_CASES, LeakyReLU(1.0, 0.0), LeakyReLU(0.7, -1.3), Quadratic(0.0, 1.0)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
def test_family_in_place_forms_give_the_torch_forms_bits(act, dtype, threads):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype)
    tiny = torch.finfo(dtype).tiny
    special = torch.tensor([0.0, -0.0, 1.0, -1.0, float("inf"), -float("inf"), float("nan"), tiny, -tiny / 4, 1e30])
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for width in (7, 100, 1024, 4097):
            x = 3 * torch.randn(16, width, generator=torch.Generator().manual_seed(width), dtype=dtype)
            x[0, : len(special)] = special[:width].to(dtype)
            x[1, :: max(width // 7, 1)] = act.c if isinstance(act, HardTanh) else 0.0  # at the breakpoints
            expected = act.torch(x)
            buffer = x.clone()
            out = act._torch_inplace(buffer)
            assert out is buffer  # written over the pre-activations: no new tensor
            np.testing.assert_array_equal(out.numpy(), expected.numpy(), err_msg=f"width {width}")
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_named_in_place_forms_give_the_torch_forms_bits_on_special_values(name, dtype):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype)
    tiny = torch.finfo(dtype).tiny
    x = torch.tensor(
        [0.0, -0.0, float("inf"), -float("inf"), float("nan"), tiny, -tiny, 30.0, -30.0, 1e-3], dtype=dtype
    )
    x = torch.cat([x, 3 * torch.randn(1000, generator=torch.Generator().manual_seed(0), dtype=dtype)])
    act = get_activation(name)
    np.testing.assert_array_equal(act._torch_inplace(x.clone()).numpy(), act.torch(x).numpy())

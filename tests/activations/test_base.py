"""Activation around a user's callable: numpy and torch callables, their derivatives and their errors."""

import math
import warnings

import numpy as np
import pytest

from sk_deq.activations import Activation, get_activation


def test_user_callable_uses_numeric_derivative():
    act = Activation(lambda x: np.sin(x) + 0.1 * x**2, name="wiggle")
    x = np.linspace(-3, 3, 31)
    np.testing.assert_allclose(act.derivative(x), np.cos(x) + 0.2 * x, rtol=1e-8, atol=1e-9)
    m = act.moments(1.0)
    assert m.d1 == pytest.approx(math.exp(-0.5), rel=1e-10)  # E[cos(xi)] + 0.2 E[xi]
    assert act.name == "wiggle" and not act.odd


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

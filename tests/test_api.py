"""The public API the five estimators share: signatures and width defaults."""

import inspect

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process.kernels import WhiteKernel

from sk_deq import DEQClassifier, ExplicitClassifier, ImplicitCKTransformer, MatchedExplicitClassifier
from sk_deq.kernels import monte_carlo_implicit_kernel
from sk_deq.transformers import ImplicitCKKernel

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: The parameters that name the model: the only ones that may be given by position.
POSITIONAL = {
    DEQClassifier: ("activation", "sigma_a2"),
    MatchedExplicitClassifier: ("activation", "sigma_a2"),
    ImplicitCKTransformer: ("activation", "sigma_a2"),
    ImplicitCKKernel: ("activation", "sigma_a2"),
    ExplicitClassifier: ("layers",),
}


def _parameters(cls):
    return list(inspect.signature(cls.__init__).parameters.values())[1:]  # without self


@pytest.mark.parametrize("cls", list(POSITIONAL), ids=lambda c: c.__name__)
def test_model_parameters_come_first_and_the_rest_is_keyword_only(cls):
    params = _parameters(cls)
    positional = tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)
    assert positional == POSITIONAL[cls]
    assert [p.name for p in params[: len(positional)]] == list(positional)
    assert all(p.kind is p.KEYWORD_ONLY for p in params[len(positional) :])
    defaults = {p.name: p.default for p in params}
    if "activation" in positional:
        assert defaults["activation"] == "relu" and defaults["sigma_a2"] == 0.2


@pytest.mark.parametrize("cls", [DEQClassifier, MatchedExplicitClassifier, ExplicitClassifier])
def test_a_width_given_by_position_is_refused(cls):
    args = (("relu",), 64) if cls is ExplicitClassifier else ("tanh", 0.3, 64)
    with pytest.raises(TypeError):
        cls(*args)
    est = cls(*args[:-1])
    assert est.get_params()[POSITIONAL[cls][0]] == args[0]
    if cls is not ExplicitClassifier:
        assert est.get_params()["sigma_a2"] == 0.3


def test_width_defaults():
    for cls in (DEQClassifier, MatchedExplicitClassifier, ExplicitClassifier):
        assert cls().n_hidden == 1024
    # the transformer's width is that of a Monte-Carlo kernel estimate (see its docstring)
    mc_default = inspect.signature(monte_carlo_implicit_kernel).parameters["n_hidden"].default
    assert ImplicitCKTransformer().n_hidden == mc_default == 2000


def test_gp_kernel_params_clone_and_theta():
    k = ImplicitCKKernel("tanh", 0.3, sigma_a2_bounds=(0.01, 0.5), kernel="ntk", tau0=0.8, n_jobs=2)
    expected = {
        "activation": "tanh",
        "sigma_a2": 0.3,
        "sigma_a2_bounds": (0.01, 0.5),
        "kernel": "ntk",
        "tau0": 0.8,
        "n_jobs": 2,
    }
    assert k.get_params() == expected
    c = clone(k)
    assert c is not k and c.get_params() == expected and c == k
    t = k.clone_with_theta(np.log([0.25]))
    assert t.sigma_a2 == pytest.approx(0.25)
    assert {n: v for n, v in t.get_params().items() if n != "sigma_a2"} == {
        n: v for n, v in expected.items() if n != "sigma_a2"
    }
    assert (k + WhiteKernel()).get_params()["k1__tau0"] == 0.8
    with pytest.raises(TypeError):
        ImplicitCKKernel("tanh", 0.3, (0.01, 0.5))

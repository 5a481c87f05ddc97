"""The public API the estimators share: signatures, width defaults, activation names."""

import inspect

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process.kernels import WhiteKernel
from sklearn.utils._param_validation import InvalidParameterError

from sk_deq import (
    DEQClassifier,
    DEQRegressor,
    ExplicitClassifier,
    ExplicitRegressor,
    ImplicitCKNystroem,
    ImplicitCKTransformer,
    MatchedExplicitClassifier,
    MatchedExplicitRegressor,
)
from sk_deq._validation import ActivationName
from sk_deq.activations import ACTIVATION_NAMES, get_activation
from sk_deq.kernels import monte_carlo_implicit_kernel
from sk_deq.gaussian_process import ImplicitCKKernel
from tests._networks import NETWORKS

#: The parameters that name the model: the only ones that may be given by position.
POSITIONAL = {
    DEQClassifier: ("activation", "sigma_a2"),
    MatchedExplicitClassifier: ("activation", "sigma_a2"),
    ImplicitCKTransformer: ("activation", "sigma_a2"),
    ImplicitCKNystroem: ("activation", "sigma_a2"),
    ImplicitCKKernel: ("activation", "sigma_a2"),
    ExplicitClassifier: ("layers",),
    DEQRegressor: ("activation", "sigma_a2"),
    MatchedExplicitRegressor: ("activation", "sigma_a2"),
    ExplicitRegressor: ("layers",),
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


@pytest.mark.parametrize("cls", NETWORKS, ids=lambda c: c.__name__)
def test_a_width_given_by_position_is_refused(cls):
    explicit = cls in (ExplicitClassifier, ExplicitRegressor)
    args = (("relu",), 64) if explicit else ("tanh", 0.3, 64)
    with pytest.raises(TypeError):
        cls(*args)
    est = cls(*args[:-1])
    assert est.get_params()[POSITIONAL[cls][0]] == args[0]
    if not explicit:
        assert est.get_params()["sigma_a2"] == 0.3


def test_width_defaults():
    for cls in NETWORKS:
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
        "bias_variance": 1.0,
        "n_jobs": 2,
        "device": None,
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


# -- activation names: any case, aliases included, in every estimator -------------------------------

#: A name in another case or an alias, and the canonical name it stands for.
NAMES = [("ReLU", "relu"), ("TANH", "tanh"), ("Swish", "silu")]


def test_validation_accepts_exactly_the_names_the_lookup_resolves():
    constraint = ActivationName()
    variants = [v for n in ACTIVATION_NAMES for v in (n, n.upper(), n.title(), n.swapcase())]
    for name in [*variants, "ReLU6", "", "re lu", "leaky-relu", "Leaky_ReLU"]:
        try:
            get_activation(name)
            resolves = True
        except ValueError:
            resolves = False
        assert constraint.is_satisfied_by(name) is resolves, name
    assert constraint.is_satisfied_by("Leaky_ReLU") and not constraint.is_satisfied_by("ReLU6")


@pytest.fixture(scope="module")
def digits120():
    """The first 120 of scikit-learn's digits."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:120], y[:120]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # 5 epochs
@pytest.mark.parametrize(("name", "canonical"), NAMES)
@pytest.mark.parametrize("cls", [DEQClassifier, MatchedExplicitClassifier, ExplicitClassifier])
def test_activation_names_in_any_case_in_the_classifiers(cls, name, canonical, digits120):
    X, y = digits120

    def fitted(act):
        model = {"layers": (act, act)} if cls is ExplicitClassifier else {"activation": act}
        return cls(**model, n_hidden=16, max_iter=5, random_state=0).fit(X, y)

    est = fitted(name)  # passes the parameter validation
    ref = fitted(canonical)
    np.testing.assert_array_equal(est.predict_proba(X), ref.predict_proba(X))
    if cls is MatchedExplicitClassifier:
        assert est.match_.activation == canonical


@pytest.mark.parametrize(("name", "canonical"), NAMES)
def test_activation_names_in_any_case_in_the_kernels(name, canonical):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 5)) / 2.0
    for method in ("exact", "linearized", "monte_carlo"):
        params = dict(method=method, random_state=0, **({"n_hidden": 32} if method == "monte_carlo" else {}))
        K = ImplicitCKTransformer(name, **params).fit_transform(X)
        np.testing.assert_array_equal(K, ImplicitCKTransformer(canonical, **params).fit_transform(X))
    np.testing.assert_array_equal(ImplicitCKKernel(name)(X), ImplicitCKKernel(canonical)(X))
    nys = [ImplicitCKNystroem(a, n_components=6, random_state=0).fit_transform(X) for a in (name, canonical)]
    np.testing.assert_array_equal(*nys)


@pytest.mark.parametrize("cls", [DEQClassifier, MatchedExplicitClassifier, ImplicitCKTransformer, ImplicitCKNystroem])
def test_unknown_activation_names_are_refused_in_any_case(cls, digits120):
    X, y = digits120
    with pytest.raises(InvalidParameterError, match="'relu'"):
        cls(activation="ReLU6").fit(X, y)


def test_unknown_layer_names_are_refused(digits120):
    X, y = digits120
    with pytest.raises(ValueError, match="Unknown activation 'ReLU6'"):
        ExplicitClassifier(("ReLU", "ReLU6"), n_hidden=8).fit(X, y)


@pytest.mark.parametrize(
    ("classifier", "regressor"),
    [
        (DEQClassifier, DEQRegressor),
        (MatchedExplicitClassifier, MatchedExplicitRegressor),
        (ExplicitClassifier, ExplicitRegressor),
    ],
    ids=lambda c: c.__name__,
)
def test_a_regressor_has_its_classifiers_parameters_but_the_classification_ones(classifier, regressor):
    """Same names, order and defaults, less ``readout`` and ``class_weight`` (and a larger ``alpha``)."""
    expected = [p for p in _parameters(classifier) if p.name not in ("readout", "class_weight")]
    got = {p.name: p for p in _parameters(regressor)}
    assert [(p.name, p.kind) for p in got.values()] == [(p.name, p.kind) for p in expected]
    for p in expected:
        assert got[p.name].default == (1e-4 if p.name == "alpha" else p.default), p.name

"""Explicit estimators whose kernel matches a DEQ's: :class:`MatchedExplicitClassifier`, :class:`MatchedExplicitRegressor`."""

from __future__ import annotations

from numbers import Real
from typing import ClassVar

from sklearn.utils._param_validation import Interval

from .._param_validation import ActivationName, SortedStrOptions
from .._torch_base import store_params
from .._torch_classifier import TorchClassifierBase
from .._torch_regressor import TorchRegressorBase
from ..activations import get_activation
from ..matching import match_explicit
from ._docs import _matched_doc
from ._explicit import ExplicitNetwork

__all__ = ["MatchedExplicitClassifier", "MatchedExplicitRegressor"]


class _MatchedLayers(ExplicitNetwork):
    """Layers that match the kernel of the DEQ with ``activation`` and ``sigma_a2``."""

    _network_constraints: ClassVar[dict] = {
        "activation": [ActivationName(), callable],
        "sigma_a2": [Interval(Real, 0, 1, closed="neither")],
        "kernel": [SortedStrOptions({"ck", "ntk"})],
        "family": [str, list, tuple],
        "match_tol": [Interval(Real, 0, None, closed="neither"), None],
    }
    # match_tol only accepts or rejects a match: it does not change the network
    _network_params: ClassVar[tuple] = ("activation", "sigma_a2", "kernel", "family")

    def _coefficients(self, tau0):
        # cached by match_explicit: a refit with the same configuration does not solve again
        act = get_activation(self.activation)
        self.match_ = match_explicit(act, self.sigma_a2, tau0, self.kernel, self.family, tol=self.match_tol)
        return self.match_.explicit

    def _describe_layers(self):
        return (
            f"the match of activation={self.activation!r}, sigma_a2={self.sigma_a2!r} is one {self.match_.family} layer"
        )


class MatchedExplicitClassifier(_MatchedLayers, TorchClassifierBase):
    __doc__ = _matched_doc(
        "classifier",
        """    >>> from sklearn.datasets import load_digits
    >>> from sk_deq import MatchedExplicitClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> clf = MatchedExplicitClassifier("relu", 0.2, n_hidden=256, random_state=0)
    >>> clf.fit(X[:1200], y[:1200]).match_.family
    'leaky_relu'
    >>> clf.score(X[1200:], y[1200:]) > 0.85
    True
    """,
    )

    _parameter_constraints: ClassVar[dict] = {
        **TorchClassifierBase._parameter_constraints,
        **_MatchedLayers._network_constraints,
    }

    def __init__(
        self,
        activation="relu",
        sigma_a2=0.2,
        *,
        kernel="ck",
        family="auto",
        match_tol=0.05,
        n_hidden=1024,
        trainable="readout",
        input_scaling="global",
        readout="logistic",
        optimizer="auto",
        learning_rate="auto",
        alpha=1e-5,
        class_weight=None,
        batch_size="auto",
        max_epochs=200,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        improvement_tol=1e-4,
        warm_start=False,
        dtype="float32",
        device="auto",
        random_state=None,
        verbose=0,
    ):
        store_params(self, locals())


class MatchedExplicitRegressor(_MatchedLayers, TorchRegressorBase):
    __doc__ = _matched_doc(
        "regressor",
        """    >>> from sklearn.datasets import make_friedman1
    >>> from sk_deq import MatchedExplicitRegressor
    >>> X, y = make_friedman1(n_samples=1200, random_state=0)
    >>> reg = MatchedExplicitRegressor("relu", 0.2, n_hidden=256, random_state=0)
    >>> reg.fit(X[:1000], y[:1000]).match_.family
    'leaky_relu'
    >>> reg.score(X[1000:], y[1000:]) > 0.8
    True
    """,
    )

    _parameter_constraints: ClassVar[dict] = {
        **TorchRegressorBase._parameter_constraints,
        **_MatchedLayers._network_constraints,
    }

    def __init__(
        self,
        activation="relu",
        sigma_a2=0.2,
        *,
        kernel="ck",
        family="auto",
        match_tol=0.05,
        n_hidden=1024,
        trainable="readout",
        input_scaling="global",
        optimizer="auto",
        learning_rate="auto",
        alpha=1e-4,
        batch_size="auto",
        max_epochs=200,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=10,
        improvement_tol=1e-4,
        warm_start=False,
        dtype="float32",
        device="auto",
        random_state=None,
        verbose=0,
    ):
        store_params(self, locals())

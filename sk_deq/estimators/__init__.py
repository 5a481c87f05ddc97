"""Scikit-learn classifiers and regressors: a DEQ and its shallow explicit equivalents.

- :class:`DEQClassifier`, :class:`DEQRegressor`: the random-feature DEQ (see
  :ref:`theory-deq`) with a linear readout.
- :class:`ExplicitClassifier`, :class:`ExplicitRegressor`: an explicit
  network (see :ref:`theory-explicit`) with the activations you name (the
  unmatched baseline).
- :class:`MatchedExplicitClassifier`, :class:`MatchedExplicitRegressor`: the
  explicit network whose CK or NTK matches a DEQ's (see
  :ref:`theory-matching`), built from :func:`sk_deq.match_explicit` at fit
  time.

Every estimator is a task base (:class:`~sk_deq.estimators._classifier.TorchClassifierBase`
or :class:`~sk_deq.estimators._regressor.TorchRegressorBase`: targets, loss,
predictions) holding its kind of network as a component (``_network``: a
:class:`~sk_deq.estimators._component.Network` that says what defines the
network, computes the theory's constants and builds the feature module), and
all share one fit chain (:mod:`sk_deq.estimators._base`).
With ``trainable='readout'`` (the default and Ling et al.'s (2024) setting) the
random weights are frozen, the features are computed once without a graph
and only the readout is fitted: by full-batch L-BFGS on the cached features
for a classifier, in closed form (least squares) for a regressor.
"""

from ._deq import DEQClassifier, DEQRegressor
from ._explicit import ExplicitClassifier, ExplicitRegressor
from ._matched import MatchedExplicitClassifier, MatchedExplicitRegressor

__all__ = [
    "DEQClassifier",
    "DEQRegressor",
    "ExplicitClassifier",
    "ExplicitRegressor",
    "MatchedExplicitClassifier",
    "MatchedExplicitRegressor",
]

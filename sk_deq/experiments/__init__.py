"""Experiments: the paper's figures as functions.

:func:`spectrum` measures how closely the DEQ's kernels follow their
high-dimensional equivalents and how closely matched explicit networks follow
the DEQ (the paper's Fig. 1-2; the equivalents are stated in :ref:`theory-gmm`
and :ref:`theory-ntk`, the measurements in :ref:`theory-equivalence`, all on the
theory page); :func:`compare_widths` measures accuracy and cost versus width
(Fig. 3).  :func:`sphere_spectrum` runs the experiment of the workshop paper
(a ReLU-DEQ on the unit sphere against one-layer networks with a plain and a
matched quadratic activation, see :ref:`theory-sphere`).

:func:`compare_widths` runs the predictive comparison of the paper's
accuracy-versus-width figure (see :ref:`theory-figures` on the theory page) on
real data: for every data set, activation and
width it fits, on the same stratified train/test split,

- ``"deq"``: :class:`~sk_deq.DEQClassifier` with that activation;
- ``"matched"``: :class:`~sk_deq.MatchedExplicitClassifier`, the shallow
  explicit network whose conjugate kernel matches the DEQ's (two leaky-ReLU
  layers for a ReLU-DEQ, one hard-tanh layer for a Tanh-DEQ);
- ``"plain"``: :class:`~sk_deq.ExplicitClassifier` with the plain activation
  (one layer by default), the unmatched baseline;

all readout-trained (the random weights frozen, the paper's setting), and
records test accuracy and fit+predict wall time; over the repeats it tests
the DEQ's accuracy against the other two models' with the corrected
resampled t-test of :func:`sk_deq.model_selection.corrected_resampled_ttest`.  The result is a
:class:`CompareResult`, which prints as a table, serialises to JSON and is
drawn by :func:`sk_deq.plotting.plot_compare_widths`.  The ``sk-deq compare``
command is a thin wrapper around it; with ``--cv K`` it runs
:func:`cross_validate_widths` instead, the same three models on ``K``
stratified folds through :func:`sk_deq.model_selection.compare_estimators`.

:func:`where_equivalence_ends` measures where the equivalence stops
applying: on a regression target that is steep along one direction of a
``d``-dimensional input, it compares the readout-trained DEQ and its matched
network (:data:`BOUNDARY_MODELS`) with a DEQ whose weights are all trained and
an explicit network with all weights trained and the same parameter count
(:func:`deq_param_count`, :func:`explicit_param_count`,
:func:`matched_width`), recording L∞ and L2 test errors over seeds as the
sharpness grows.  :func:`plot_where_equivalence_ends` draws its
:class:`BoundaryResult`; :ref:`where-equivalence-ends` in the user guide
discusses what it shows.
"""

# One private module per experiment (_compare, _spectrum, _demo, _boundary) and _common for
# what they share; everything public is imported from here.
from . import _boundary, _common, _spectrum
from ._boundary import (
    BoundaryResult,
    deq_param_count,
    explicit_param_count,
    matched_width,
    plot_where_equivalence_ends,
    where_equivalence_ends,
)
from ._common import load_dataset
from ._compare import CompareResult, compare_widths, cross_validate_widths
from ._demo import DemoResult, demo
from ._spectrum import SphereSpectrumResult, SpectrumResult, spectrum, sphere_spectrum

__all__ = [
    "BOUNDARY_MODELS",
    "DATASETS",
    "MODELS",
    "SPECTRUM_ACTIVATIONS",
    "BoundaryResult",
    "CompareResult",
    "DemoResult",
    "SpectrumResult",
    "SphereSpectrumResult",
    "compare_widths",
    "cross_validate_widths",
    "demo",
    "deq_param_count",
    "explicit_param_count",
    "load_dataset",
    "matched_width",
    "plot_where_equivalence_ends",
    "spectrum",
    "sphere_spectrum",
    "where_equivalence_ends",
]

# The constants are bound here, where the documentation finds their comments.

#: Data sets known to :func:`compare_widths` by name, with a description.
DATASETS = _common.DATASETS

#: The three models compared at every width, in table order.
MODELS = _common.MODELS

#: The four contestants of :func:`where_equivalence_ends`, in table order:
#: the readout-trained DEQ and its matched network, the DEQ with all weights
#: trained and an explicit network with all weights trained.
BOUNDARY_MODELS = _boundary.BOUNDARY_MODELS

#: Activations :func:`spectrum` uses by default (the paper's two and two more).
SPECTRUM_ACTIVATIONS = _spectrum.SPECTRUM_ACTIVATIONS

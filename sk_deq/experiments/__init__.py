"""Experiments: Ling et al.'s (2024) figures as functions.

:func:`spectrum` measures how closely the DEQ's kernels follow their
high-dimensional equivalents and how closely matched explicit networks follow
the DEQ (Ling et al.'s (2024) Fig. 1-2; the equivalents are stated in :ref:`theory-gmm`
and :ref:`theory-ntk`, the measurements in :ref:`theory-equivalence`, all on the
theory page); :func:`compare_widths` measures accuracy and cost versus width
(Fig. 3).  :func:`sphere_spectrum` runs the experiment of the workshop paper
(a ReLU-DEQ on the unit sphere against one-layer networks with a plain and a
matched quadratic activation, see :ref:`theory-sphere`).

:func:`compare_widths` runs the predictive comparison of Ling et al.'s (2024)
accuracy-versus-width figure (see :ref:`theory-figures` on the theory page) on
real data: for every data set, activation and
width it fits, on the same stratified train/test split,

- ``"deq"``: :class:`~sk_deq.DEQClassifier` with that activation;
- ``"matched"``: :class:`~sk_deq.MatchedExplicitClassifier`, the shallow
  explicit network whose conjugate kernel matches the DEQ's (two leaky-ReLU
  layers for a ReLU-DEQ, one hard-tanh layer for a Tanh-DEQ);
- ``"plain"``: :class:`~sk_deq.ExplicitClassifier` with the plain activation
  (one layer by default), the unmatched baseline;

all readout-trained (the random weights frozen, the setting of Ling et al.'s (2024)
theory) or, with ``trainable='all'``, trained end to end by minibatch SGD (the
setting of their experiments), and records test accuracy and fit+predict wall
time; over the repeats it tests
the DEQ's accuracy against the other two models' with the corrected
resampled t-test of :func:`sk_deq.model_selection.corrected_resampled_ttest`.
With ``exact_kernel`` it also fits, on the same splits,
:class:`~sk_deq.ImplicitCKRidgeClassifier` with the DEQ's exact kernel:
the entry of infinite width (``'feature'``: the feature kernel, the limit
of the Gram matrix the DEQ's readout sees).  The result is a
:class:`CompareResult`, which prints as a table, serialises to JSON and is
drawn by :func:`sk_deq.plotting.plot_compare_widths`.  The ``sk-deq compare``
command is a thin wrapper around it; with ``--cv K`` it runs
:func:`cross_validate_widths` instead, the same three models on ``K``
stratified folds through :func:`sk_deq.model_selection.compare_estimators`.

The study of where the equivalence ends, :func:`where_equivalence_ends`,
measures the boundary of that equivalence on steep regression targets: the
readout-trained DEQ and its matched network against a DEQ and an explicit
network with all weights trained (the result is a :class:`BoundaryResult`,
drawn by :func:`sk_deq.plotting.plot_where_equivalence_ends`; the run the
user guide's table reads is ``sk-deq boundary --out DIR``);
:ref:`where-equivalence-ends` in the user guide discusses what it shows.
"""

# One private module per experiment (_compare with its _compare_cv, _compare_result and _exact_kernel,
# _spectrum, _sphere, _demo, _boundary with its _boundary_models and _boundary_result) and _common for what
# they share; everything public is imported from here.
from . import _boundary_models, _common, _compare, _exact_kernel, _spectrum
from ._boundary import where_equivalence_ends
from ._boundary_result import BoundaryResult
from ._common import load_dataset
from ._compare import compare_widths
from ._compare_cv import cross_validate_widths
from ._compare_result import CompareResult
from ._demo import DemoResult, demo
from ._spectrum import SpectrumResult, spectrum
from ._sphere import SphereSpectrumResult, sphere_spectrum

__all__ = [
    "BOUNDARY_MODELS",
    "DATASETS",
    "EXACT_KERNELS",
    "EXACT_KERNEL_ALPHAS",
    "MODELS",
    "OFFICIAL_TEST_SIZES",
    "SGD_TRAINING",
    "SPECTRUM_ACTIVATIONS",
    "BoundaryResult",
    "CompareResult",
    "DemoResult",
    "SpectrumResult",
    "SphereSpectrumResult",
    "compare_widths",
    "cross_validate_widths",
    "demo",
    "load_dataset",
    "spectrum",
    "sphere_spectrum",
    "where_equivalence_ends",
]

# The constants are bound here, where the documentation finds their comments.

#: Data sets known to :func:`compare_widths` by name, with a description.
DATASETS = _common.DATASETS

#: The data sets of :data:`DATASETS` with an official test set, and its size.
OFFICIAL_TEST_SIZES = _common.OFFICIAL_TEST_SIZES

#: What ``trainable='all'`` trains with unless ``estimator_params`` say otherwise.
SGD_TRAINING = _compare.SGD_TRAINING

#: The kernels of ``compare_widths(exact_kernel=...)``: the DEQ's feature kernel, Implicit-CK and Implicit-NTK.
EXACT_KERNELS = _exact_kernel.EXACT_KERNELS

#: The candidate ridges of the exact kernel fits of ``compare_widths(exact_kernel=...)``, chosen on a held-out
#: tenth of the training samples.
EXACT_KERNEL_ALPHAS = _exact_kernel.EXACT_KERNEL_ALPHAS

#: The three models compared at every width, in table order.
MODELS = _common.MODELS

#: Activations :func:`spectrum` uses by default (Ling et al.'s (2024) two and two more).
SPECTRUM_ACTIVATIONS = _spectrum.SPECTRUM_ACTIVATIONS

#: The four models of :func:`where_equivalence_ends`, in table order: the readout-trained DEQ and its matched
#: network, the DEQ with all weights trained and an explicit network with all weights trained.
BOUNDARY_MODELS = _boundary_models.BOUNDARY_MODELS

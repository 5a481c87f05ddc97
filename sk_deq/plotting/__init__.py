"""Figures (matplotlib, an optional dependency: ``pip install 'sk_deq[plot]'``).

What every figure shares:

- matplotlib is imported inside the functions, so ``import sk_deq.plotting``
  works without it; calling a function without it raises an ``ImportError``
  that names the ``plot`` extra;
- a figure of an experiment takes its result object or the result's
  ``to_dict()`` (e.g. read back from the JSON that ``sk-deq ... --out``
  writes), and raises a ``TypeError`` that names the result it expects for
  anything else;
- it draws into the axes given, or into a new figure, and returns the figure.
"""

# Figures of comparisons in _compare, of spectra in _spectra, of the study of where the equivalence ends in
# _boundary, what they share in _common.
from . import _compare
from ._boundary import plot_where_equivalence_ends
from ._common import require_matplotlib
from ._compare import plot_compare_widths, plot_paired_scores
from ._spectra import (
    plot_eigenvalue_histograms,
    plot_matched_errors,
    plot_spectrum_errors,
    plot_sphere_errors,
    plot_sphere_spectra,
)

__all__ = [
    "EXACT_KERNEL_STYLE",
    "MODEL_STYLES",
    "plot_compare_widths",
    "plot_eigenvalue_histograms",
    "plot_matched_errors",
    "plot_paired_scores",
    "plot_spectrum_errors",
    "plot_sphere_errors",
    "plot_sphere_spectra",
    "plot_where_equivalence_ends",
    "require_matplotlib",
]

#: Colour, marker and label of every model of :func:`sk_deq.experiments.compare_widths`.
MODEL_STYLES = _compare.MODEL_STYLES

#: Colour and line of the exact kernel's entry of infinite width in :func:`plot_compare_widths`.
EXACT_KERNEL_STYLE = _compare.EXACT_KERNEL_STYLE

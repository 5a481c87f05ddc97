"""sk_deq.nn.train, the one training loop, through its public signature on tiny problems."""

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sk_deq.nn import (
    DEQDivergenceError,
    DEQLayer,
    DEQTrainingDivergenceError,
    TrainingDivergenceError,
    TrainResult,
    train,
)

RECORD_KEYS = {"epoch", "train_loss", "valid_loss", "valid_score", "best", "dur"}


def _blobs(n=90, seed=0, flip=False):
    """Three Gaussian blobs in 4 dimensions (float64); ``flip`` permutes the labels."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    centres = np.array([[2.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 2.0, 0]])
    X = centres[y] + rng.standard_normal((n, 4))
    if flip:
        y = (y + 1) % 3
    return torch.from_numpy(X), torch.from_numpy(y)


def _linear(n_out=3):
    model = torch.nn.Linear(4, n_out, dtype=torch.float64)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    return model


def _objective(model, X, y, alpha=0.0, weight=None):
    """Mean (weighted) cross-entropy plus alpha/2 ||W||^2, computed independently of train."""
    losses = F.cross_entropy(model(X), y, reduction="none")
    w = torch.ones_like(losses) if weight is None else torch.as_tensor(weight, dtype=losses.dtype)
    return (losses * w).sum() / w.sum() + 0.5 * alpha * (model.weight**2).sum()


# -- losses and history -----------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", ["adam", "sgd", "lbfgs"])
def test_training_loss_decreases(optimizer):
    X, y = _blobs()
    model = _linear()
    lr = 0.05 if optimizer == "adam" else 0.1
    res = train(model, X, y, optimizer=optimizer, learning_rate=lr, batch_size=30, max_epochs=30, improvement_tol=0.0)
    losses = [r["train_loss"] for r in res.history]
    assert isinstance(res, TrainResult) and res.n_epochs == len(losses) > 1
    assert losses[-1] < 0.5 * losses[0]
    assert np.mean(np.diff(losses) < 0) > 0.8  # nearly monotone
    assert res.best_loss == min(losses)
    with torch.no_grad():
        assert float(_objective(model, X, y)) < 0.5 * np.log(3)  # zero weights start at log(3)


def test_history_records_every_epoch():
    X, y = _blobs()
    X_val, y_val = _blobs(30, seed=1)
    res = train(_linear(), X, y, X_val=X_val, y_val=y_val, max_epochs=4, learning_rate=0.05, epoch_offset=10)
    assert [r["epoch"] for r in res.history] == [11, 12, 13, 14]
    for rec in res.history:
        assert set(rec) == RECORD_KEYS
        assert rec["dur"] >= 0 and 0.0 <= rec["valid_score"] <= 1.0 and rec["valid_loss"] > 0
    # 'best' marks the epochs that lowered the validation loss
    best, marks = np.inf, []
    for rec in res.history:
        marks.append(rec["valid_loss"] < best)
        best = min(best, rec["valid_loss"])
    assert [r["best"] for r in res.history] == marks
    assert res.best_valid_loss == min(r["valid_loss"] for r in res.history)
    # without a validation set the validation entries are None
    plain = train(_linear(), X, y, max_epochs=2)
    assert all(r["valid_loss"] is None and r["valid_score"] is None for r in plain.history)
    assert plain.best_score is None and plain.best_valid_loss is None


def test_first_epoch_starts_from_the_loss_of_zero_weights():
    X, y = _blobs()
    res = train(_linear(), X, y, optimizer="sgd", learning_rate=1e-9, max_epochs=1)
    assert res.history[0]["train_loss"] == pytest.approx(np.log(3), rel=1e-6)
    # one logit: the logistic loss of the second class
    binary = (y > 0).long()
    res = train(_linear(1), X, binary, optimizer="sgd", learning_rate=1e-9, max_epochs=1)
    assert res.history[0]["train_loss"] == pytest.approx(np.log(2), rel=1e-6)


def test_verbose_prints_one_line_per_epoch():
    X, y = _blobs()
    out = io.StringIO()
    train(_linear(), X, y, max_epochs=3, verbose=1, stream=out)
    rows = [line.split()[0] for line in out.getvalue().splitlines() if line.split() and line.split()[0].isdigit()]
    assert rows == ["1", "2", "3"]
    quiet = io.StringIO()
    train(_linear(), X, y, max_epochs=3, verbose=0, stream=quiet)
    assert quiet.getvalue() == ""


# -- stopping -----------------------------------------------------------------------------------------


def test_patience_on_the_training_loss():
    X, y = _blobs()
    # steps too small to improve the loss by improvement_tol: the first epoch is the best,
    # then n_iter_no_change + 1 epochs without improvement end the training
    res = train(_linear(), X, y, learning_rate=1e-9, n_iter_no_change=3, improvement_tol=1e-4, max_epochs=50)
    assert res.n_epochs == 5
    assert res.converged and res.best_valid_loss is None
    assert "training loss did not improve by 0.0001 for 3 epochs" in res.message


def test_max_epochs_without_convergence():
    X, y = _blobs()
    res = train(_linear(), X, y, learning_rate=0.05, max_epochs=3, improvement_tol=0.0)
    assert res.n_epochs == 3 and not res.converged
    assert res.message == "reached max_epochs=3"


@pytest.mark.parametrize("optimizer", ["adam", "lbfgs"])
def test_early_stopping_keeps_the_epoch_with_the_best_validation_loss(optimizer):
    X, y = _blobs()
    # a validation set whose labels disagree with the training labels: fitting the training
    # data makes the validation loss worse from the first epoch on
    X_val, y_val = _blobs(60, seed=1, flip=True)
    model = _linear()
    res = train(
        model,
        X,
        y,
        X_val=X_val,
        y_val=y_val,
        optimizer=optimizer,
        learning_rate=0.05,
        n_iter_no_change=2,
        max_epochs=100,
    )
    assert res.converged and res.best_valid_loss is not None
    assert res.n_epochs == 4  # the best epoch, then n_iter_no_change + 1 worse ones
    assert "validation loss did not improve" in res.message
    valid = [r["valid_loss"] for r in res.history]
    assert valid[0] == min(valid) == res.best_valid_loss
    assert res.best_score == res.history[0]["valid_score"]
    with torch.no_grad():  # the parameters of that epoch are back in the model
        assert float(_objective(model, X_val, y_val)) == pytest.approx(valid[0], rel=1e-12)
    assert res.best_loss == min(r["train_loss"] for r in res.history) < res.history[0]["train_loss"]


# -- sample weights -----------------------------------------------------------------------------------


def _lbfgs(X, y, **kw):
    model = _linear()
    res = train(model, X, y, optimizer="lbfgs", max_epochs=500, alpha=1e-2, penalized=[model.weight], **kw)
    return model, res


def test_integer_weights_act_as_repeated_rows():
    X, y = _blobs(30)
    w = np.array([1, 2, 0, 3, 1, 1] * 5, dtype=float)
    weighted, _ = _lbfgs(X, y, sample_weight=w, improvement_tol=1e-10)
    rows = np.repeat(np.arange(30), w.astype(int))
    repeated, _ = _lbfgs(X[rows], y[rows], improvement_tol=1e-10)
    for a, b in zip(weighted.parameters(), repeated.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-6)
    # the weights matter: unweighted training gives another model
    unweighted, _ = _lbfgs(X, y, improvement_tol=1e-10)
    assert not np.allclose(unweighted.weight.detach().numpy(), weighted.weight.detach().numpy(), atol=1e-3)


def test_weighted_training_loss_is_the_weighted_mean():
    X, y = _blobs(30)
    w = np.linspace(0.5, 3.0, 30)
    res = train(_linear(), X, y, sample_weight=w, optimizer="sgd", learning_rate=1e-12, max_epochs=1, batch_size=7)
    assert res.history[0]["train_loss"] == pytest.approx(np.log(3), rel=1e-9)  # zero weights: every loss log 3
    model = _linear()
    with torch.no_grad():
        model.weight.copy_(torch.eye(3, 4, dtype=torch.float64))
    with torch.no_grad():
        expected = float(_objective(model, X, y, weight=w))
    res = train(model, X, y, sample_weight=w, optimizer="sgd", learning_rate=1e-12, max_epochs=1, batch_size=30)
    assert res.history[0]["train_loss"] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        (np.ones(5), r"sample weights must have shape \(90,\), got \(5,\)"),
        (-np.ones(90), "finite, non-negative and not all zero"),
        (np.zeros(90), "finite, non-negative and not all zero"),
        (np.full(90, np.nan), "finite, non-negative and not all zero"),
    ],
)
def test_bad_sample_weights(weight, message):
    X, y = _blobs()
    with pytest.raises(ValueError, match=message):
        train(_linear(), X, y, sample_weight=weight, max_epochs=1)


# -- optimizers ---------------------------------------------------------------------------------------


def test_lbfgs_reaches_the_penalised_optimum_and_adam_approaches_it():
    X, y = _blobs()
    alpha = 1e-2
    exact, res = _lbfgs(X, y, improvement_tol=1e-9)
    assert res.converged and res.n_epochs < 500
    # independent check: the gradient of the penalised objective vanishes (the bias is not penalised)
    loss = _objective(exact, X, y, alpha)
    grads = torch.autograd.grad(loss, list(exact.parameters()))
    assert max(float(g.abs().max()) for g in grads) < 1e-4  # 0.55 at the start
    adam = _linear()
    train(
        adam,
        X,
        y,
        optimizer="adam",
        learning_rate=0.05,
        max_epochs=300,
        batch_size=90,
        alpha=alpha,
        penalized=[adam.weight],
        improvement_tol=0.0,
    )
    with torch.no_grad():
        best = float(_objective(exact, X, y, alpha))
        assert best <= float(_objective(adam, X, y, alpha)) < best + 1e-3
        np.testing.assert_allclose(adam.weight.numpy(), exact.weight.numpy(), atol=0.05)


def test_the_penalty_shrinks_only_the_penalised_parameters():
    X, y = _blobs()
    free, _ = _lbfgs(X, y)  # alpha = 1e-2 on the weight
    heavy = _linear()
    train(heavy, X, y, optimizer="lbfgs", max_epochs=500, alpha=10.0, penalized=[heavy.weight])
    assert float(heavy.weight.detach().norm()) < 0.2 * float(free.weight.detach().norm())
    unpenalised = _linear()
    train(unpenalised, X, y, optimizer="lbfgs", max_epochs=500, alpha=10.0, penalized=[])
    assert float(unpenalised.weight.detach().norm()) > float(free.weight.detach().norm())


def test_minibatch_order_comes_from_rng():
    X, y = _blobs()

    def fit(seed):
        model = _linear()
        train(
            model,
            X,
            y,
            learning_rate=0.05,
            batch_size=40,
            max_epochs=2,
            rng=np.random.RandomState(seed),
        )
        return model.weight.detach().numpy()

    a, b, c = fit(0), fit(0), fit(1)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_bad_arguments():
    X, y = _blobs()
    with pytest.raises(ValueError, match="optimizer must be one of"):
        train(_linear(), X, y, optimizer="rmsprop")
    frozen = _linear()
    frozen.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        train(frozen, X, y)


def test_a_diverging_loss_is_an_error():
    X, y = _blobs()
    with pytest.raises(FloatingPointError, match="lower the learning_rate"):
        train(_linear(), X * 1e300, y, optimizer="sgd", learning_rate=1e10, max_epochs=5)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_an_exploding_finite_loss_is_an_error_naming_the_learning_rate(optimizer):
    X, y = _blobs()
    with pytest.raises(TrainingDivergenceError, match=r"grew to .* more than 100 times .*lower the learning_rate"):
        train(_linear(), X, y, optimizer=optimizer, learning_rate=1e4, max_epochs=5)
    assert issubclass(TrainingDivergenceError, FloatingPointError)
    # a step size that converges, and one that overshoots without exploding, train
    for rate in (0.1, 3.0):
        result = train(_linear(), X, y, optimizer=optimizer, learning_rate=rate, max_epochs=20)
        assert all(np.isfinite(h["train_loss"]) for h in result.history)


def test_a_deq_that_diverges_after_steps_blames_the_step_size():
    torch.manual_seed(0)
    X = torch.randn(64, 4, dtype=torch.float64)
    y = X[:, :1] ** 2
    layer = DEQLayer(4, 32, "relu", 0.2, 0.0, train_a=True, dtype=torch.float64)
    model = torch.nn.Sequential(layer, torch.nn.Linear(32, 1, dtype=torch.float64))
    with pytest.raises(DEQTrainingDivergenceError, match=r"after optimizer steps.*lower the learning_rate"):
        train(model, X, y, optimizer="sgd", learning_rate=1e3, loss="squared", max_epochs=5, batch_size=16)
    assert issubclass(DEQTrainingDivergenceError, DEQDivergenceError)
    # diverging at the weights as given (no step taken) is the DEQ's own error, not the step size's
    bad = torch.nn.Sequential(DEQLayer(4, 32, "relu", 0.99, 0.0, train_a=True, dtype=torch.float64))
    with torch.no_grad():
        bad[0].A.mul_(100.0)
    with pytest.raises(DEQDivergenceError) as info:
        train(bad, X, y.repeat(1, 32), optimizer="sgd", loss="squared", max_epochs=1)
    assert not isinstance(info.value, TrainingDivergenceError) and "smaller sigma_a2" in str(info.value)

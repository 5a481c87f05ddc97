"""Full-batch training of a linear readout on cached features.

The readout problem of the random-feature classifiers is convex and small:
minimise over ``W`` (m x k) and ``b`` (k)

.. math::

    L(W, b) = \\frac{1}{n} \\sum_i w_i\\, \\ell(W^\\top z_i + b, y_i) + \\frac{\\alpha}{2} \\|W\\|_F^2,

``l`` the cross-entropy of the softmax (the logistic loss for ``k = 1``)
or, for regression, the squared error ``||W^T z + b - y||^2 / 2``.
Two things make it cheap here:

- :class:`ReadoutObjective` evaluates the loss and its gradient in one pass
  over the rows, with no autograd graph: per chunk of rows one matrix
  product ``Z W`` in the features' dtype gives the logits, the softmax and
  the loss are taken in float64, and the gradient ``Z^T G`` is a second
  product in the features' dtype, accumulated over the chunks in float64.
  Large float32 features are never upcast as a whole: the two products then
  read half the memory of float64 ones, and at ``k`` = 10 columns they are
  bound by memory, not arithmetic.  Small ones (below
  :data:`FLOAT64_BELOW_ENTRIES`) are copied to float64 once.  The products
  are torch's, on torch's threads, on the CPU too (the L-BFGS driver holds
  numpy's BLAS to one thread).
- :func:`fit_readout` runs L-BFGS (:func:`~sk_deq.nn._fit.minimize_lbfgs`:
  scipy's L-BFGS-B on the CPU, a float64 torch L-BFGS with one packed host
  read per evaluation on a GPU) in preconditioned variables
  ``V = R^T [W; b]``, ``R R^T = h Z1^T D Z1 / n + alpha I`` (``Z1`` the
  features with a column of ones, ``D`` the sample weights, ``h`` the
  curvature of the loss at zero): the Hessian at the start becomes about
  the identity, so the iteration count no longer follows the conditioning of
  the features (random features are badly conditioned: their mean and top
  principal directions dwarf the rest).  The stopping rule is unchanged: the
  largest gradient entry in the original variables below ``tol``.
  Whether to precondition depends on the device's costs
  (:func:`use_preconditioner`).

:func:`ridge_readout` is the closed-form alternative: the least-squares
readout, one Gram matrix and one Cholesky solve: on the regression targets
for the squared loss, on one-hot targets (``-1`` / ``1``, as scikit-learn's
``RidgeClassifier``) for the cross-entropy.
"""

from __future__ import annotations

import torch

from .._runtime import on_gpu
from .._validation import check_bool, check_targets
from ._fit import LOSSES, TrainResult, normalised_weights, start_epochs
from ._fit import LBFGSResult, minimize_lbfgs
from .training import train

__all__ = ["LinearReadout", "ReadoutObjective", "fit_readout", "ridge_readout", "train_readout", "use_preconditioner"]

#: Features with fewer entries than this are copied to float64 (products in float64).
FLOAT64_BELOW_ENTRIES = 1 << 20
#: Rows per chunk of the Gram matrix (a weighted chunk is copied).
GRAM_ROWS = 4096
#: :func:`fit_readout` preconditions by default from this many feature entries ``n * m`` ...
PRECONDITION_MIN_ENTRIES = 1 << 20
#: ... up to this many features ``m`` on the CPU ...
PRECONDITION_MAX_FEATURES = 2048
#: ... and on a GPU (see :func:`use_preconditioner`).
PRECONDITION_MAX_FEATURES_GPU = 4096


def use_preconditioner(n: int, m: int, device) -> bool:
    """Whether :func:`fit_readout` preconditions by default, by the device's costs.

    Preconditioning costs a setup, the Gram matrix (``2 n m^2`` FLOPs on the
    float32 features, compute-bound) and its Cholesky factor (``m^3 / 3`` in
    float64), and saves iterations: about three quarters of them on random
    features.  An evaluation reads the features twice (``8 n m`` bytes,
    memory-bound at ``k`` about 10), so the setup costs about
    ``m BW / (4 F)`` evaluations (``F`` the GEMM rate, ``BW`` the memory
    bandwidth): it grows with ``m`` and does not depend on ``n``.  On a CPU
    the ratio ``BW / F`` makes that about ``m / 20`` evaluations, which the
    saved iterations pay for up to :data:`PRECONDITION_MAX_FEATURES`; on a
    GPU about ``m / 50``, plus the host sync and the kernel launches every
    iteration costs, which the saved iterations save too, up to
    :data:`PRECONDITION_MAX_FEATURES_GPU`.  The measurements behind both
    limits are on the benchmarks page (:ref:`bench-defaults`).

    Below :data:`PRECONDITION_MIN_ENTRIES` feature entries an iteration costs
    little either way, and the plain iteration is kept.

    Parameters
    ----------
    n, m : int
        Rows and columns of the features.
    device : str or torch.device
        Where the features live.

    Returns
    -------
    bool
        True to iterate in the preconditioned variables.
    """
    most = PRECONDITION_MAX_FEATURES_GPU if on_gpu(device) else PRECONDITION_MAX_FEATURES
    return n * m >= PRECONDITION_MIN_ENTRIES and m <= most


class LinearReadout(torch.nn.Module):
    """A float64 ``torch.nn.Linear`` applied to features kept in their own dtype.

    Each batch is upcast on the way in, so a float64 copy of cached features
    exists one batch at a time.  Upcasting is exact: the readout sees the
    same numbers as from a float64 copy of all the features.

    Parameters
    ----------
    linear : torch.nn.Linear
        The float64 readout (trained in place).
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.linear = linear

    def forward(self, z):
        """Logits of the features ``z``.

        Parameters
        ----------
        z : torch.Tensor of shape (n, m)
            Features, any floating dtype.

        Returns
        -------
        torch.Tensor of shape (n, k)
            The float64 logits.
        """
        return self.linear(z.to(torch.float64))


def _chunks(n: int, chunk: int | None):
    step = n if not chunk else max(1, int(chunk))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)] if n else []


class ReadoutObjective:
    """Loss and gradient of a linear readout on fixed features, in one pass.

    Parameters
    ----------
    Z : torch.Tensor of shape (n, m)
        Features (float32 or float64), on any device.  Below
        :data:`FLOAT64_BELOW_ENTRIES` entries float32 features are copied to
        float64 once (then the products are exact; above, they are bound by
        memory and float32 halves their time).
    y : torch.Tensor of shape (n,) or (n, k)
        Cross-entropy: integer targets ``0 .. k-1`` (``0`` or ``1`` when
        ``n_outputs`` is 1).  Squared loss: real targets, one column per
        output.
    n_outputs : int
        Number of outputs ``k``; with the cross-entropy, 1 means the
        logistic loss.
    alpha : float, default=0.0
        L2 penalty ``alpha/2 ||W||^2``.
    weight : torch.Tensor of shape (n,), optional
        Sample weights scaled to mean one (the loss is the weighted mean).
    chunk_size : int, optional
        Rows per pass; None takes all rows at once.
    loss : {'cross_entropy', 'squared'}, default='cross_entropy'
        The per-sample loss: the cross-entropy of the softmax (logistic for
        one output), or half the squared error summed over the outputs.

    Examples
    --------
    The gradient agrees with autograd:

    >>> import torch
    >>> from sk_deq.nn.readout import ReadoutObjective
    >>> g = torch.Generator().manual_seed(0)
    >>> Z, y = torch.randn(50, 4, generator=g), torch.randint(0, 3, (50,), generator=g)
    >>> obj = ReadoutObjective(Z, y, 3, alpha=0.1)
    >>> W = torch.randn(4, 3, dtype=torch.float64, generator=g, requires_grad=True)
    >>> b = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    >>> loss, gW, gb = obj(W.detach(), b.detach())
    >>> ref = torch.nn.functional.cross_entropy(Z.double() @ W + b, y) + 0.05 * (W * W).sum()
    >>> ref.backward()
    >>> bool(torch.allclose(gW, W.grad)) and abs(loss - ref.item()) < 1e-6
    True
    """

    def __init__(self, Z, y, n_outputs: int, alpha: float = 0.0, weight=None, chunk_size=None, loss="cross_entropy"):
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {list(LOSSES)}, got {loss!r}.")
        self.loss = loss
        if Z.dtype != torch.float64 and Z.numel() < FLOAT64_BELOW_ENTRIES:
            Z = Z.to(torch.float64)  # small: a float64 copy costs little and makes the products exact
        self.Z, self.y, self.k = Z, y, int(n_outputs)
        self.alpha = float(alpha)
        self.weight = weight
        self.n = int(Z.shape[0])
        self.slices = _chunks(self.n, chunk_size)
        # the Gram matrix's weighted copy of a chunk is rows x m: bounded separately
        self.gram_slices = _chunks(self.n, min(chunk_size or GRAM_ROWS, GRAM_ROWS))
        self.dtype = Z.dtype
        # float64 targets, one column per output: the values themselves, or one-hot labels
        if loss == "squared":
            self.Y = y.to(torch.float64).reshape(self.n, self.k)
        elif self.k > 1:
            self.Y = torch.zeros(self.n, self.k, dtype=torch.float64, device=Z.device)
            self.Y[torch.arange(self.n, device=Z.device), y] = 1.0
        else:
            self.Y = y.to(torch.float64)[:, None]

    def logits(self, W, b, rows=slice(None)):
        """Float64 logits of some rows (the product in the features' dtype).

        Parameters
        ----------
        W, b : torch.Tensor of shapes (m, k) and (k,)
            Readout weights and bias.
        rows : slice, default=slice(None)
            Which rows of the features.

        Returns
        -------
        torch.Tensor of shape (n_rows, k)
            ``Z[rows] W + b`` in float64.
        """
        return (self.Z[rows] @ W.to(self.dtype)).to(torch.float64) + b

    def __call__(self, W, b):
        """Loss and gradients ``(loss, dL/dW, dL/db)`` at ``(W, b)`` (float64 tensors).

        Parameters
        ----------
        W : torch.Tensor of shape (m, k)
            Readout weights.
        b : torch.Tensor of shape (k,)
            Readout bias.

        Returns
        -------
        tuple
            The loss (a float) and the float64 gradients with respect to
            ``W`` and ``b``; :meth:`evaluate` keeps the loss a tensor.
        """
        loss, gW, gb = self.evaluate(W, b)
        return float(loss), gW, gb

    def evaluate(self, W, b):
        """As :meth:`__call__`, the loss a 0-d float64 tensor: nothing is read on the host.

        Parameters
        ----------
        W, b : torch.Tensor of shapes (m, k) and (k,)
            Readout weights and bias.

        Returns
        -------
        tuple
            The loss, ``dL/dW`` and ``dL/db``, float64 tensors on the
            features' device.
        """
        gW = torch.zeros_like(W)
        gb = torch.zeros_like(b)
        total = torch.zeros((), dtype=torch.float64, device=W.device)
        for rows in self.slices:
            G, per = self._residuals(self.logits(W, b, rows), rows)
            total = total + per.sum()
            gW += (G.T.to(self.dtype) @ self.Z[rows]).T.to(torch.float64)
            gb += G.sum(dim=0)
        inv_n = 1.0 / max(self.n, 1)
        gW *= inv_n
        gb *= inv_n
        loss = total * inv_n
        if self.alpha:
            loss = loss + 0.5 * self.alpha * (W * W).sum()
            gW += self.alpha * W
        return loss, gW, gb

    def _residuals(self, L, rows):
        """``dloss/dlogits`` and the per-sample losses (weighted) of the logits ``L`` of ``rows``."""
        Y = self.Y[rows]
        if self.loss == "squared":
            G = L - Y
            per = 0.5 * (G * G).sum(dim=1)
        elif self.k > 1:
            L -= L.amax(dim=1, keepdim=True)
            E = torch.exp(L)
            s = E.sum(dim=1)
            per = torch.log(s) - (L * Y).sum(dim=1)
            G = E / s[:, None]
        else:
            # log(1 + e^l) - y l, and its derivative sigmoid(l) - y
            per = torch.nn.functional.softplus(L[:, 0]) - Y[:, 0] * L[:, 0]
            G = torch.sigmoid(L)
        if self.loss != "squared":
            G -= Y
        if self.weight is not None:
            w = self.weight[rows]
            per = per * w
            G *= w[:, None]
        return G, per

    def gram(self):
        """The weighted second moment of the features with a column of ones.

        Returns
        -------
        torch.Tensor of shape (m + 1, m + 1)
            ``Z1^T D Z1 / n`` in float64, ``Z1 = [Z, 1]`` and ``D`` the
            sample weights.
        """
        m = self.Z.shape[1]
        out = torch.zeros(m + 1, m + 1, dtype=torch.float64, device=self.Z.device)
        for rows in self.gram_slices:
            Zr = self.Z[rows]
            Zw = Zr if self.weight is None else Zr * self.weight[rows, None].to(self.dtype)
            out[:m, :m] += (Zr.T @ Zw).to(torch.float64)  # compute-bound: torch's threads
            out[:m, m] += Zw.sum(dim=0, dtype=torch.float64)
            out[m, m] += self.weight[rows].sum() if self.weight is not None else (rows.stop - rows.start)
        out[m, :m] = out[:m, m]
        out /= max(self.n, 1)
        return out

    def least_squares_targets(self) -> torch.Tensor:
        """The targets of the least-squares readout (:func:`ridge_readout`).

        Returns
        -------
        torch.Tensor of shape (n, k)
            The regression targets for the squared loss; ``-1`` / ``1``
            one-hot targets for the cross-entropy.
        """
        return self.Y if self.loss == "squared" else 2.0 * self.Y - 1.0


class _Preconditioner:
    """``[W; b] = R^{-T} V`` with ``R R^T = h Gram + alpha I`` (Cholesky, float64)."""

    def __init__(self, objective: ReadoutObjective):
        M = objective.gram()
        m = M.shape[0] - 1
        k = objective.k
        if objective.loss != "squared":  # curvature of the loss at zero logits (1 for the squared loss)
            M *= 0.25 if k == 1 else 1.0 / k
        diag = M.diagonal()
        # the penalty on W; a floor keeps the factor well defined when features are
        # collinear (float32 rounding of the Gram is about 1e-7 of its diagonal)
        floor = 1e-6 * float(diag[:m].mean()) if m else 0.0
        diag[:m] += max(objective.alpha, floor)
        diag[m] += floor
        self.R = torch.linalg.cholesky(M)
        self._last: tuple | None = None  # (V, weights) of the last solve on the CPU

    def to_weights(self, V):
        """``R^{-T} V``; on the CPU the last one is kept: L-BFGS's accepted iterate is its last evaluated point,
        whose weights are asked for again (a host comparison, not made on a GPU)."""
        last = self._last
        if last is not None and torch.equal(last[0], V):
            return last[1]
        Wb = torch.linalg.solve_triangular(self.R.T, V, upper=True)
        if V.device.type == "cpu":
            self._last = (V.clone(), Wb)
        return Wb

    def to_variables(self, Wb):
        return self.R.T @ Wb

    def gradient(self, g):
        return torch.linalg.solve_triangular(self.R, g, upper=False)


class _Identity:
    def to_weights(self, V):
        return V

    def to_variables(self, Wb):
        return Wb

    def gradient(self, g):
        return g


def fit_readout(
    linear: torch.nn.Linear,
    objective: ReadoutObjective,
    *,
    max_iter: int = 200,
    tol: float = 1e-4,
    precondition: bool | None = None,
    ftol: float = 2.2e-9,
    callback=None,
    backend: str = "auto",
) -> LBFGSResult:
    """Train ``linear`` (in place) by L-BFGS-B (:func:`~sk_deq.nn._fit.minimize_lbfgs`) on ``objective``.

    Parameters
    ----------
    linear : torch.nn.Linear
        The float64 readout, ``m`` inputs and ``k`` outputs; its current
        weights are the starting point.
    objective : ReadoutObjective
        Loss and gradient on the training features.
    max_iter : int, default=200
        Largest number of L-BFGS iterations.
    tol : float, default=1e-4
        Stop once the largest entry of the gradient (with respect to ``W``
        and ``b``) is at most ``tol``.
    precondition : bool, optional
        Iterate in the preconditioned variables (see the module docstring).
        By default (None) where it pays on the features' device
        (:func:`use_preconditioner`).
    ftol : float, default=2.2e-9
        L-BFGS-B also stops once an iteration reduces the loss by less than
        this fraction (scipy's default).
    callback : callable, optional
        ``callback(loss) -> bool`` after every iteration, once ``linear``
        holds the iterate; True stops the run.
    backend : {'auto', 'scipy', 'torch'}, default='auto'
        The L-BFGS back end (:func:`~sk_deq.nn._fit.minimize_lbfgs`):
        ``'auto'`` runs the torch one on the device of ``linear`` when that
        is not the CPU, with no host round trip but one read of a few
        scalars per evaluation.

    Returns
    -------
    LBFGSResult
        Iterations, evaluations, ``converged`` (a stopping test was met),
        ``message``, ``grad_max`` (the largest gradient entry at the end)
        and ``loss``.
    """
    check_bool(precondition, "precondition", "fit_readout", allow_none=True)
    W0 = linear.weight.detach().T.to(torch.float64)
    b0 = linear.bias.detach().to(torch.float64)
    m, k = W0.shape
    if precondition is None:
        precondition = use_preconditioner(objective.n, m, W0.device)
    pre = _Preconditioner(objective) if precondition else _Identity()

    def weights(v):
        return pre.to_weights(v.reshape(m + 1, k))

    def fun(v):
        Wb = weights(v)
        loss, gW, gb = objective.evaluate(Wb[:m], Wb[m])
        g = torch.cat([gW, gb[None, :]])
        return loss, pre.gradient(g).reshape(-1), g.abs().max() if g.numel() else g.new_zeros(())

    def store(v):
        Wb = weights(v)
        with torch.no_grad():
            linear.weight.copy_(Wb[:m].T)
            linear.bias.copy_(Wb[m])

    def on_iter(v, loss):
        store(v)
        return callback is not None and callback(loss)

    v0 = pre.to_variables(torch.cat([W0, b0[None, :]])).reshape(-1)
    res = minimize_lbfgs(fun, v0, max_iter=max_iter, tol=tol, ftol=ftol, callback=on_iter, backend=backend)
    store(res.x)
    return res


def train_readout(
    linear: torch.nn.Linear,
    Z: torch.Tensor,
    y: torch.Tensor,
    *,
    optimizer: str = "lbfgs",
    sample_weight=None,
    X_val=None,
    y_val=None,
    val_weight=None,
    alpha: float = 0.0,
    max_epochs: int = 200,
    improvement_tol: float = 1e-4,
    chunk_size=None,
    loss: str = "cross_entropy",
    lbfgs_backend: str = "auto",
    **options,
) -> TrainResult:
    """Fit the readout ``linear`` (in place) on the cached features ``Z``, with the history of :func:`train`.

    Parameters
    ----------
    linear : torch.nn.Linear
        The float64 readout; its weights (not its bias) carry the penalty
        ``alpha/2 ||W||^2``.
    Z : torch.Tensor of shape (n, m)
        Features, in any floating dtype (upcast one chunk at a time).
    y : torch.Tensor of shape (n,) or (n, k)
        Targets, as :func:`train` takes them.
    optimizer : {'lbfgs', 'ridge', 'adam', 'sgd'}, default='lbfgs'
        ``'lbfgs'``: :func:`fit_readout`, one iteration per epoch.
        ``'ridge'``: the closed-form least-squares readout
        (:func:`ridge_readout`), recorded as one epoch.  ``'adam'``,
        ``'sgd'``: minibatches, by :func:`train` on a :class:`LinearReadout`.
    sample_weight, X_val, y_val, val_weight, alpha, max_epochs, improvement_tol, chunk_size, loss
        As in :func:`train` (``X_val``: validation features).
    lbfgs_backend : {'auto', 'scipy', 'torch'}, default='auto'
        The back end of ``'lbfgs'`` (see :func:`fit_readout`).
    **options
        The other keyword arguments of :func:`train` (``n_iter_no_change``,
        ``verbose``, ``stream``, ``epoch_offset``, and for minibatches
        ``learning_rate``, ``batch_size``, ``rng``, ``torch_optimizer``,
        ``loss_reference``).

    Returns
    -------
    TrainResult
        The history of every epoch and how training ended.
    """
    labels = loss == "cross_entropy"
    y = check_targets(y, len(Z), labels=labels)
    y_val = None if X_val is None or y_val is None else check_targets(y_val, len(X_val), "y_val", labels=labels)
    common = dict(sample_weight=sample_weight, X_val=X_val, y_val=y_val, val_weight=val_weight, alpha=alpha)
    if optimizer in ("adam", "sgd"):
        model = LinearReadout(linear)
        return train(
            model, Z, y, optimizer=optimizer, penalized=[linear.weight], max_epochs=max_epochs,
            improvement_tol=improvement_tol, chunk_size=chunk_size, loss=loss, **common, **options,
        )  # fmt: skip
    for key in ("learning_rate", "batch_size", "rng", "torch_optimizer", "loss_reference"):
        options.pop(key, None)
    epochs = start_epochs(
        LinearReadout(linear), [linear.weight, linear.bias], X_val=X_val, y_val=y_val, val_weight=val_weight,
        improvement_tol=improvement_tol, chunk_size=chunk_size, loss=loss, **options,
    )  # fmt: skip
    weight = normalised_weights(sample_weight, len(Z), Z.device)
    if optimizer == "ridge":
        objective = ReadoutObjective(Z, y, linear.out_features, alpha, weight, chunk_size, loss=loss)
        W, b, value = ridge_readout(objective)
        with torch.no_grad():
            linear.weight.copy_(W.T)
            linear.bias.copy_(b)
        epochs.end(value, epochs.t0)
        epochs.result.converged, epochs.result.message = True, "closed-form least squares"
        return epochs.finish()
    if optimizer != "lbfgs":
        raise ValueError(f"optimizer must be 'lbfgs', 'ridge', 'adam' or 'sgd', got {optimizer!r}.")
    # all rows in one pass: the loss's temporaries are n x k (logits), not n x m
    objective = ReadoutObjective(Z, y, linear.out_features, alpha, weight, loss=loss)
    res = fit_readout(
        linear, objective, max_iter=max_epochs, tol=improvement_tol, callback=epochs.lbfgs_iteration,
        backend=lbfgs_backend,
    )  # fmt: skip
    return epochs.lbfgs_finish(res, improvement_tol)


def ridge_readout(objective: ReadoutObjective) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Closed-form least-squares readout.

    Minimises ``(1/2n) sum_i w_i ||W^T z_i + b - t_i||^2 + (alpha/2) ||W||^2``
    through the Cholesky factor of the weighted Gram matrix (the bias
    unpenalised), with ``t_i`` the regression targets for the squared loss
    and the one-hot targets in ``{-1, 1}`` for the cross-entropy (one column
    for two classes, ``1`` for the second).  For the squared loss this is
    the exact minimiser of ``objective``.

    Parameters
    ----------
    objective : ReadoutObjective
        Features, targets, weights and ``alpha``.

    Returns
    -------
    tuple
        ``W`` of shape (m, k) and ``b`` of shape (k,) (float64 tensors), and
        the minimised objective (a float).
    """
    M = objective.gram()
    m = M.shape[0] - 1
    T = objective.least_squares_targets()
    rhs = torch.zeros(m + 1, T.shape[1], dtype=torch.float64, device=M.device)
    for rows in objective.slices:
        Tr = T[rows] if objective.weight is None else T[rows] * objective.weight[rows, None]
        rhs[:m] += (Tr.T.to(objective.dtype) @ objective.Z[rows]).T.to(torch.float64)
        rhs[m] += Tr.sum(dim=0)
    rhs /= max(objective.n, 1)
    diag = M.diagonal()
    floor = 1e-12 * float(diag[:m].mean()) if m else 0.0
    diag[:m] += max(objective.alpha, floor)
    R = torch.linalg.cholesky(M)
    Wb = torch.cholesky_solve(rhs, R)
    W, b = Wb[:m], Wb[m]
    total = 0.0
    for rows in objective.slices:
        r = objective.logits(W, b, rows) - T[rows]
        per = (r * r).sum(dim=1)
        total += float(per.sum() if objective.weight is None else (per * objective.weight[rows]).sum())
    loss = 0.5 * total / max(objective.n, 1) + 0.5 * objective.alpha * float((W * W).sum())
    return W, b, loss

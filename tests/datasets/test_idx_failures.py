"""The MNIST / Fashion-MNIST fetchers on what goes wrong: an unusable data_home, corrupt files, mirrors that fail.

No test touches the network: the mirrors are folders read through file:// addresses, and the failing ones
are answered by a fake opener put in place of urllib's.
"""

import dataclasses
import gzip
import http.client
import urllib.request

import numpy as np
import pytest

from sk_deq.datasets import _idx, fetch_fashion_mnist, fetch_mnist

from .test_idx import _expect, _fake_files, idx_bytes

FIRST = "https://first-mirror.invalid/data/"  # answered by the fake opener only


class _Response:
    """A response whose body is ``chunks``, then ``error`` (None: its end), as a dropped connection cuts one off.

    Read whole (``read()``), a body cut off raises at once, as http.client's does.
    """

    def __init__(self, chunks, error=None):
        self.chunks, self.error = list(chunks), error

    def read(self, n=-1):
        if n is None or n < 0:
            if self.error is not None:
                raise self.error
            body, self.chunks = b"".join(self.chunks), []
            return body
        if self.chunks:
            return self.chunks.pop(0)
        if self.error is not None:
            raise self.error
        return b""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def mirrors(monkeypatch, tmp_path):
    """Fashion-MNIST's source with a first mirror answered by ``opener.first`` and a second that serves the files."""
    arrays, files = _fake_files(tmp_path / "mirror")
    src = dataclasses.replace(
        _idx._SOURCES["fashion-mnist"],
        files=files,
        urls=(FIRST, (tmp_path / "mirror").as_uri() + "/"),
        system_dirs=(),
    )
    monkeypatch.setitem(_idx._SOURCES, "fashion-mnist", src)
    real = urllib.request.urlopen
    calls = []

    def opener(url, timeout=None):
        calls.append(url)
        if url.startswith(FIRST):
            return opener.first(url)
        assert url.startswith("file:"), f"a test reached for the network: {url}"
        return real(url, timeout=timeout)

    opener.first = lambda url: _Response([b"\x1f\x8b\x08\x00 the first bytes"], http.client.IncompleteRead(b"", 9000))
    opener.calls = calls
    monkeypatch.setattr(_idx.urllib.request, "urlopen", opener)
    return arrays, tmp_path, opener


def _left_in(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


# ---------------------------------------------------------------------------------------------- data_home


def test_a_data_home_that_is_a_file_is_an_error_naming_it(tmp_path):
    home = tmp_path / "home"
    home.write_text("not a folder")
    with pytest.raises(NotADirectoryError, match=r"data_home='.*home' cannot be the data folder: it is a file"):
        fetch_mnist(data_home=home, download_if_missing=False)
    with pytest.raises(NotADirectoryError, match=r"data_home='.*home/sub' cannot be the data folder: .*home is a file"):
        fetch_mnist(data_home=home / "sub", download_if_missing=False)


def test_an_empty_data_home_is_an_error_naming_it(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"data_home='' is empty: pass a folder, or None"):
        fetch_fashion_mnist(data_home="", download_if_missing=False)
    with pytest.raises(ValueError, match=r"data_home=' ' is empty"):
        fetch_fashion_mnist(data_home=" ", download_if_missing=False)
    monkeypatch.setenv("SCIKIT_LEARN_DATA", "")
    with pytest.raises(ValueError, match=r"SCIKIT_LEARN_DATA='' \(data_home=None\) is empty"):
        fetch_mnist(download_if_missing=False)
    monkeypatch.setenv("SCIKIT_LEARN_DATA", str(tmp_path / "env-home"))
    with pytest.raises(FileNotFoundError, match="MNIST was not found"):  # the variable is followed
        fetch_mnist(download_if_missing=False)
    assert (tmp_path / "env-home").is_dir()


@pytest.mark.parametrize("data_home", [3, b"/tmp", ["/tmp"]])
def test_a_data_home_that_is_not_a_path_is_a_type_error(data_home):
    with pytest.raises(TypeError, match=r"data_home must be a folder \(a str or path-like\) or None"):
        fetch_mnist(data_home=data_home, download_if_missing=False)


def test_a_file_in_place_of_the_data_sets_folder_is_an_error_naming_it(tmp_path):
    (tmp_path / "mnist").write_text("not a folder")
    with pytest.raises(NotADirectoryError, match=r"mnist is a file, where the MNIST files are kept"):
        fetch_mnist(data_home=tmp_path)


# ---------------------------------------------------------------------------------------------- corrupt files


def _corrupt(raw: bytes, how: str) -> bytes:
    packed = gzip.compress(raw)
    if how == "cut short":
        return packed[: len(packed) // 2]
    damaged = bytearray(packed)
    for i in range(20, len(damaged) - 10):  # the deflate stream, past the header
        damaged[i] ^= 0x5A
    return bytes(damaged)


@pytest.mark.parametrize("how", ["cut short", "damaged"])
def test_a_corrupt_local_file_is_an_error_naming_it(tmp_path, how):
    home = tmp_path / "home"
    _, files = _fake_files(home / "mnist", n_train=400)
    name = files["train_images"][0]
    path = home / "mnist" / f"{name}.gz"
    path.write_bytes(_corrupt(gzip.decompress(path.read_bytes()), how))
    src = dataclasses.replace(_idx._SOURCES["mnist"], files=files)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(_idx._SOURCES, "mnist", src)
        with pytest.raises(ValueError) as info:
            fetch_mnist(data_home=home, download_if_missing=False)
    msg = str(info.value)
    assert type(info.value) is ValueError  # not zlib.error or EOFError
    assert str(path) in msg and "is corrupt" in msg and "Delete it and fetch again" in msg


def test_a_corrupt_download_moves_on_to_the_next_mirror(mirrors):
    arrays, tmp, opener = mirrors
    raw = idx_bytes(arrays["test_labels"])
    opener.first = lambda url: _Response([_corrupt(raw, "damaged")])
    y = fetch_fashion_mnist(subset="test", data_home=tmp / "home", return_X_y=True)[1]
    np.testing.assert_array_equal(y, _expect(arrays, "test")[1])
    assert not [n for n in _left_in(tmp / "home" / "fashion-mnist") if n.endswith(".part")]


# ---------------------------------------------------------------------------------------------- mirrors


def test_a_download_cut_off_mid_read_tries_the_next_mirror_and_names_it(mirrors):
    arrays, tmp, opener = mirrors
    bunch = fetch_fashion_mnist(subset="all", data_home=tmp / "home")
    X, y = (np.concatenate(v) for v in zip(_expect(arrays, "train"), _expect(arrays, "test")))
    np.testing.assert_array_equal(bunch.data, X)
    np.testing.assert_array_equal(bunch.target, y)
    assert sum(u.startswith(FIRST) for u in opener.calls) == 4  # every file was asked of the first mirror
    assert bunch.source == (tmp / "mirror").as_uri() + "/"  # the mirror that served them, not the first
    assert _left_in(tmp / "home" / "fashion-mnist") == sorted(f"{_idx._NAMES[r]}.gz" for r in _idx._ROLES)


def test_the_source_names_every_place_the_files_came_from(mirrors):
    _, tmp, _ = mirrors
    home = tmp / "home" / "fashion-mnist"
    _fake_files(home)  # the same files (same seed) ...
    (home / f"{_idx._NAMES['train_labels']}.gz").unlink()  # ... but one, which is downloaded
    bunch = fetch_fashion_mnist(subset="train", data_home=tmp / "home")
    assert bunch.source == ", ".join(sorted([str(home), (tmp / "mirror").as_uri() + "/"]))


@pytest.mark.parametrize(
    "error",
    [
        http.client.IncompleteRead(b"abc", 100),
        TimeoutError("timed out"),
        ConnectionResetError(104, "Connection reset by peer"),
        http.client.RemoteDisconnected("Remote end closed connection without response"),
        http.client.BadStatusLine("garbage"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_every_network_error_of_a_mirror_is_that_mirror_failing(mirrors, error):
    arrays, tmp, opener = mirrors
    opener.first = lambda url: _Response([b"\x1f\x8b\x08\x00 some bytes"], error)
    X, _ = fetch_fashion_mnist(subset="test", data_home=tmp / "home", return_X_y=True)
    np.testing.assert_array_equal(X, _expect(arrays, "test")[0])
    assert not [n for n in _left_in(tmp / "home" / "fashion-mnist") if n.endswith(".part")]


def test_when_every_mirror_fails_one_error_lists_each_failure_and_no_file_is_left(mirrors):
    _, tmp, _ = mirrors
    for f in (tmp / "mirror").iterdir():
        f.unlink()
    with pytest.raises(OSError) as info:
        fetch_fashion_mnist(subset="test", data_home=tmp / "home")
    msg = str(info.value)
    name = _idx._NAMES["test_images"]
    assert f"Could not download the Fashion-MNIST file {name}:" in msg
    assert f"{FIRST}{name}.gz: IncompleteRead(0 bytes read, 9000 more expected)" in msg
    assert f"{(tmp / 'mirror').as_uri()}/{name}.gz: <urlopen error" in msg
    assert "download_if_missing=True" in msg  # and the other ways to get the files
    assert _left_in(tmp / "home" / "fashion-mnist") == []


def test_an_interrupted_download_leaves_no_partial_file(mirrors):
    _, tmp, opener = mirrors
    opener.first = lambda url: _Response([b"\x1f\x8b\x08\x00 some bytes"], KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):  # not a mirror failing: the user stopped it
        fetch_fashion_mnist(subset="test", data_home=tmp / "home")
    assert _left_in(tmp / "home" / "fashion-mnist") == []

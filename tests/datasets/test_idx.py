"""The idx reader and the MNIST / Fashion-MNIST fetchers, on small files written here (no network)."""

import dataclasses
import gzip
import hashlib
import struct

import numpy as np
import pytest

from sk_deq.datasets import _idx, fetch_fashion_mnist, fetch_mnist
from sk_deq.datasets._idx import parse_idx

_CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D, np.float64: 0x0E}


def idx_bytes(a: np.ndarray) -> bytes:
    """``a`` in the idx format, written from its definition (magic, big-endian sizes, big-endian data)."""
    header = bytes([0, 0, _CODES[a.dtype.type], a.ndim]) + b"".join(struct.pack(">I", n) for n in a.shape)
    return header + a.astype(a.dtype.newbyteorder(">")).tobytes()


@pytest.mark.parametrize("dtype", list(_CODES))
@pytest.mark.parametrize("shape", [(7,), (3, 2, 4), (0, 5)])
def test_parse_idx_reads_every_type_and_shape(dtype, shape):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal(shape) * 100).astype(dtype)
    out = parse_idx(idx_bytes(a))
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative
    np.testing.assert_array_equal(out, a)


@pytest.mark.parametrize(
    "data,match",
    [
        (b"\x01\x00\x08\x01\x00\x00\x00\x01\x05", "two zero bytes"),
        (b"\x00\x00\x07\x01\x00\x00\x00\x01\x05", "unknown type code 0x07"),
        (b"\x00\x00\x08\x02\x00\x00\x00\x01", "cut short"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x03\x05\x06", "holds 2 bytes of data, but its header promises 3"),
        (b"\x00\x00", "two zero bytes"),
    ],
)
def test_parse_idx_rejects_what_is_not_a_whole_idx_file(data, match):
    with pytest.raises(ValueError, match=match):
        parse_idx(data, "the file")


def _fake_files(folder, n_train=6, n_test=4, *, compress=True, seed=0):
    """Four small idx files (3x2 images) in ``folder``; returns the arrays and a Source describing them."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 3, 2), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, n_train, dtype=np.uint8),
        "test_images": rng.integers(0, 256, (n_test, 3, 2), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for role, a in arrays.items():
        name = _idx._NAMES[role]
        raw = idx_bytes(a)
        if compress:
            (folder / f"{name}.gz").write_bytes(gzip.compress(raw))
        else:
            (folder / name).write_bytes(raw)
        files[role] = (name, hashlib.sha256(raw).hexdigest())
    return arrays, files


@pytest.fixture
def fake_source(monkeypatch, tmp_path):
    """Fashion-MNIST's source pointed at files written here: a 'system' folder and two 'mirrors'."""
    arrays, files = _fake_files(tmp_path / "mirror")
    src = dataclasses.replace(
        _idx._SOURCES["fashion-mnist"],
        files=files,
        urls=((tmp_path / "no-such-mirror").as_uri() + "/", (tmp_path / "mirror").as_uri() + "/"),
        system_dirs=(str(tmp_path / "system"),),
    )
    monkeypatch.setitem(_idx._SOURCES, "fashion-mnist", src)
    return arrays, tmp_path


def _expect(arrays, part):
    X = arrays[f"{part}_images"].reshape(len(arrays[f"{part}_images"]), -1).astype(np.float64)
    return X, arrays[f"{part}_labels"].astype(np.int64)


def test_fetch_from_data_home_keeps_the_official_split(fake_source):
    arrays, tmp = fake_source
    _fake_files(tmp / "home" / "fashion-mnist")  # the same files (same seed) in data_home
    home = tmp / "home"
    for part in ("train", "test"):
        bunch = fetch_fashion_mnist(subset=part, data_home=home, download_if_missing=False)
        X, y = _expect(arrays, part)
        np.testing.assert_array_equal(bunch.data, X)
        np.testing.assert_array_equal(bunch.target, y)
        assert bunch.data.dtype == np.float64 and bunch.target.dtype == np.int64
        assert bunch.subset == part and bunch.source == str(home / "fashion-mnist")
        assert len(bunch.target_names) == 10 and "official" in bunch.DESCR
    X_all, y_all = fetch_fashion_mnist(subset="all", data_home=home, return_X_y=True)
    np.testing.assert_array_equal(X_all, np.concatenate([_expect(arrays, "train")[0], _expect(arrays, "test")[0]]))
    np.testing.assert_array_equal(y_all[:6], _expect(arrays, "train")[1])


def test_fetch_reads_uncompressed_files_and_the_system_folder(fake_source):
    arrays, tmp = fake_source
    _fake_files(tmp / "system", compress=False)
    X, _ = fetch_fashion_mnist(subset="test", data_home=tmp / "empty-home", download_if_missing=False, return_X_y=True)
    np.testing.assert_array_equal(X, _expect(arrays, "test")[0])
    assert not (tmp / "empty-home" / "fashion-mnist").exists()  # nothing downloaded or copied


def test_download_tries_the_mirrors_in_turn_and_keeps_the_files(fake_source):
    arrays, tmp = fake_source
    home = tmp / "home"
    bunch = fetch_fashion_mnist(subset="all", data_home=home)  # the first mirror does not exist
    np.testing.assert_array_equal(bunch.target, np.concatenate([_expect(arrays, p)[1] for p in ("train", "test")]))
    kept = sorted(p.name for p in (home / "fashion-mnist").iterdir())
    assert kept == sorted(f"{_idx._NAMES[r]}.gz" for r in _idx._ROLES)  # no partial files left
    for f in (tmp / "mirror").iterdir():  # the second fetch reads the kept files
        f.unlink()
    again = fetch_fashion_mnist(subset="all", data_home=home, download_if_missing=False)
    np.testing.assert_array_equal(again.data, bunch.data)


def test_a_download_with_the_wrong_contents_is_rejected_and_not_kept(fake_source):
    _, tmp = fake_source
    _fake_files(tmp / "mirror", seed=1)  # other pixels: the published hashes no longer match
    with pytest.raises(OSError, match="SHA-256 of its contents") as info:
        fetch_fashion_mnist(data_home=tmp / "home")
    assert "no-such-mirror" in str(info.value) and "apt-get install dataset-fashion-mnist" in str(info.value)
    assert not any((tmp / "home" / "fashion-mnist").iterdir())


def test_a_local_file_with_the_wrong_contents_is_an_error_naming_it(fake_source):
    _, tmp = fake_source
    _fake_files(tmp / "system", seed=1)
    with pytest.raises(ValueError, match=r"system.*is not the published Fashion-MNIST file.*Delete it"):
        fetch_fashion_mnist(data_home=tmp / "home", download_if_missing=False)


def test_a_missing_data_set_names_every_way_to_get_it(fake_source, monkeypatch):
    _, tmp = fake_source
    with pytest.raises(FileNotFoundError) as info:
        fetch_fashion_mnist(data_home=tmp / "home", download_if_missing=False)
    msg = str(info.value)
    assert "apt-get install dataset-fashion-mnist" in msg and "download_if_missing=True" in msg
    assert str(tmp / "home" / "fashion-mnist") in msg and "t10k-labels-idx1-ubyte.gz" in msg
    src = dataclasses.replace(_idx._SOURCES["mnist"], urls=((tmp / "nowhere").as_uri() + "/",))
    monkeypatch.setitem(_idx._SOURCES, "mnist", src)
    with pytest.raises(OSError, match=r"(?s)Could not download the MNIST file.*download_if_missing=True") as info:
        fetch_mnist(data_home=tmp / "home")
    assert "apt-get" not in str(info.value)  # no package ships MNIST


def test_images_and_labels_that_do_not_fit_together(fake_source, monkeypatch):
    _, tmp = fake_source
    name = _idx._NAMES["train_labels"]
    raw = idx_bytes(np.zeros(5, dtype=np.uint8))  # 5 labels for 6 images
    _fake_files(tmp / "system")
    (tmp / "system" / f"{name}.gz").write_bytes(gzip.compress(raw))
    src = _idx._SOURCES["fashion-mnist"]
    files = {**src.files, "train_labels": (name, hashlib.sha256(raw).hexdigest())}
    monkeypatch.setitem(_idx._SOURCES, "fashion-mnist", dataclasses.replace(src, files=files))
    with pytest.raises(ValueError, match="do not fit together"):
        fetch_fashion_mnist(data_home=tmp / "home", download_if_missing=False)


def test_bad_subset():
    with pytest.raises(ValueError, match="subset must be one of"):
        fetch_mnist(subset="validation")


def test_the_real_fashion_mnist():
    """The published files, where Debian's dataset-fashion-mnist installed them (CI installs it)."""
    try:
        train = fetch_fashion_mnist(subset="train", download_if_missing=False)
        X_test, y_test = fetch_fashion_mnist(subset="test", download_if_missing=False, return_X_y=True)
    except FileNotFoundError as exc:
        pytest.skip(f"Fashion-MNIST is not installed here ({exc})")
    assert train.data.shape == (60000, 784) and X_test.shape == (10000, 784)
    assert np.bincount(train.target).tolist() == [6000] * 10 and np.bincount(y_test).tolist() == [1000] * 10
    assert train.data.min() == 0 and train.data.max() == 255
    assert train.target_names[9] == "Ankle boot"
    # the first training image is an ankle boot (label 9), the first test image too
    assert train.target[0] == 9 and y_test[0] == 9

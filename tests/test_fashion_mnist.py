"""The bundled Fashion-MNIST subset, the IDX reader and loading full IDX files from a directory."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from tinyopt.data.fashion_mnist import CLASSES, FashionMNIST, fashion_mnist, read_idx


def write_idx(path: Path, arr: np.ndarray, type_byte: int = 0x08, compress: bool = False) -> Path:
    header = struct.pack(">BBBB", 0, 0, type_byte, arr.ndim) + struct.pack(f">{arr.ndim}I",
                                                                          *arr.shape)
    be = arr.astype(arr.dtype.newbyteorder(">"))
    data = header + be.tobytes()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def fake_set(n_train=6, n_test=4, seed=0):
    rng = np.random.default_rng(seed)
    return FashionMNIST(rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
                        rng.integers(0, 10, n_train).astype(np.int64),
                        rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
                        rng.integers(0, 10, n_test).astype(np.int64))


def write_set(root: Path, ds: FashionMNIST, compress: bool, sep: str = "-") -> None:
    names = {"x_train": "train-images", "y_train": "train-labels", "x_test": "t10k-images",
             "y_test": "t10k-labels"}
    for field, stem in names.items():
        suffix = "idx3-ubyte" if field.startswith("x") else "idx1-ubyte"
        name = f"{stem}{sep}{suffix}" + (".gz" if compress else "")
        write_idx(root / name, getattr(ds, field).astype(np.uint8), compress=compress)


def test_bundled_subset_shapes_dtypes_and_balance():
    ds = fashion_mnist()
    assert isinstance(ds, FashionMNIST)
    x_train, y_train, x_test, y_test = ds
    assert x_train.shape == (10000, 28, 28) and x_train.dtype == np.uint8
    assert x_test.shape == (2000, 28, 28) and x_test.dtype == np.uint8
    assert y_train.shape == (10000,) and y_train.dtype == np.int64
    assert y_test.shape == (2000,) and y_test.dtype == np.int64
    assert np.bincount(y_train).tolist() == [1000] * 10
    assert np.bincount(y_test).tolist() == [200] * 10
    assert len(CLASSES) == 10 and x_train.max() == 255


def test_bundled_arrays_are_fresh_and_license_ships():
    a, b = fashion_mnist(), fashion_mnist()
    a.x_train[0] = 0
    assert b.x_train[0].any()
    here = Path(fashion_mnist.__code__.co_filename).parent
    license_text = (here / "LICENSE-fashion-mnist.txt").read_text()
    assert "Zalando SE" in license_text and "Permission is hereby granted" in license_text


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("dtype, type_byte", [(np.uint8, 0x08), (np.int8, 0x09),
                                              (np.int16, 0x0B), (np.int32, 0x0C),
                                              (np.float32, 0x0D), (np.float64, 0x0E)])
def test_read_idx_round_trip(tmp_path, compress, dtype, type_byte):
    arr = (np.arange(2 * 3 * 5) - 7).astype(dtype).reshape(2, 3, 5)
    if dtype == np.uint8:
        arr = np.arange(30, dtype=np.uint8).reshape(2, 3, 5)
    out = read_idx(write_idx(tmp_path / "a.idx", arr, type_byte, compress))
    np.testing.assert_array_equal(out, arr)
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative and out.flags.writeable


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("sep", ["-", "."])
def test_fashion_mnist_reads_idx_directory(tmp_path, compress, sep):
    ds = fake_set()
    write_set(tmp_path, ds, compress, sep)
    got = fashion_mnist(root=tmp_path)
    for field in FashionMNIST._fields:
        np.testing.assert_array_equal(getattr(got, field), getattr(ds, field))
    assert got.y_train.dtype == np.int64 and got.x_train.dtype == np.uint8


def test_fashion_mnist_torchvision_layout(tmp_path):
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    write_set(raw, fake_set(), compress=True)
    assert fashion_mnist(str(tmp_path)).x_test.shape == (4, 28, 28)


def test_missing_files_and_bad_root(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        fashion_mnist(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="train-images"):
        fashion_mnist(tmp_path)


def test_inconsistent_set_is_rejected(tmp_path):
    ds = fake_set()
    write_set(tmp_path, ds._replace(y_train=ds.y_train[:-1]), compress=False)
    with pytest.raises(ValueError, match="6 images but .* 5 labels"):
        fashion_mnist(tmp_path)
    write_set(tmp_path, ds._replace(y_test=np.full(4, 12)), compress=False)
    with pytest.raises(ValueError, match="label 12 is out of range"):
        fashion_mnist(tmp_path)


def _valid_bytes() -> bytes:
    arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    return struct.pack(">BBBB3I", 0, 0, 8, 3, 2, 3, 4) + arr.tobytes()


@pytest.mark.parametrize("data, match", [
    (_valid_bytes()[:-1], "truncated: shape \\(2, 3, 4\\) .* needs 24 bytes of data, found 23"),
    (_valid_bytes() + b"\0", "trailing bytes"),
    (_valid_bytes()[:10], "truncated IDX header"),
    (b"\0\0", "shorter than the 4-byte magic"),
    (b"\x01\x00\x08\x01" + b"\0" * 8, "two zero bytes"),
    (b"\0\0\x07\x01\0\0\0\x01a", "unknown IDX type byte 0x07"),
    (b"\0\0\x08\x00", "0 dimensions"),
])
def test_malformed_idx_raises_naming_the_file(tmp_path, data, match):
    path = tmp_path / "bad-images-idx3-ubyte"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=match) as info:
        read_idx(path)
    assert str(path) in str(info.value)


def test_truncated_gzip_raises_naming_the_file(tmp_path):
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(_valid_bytes())[:-6])
    with pytest.raises(ValueError, match="gzip") as info:
        read_idx(path)
    assert str(path) in str(info.value)
    path.write_bytes(gzip.compress(_valid_bytes()[:-3]))  # valid gzip, truncated payload
    with pytest.raises(ValueError, match="truncated"):
        read_idx(path)

"""Fashion-MNIST (Xiao et al. 2017, https://arxiv.org/abs/1708.07747): a bundled subset, and a
reader for the full IDX files.

::

    from tinyopt.data import fashion_mnist
    ds = fashion_mnist()                       # bundled: 10,000 train + 2,000 test images
    ds.x_train.shape, ds.x_train.dtype         # (10000, 28, 28) uint8, pixels 0..255
    ds.y_train.dtype                           # int64, labels 0..9 (see CLASSES)
    x = ds.x_train.reshape(-1, 1, 28, 28).astype(np.float32) / 255   # NCHW floats for a model

    full = fashion_mnist(root="/usr/share/datasets/fashion-mnist")   # 60,000 + 10,000

The bundled subset is class-balanced (1,000 training and 200 test images per class, rows shuffled);
its license notice is ``LICENSE-fashion-mnist.txt`` next to it.  With ``root`` the four standard IDX
files are read from that directory (or from ``root/FashionMNIST/raw``, torchvision's layout),
gzipped or not; MNIST-style names with a dot (``train-images.idx3-ubyte``) are accepted too, so the
same call loads MNIST itself.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = ["CLASSES", "FashionMNIST", "fashion_mnist", "read_idx"]

CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot")

_BUNDLED = Path(__file__).with_name("fashion_mnist_10k.npz")

# IDX type byte -> big-endian numpy dtype (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT")
_IDX_TYPES = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
              0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}

_FILES = {  # field -> (stem, idx suffix)
    "x_train": ("train-images", "idx3-ubyte"),
    "y_train": ("train-labels", "idx1-ubyte"),
    "x_test": ("t10k-images", "idx3-ubyte"),
    "y_test": ("t10k-labels", "idx1-ubyte"),
}


class FashionMNIST(NamedTuple):
    """The four arrays of the data set: images uint8 ``(N, 28, 28)``, labels int64 ``(N,)``."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (gzip-compressed or not) into a native-endian numpy array.

    Layout: two zero bytes, a type byte (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
    0x0D float32, 0x0E float64), a byte with the number of dimensions ``d``, ``d`` big-endian
    uint32 sizes, then the values, big-endian, row-major.  A file whose header is malformed or
    whose payload is not exactly ``prod(sizes) * itemsize`` bytes raises ``ValueError`` naming it.
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, OSError, zlib.error) as e:
            raise ValueError(f"{path}: corrupt or truncated gzip data ({e})") from None
    if len(raw) < 4:
        raise ValueError(f"{path}: not an IDX file: {len(raw)} bytes is shorter than the 4-byte "
                         f"magic number")
    if raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path}: not an IDX file: the magic number must start with two zero "
                         f"bytes, got {raw[:4].hex()}")
    type_byte, ndim = raw[2], raw[3]
    if type_byte not in _IDX_TYPES:
        raise ValueError(f"{path}: unknown IDX type byte 0x{type_byte:02x} (expected one of "
                         f"{', '.join(f'0x{t:02x}' for t in _IDX_TYPES)})")
    if ndim == 0:
        raise ValueError(f"{path}: IDX header declares 0 dimensions")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header: {ndim} dimensions need {header} bytes, "
                         f"the file has {len(raw)}")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_TYPES[type_byte]
    expected = dtype.itemsize
    for s in shape:
        expected *= s
    payload = len(raw) - header
    if payload != expected:
        what = "truncated" if payload < expected else "has trailing bytes"
        raise ValueError(f"{path}: IDX file {what}: shape {shape} of {dtype.newbyteorder('=')} "
                         f"needs {expected} bytes of data, found {payload}")
    arr = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="))  # a writable, native-endian copy


def _find(directory: Path, stem: str, suffix: str) -> Path | None:
    for sep in ("-", "."):
        for ext in ("", ".gz"):
            candidate = directory / f"{stem}{sep}{suffix}{ext}"
            if candidate.is_file():
                return candidate
    return None


def _load_idx_set(root: Path) -> FashionMNIST:
    if not root.is_dir():
        raise FileNotFoundError(f"fashion_mnist: root {str(root)!r} is not a directory")
    directories = [root, root / "FashionMNIST" / "raw"]
    paths = {}
    for field, (stem, suffix) in _FILES.items():
        found = next((p for d in directories if (p := _find(d, stem, suffix)) is not None), None)
        if found is None:
            raise FileNotFoundError(f"fashion_mnist: no {stem}-{suffix}[.gz] (or {stem}.{suffix}"
                                    f"[.gz]) in {str(root)!r} or its FashionMNIST/raw")
        paths[field] = found
    arrays = {field: read_idx(p) for field, p in paths.items()}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        px, py = paths[f"x_{split}"], paths[f"y_{split}"]
        if x.ndim != 3 or x.dtype != np.uint8:
            raise ValueError(f"{px}: expected uint8 images of shape (N, H, W), got {x.dtype} "
                             f"{x.shape}")
        if y.ndim != 1 or y.dtype != np.uint8:
            raise ValueError(f"{py}: expected uint8 labels of shape (N,), got {y.dtype} {y.shape}")
        if len(x) != len(y):
            raise ValueError(f"{px} has {len(x)} images but {py} has {len(y)} labels")
        if y.size and y.max() >= len(CLASSES):
            raise ValueError(f"{py}: label {int(y.max())} is out of range 0..{len(CLASSES) - 1}")
    if arrays["x_train"].shape[1:] != arrays["x_test"].shape[1:]:
        raise ValueError(f"training images are {arrays['x_train'].shape[1:]} but test images are "
                         f"{arrays['x_test'].shape[1:]}")
    return FashionMNIST(arrays["x_train"], arrays["y_train"].astype(np.int64),
                        arrays["x_test"], arrays["y_test"].astype(np.int64))


def fashion_mnist(root: str | os.PathLike | None = None) -> FashionMNIST:
    """Fashion-MNIST as ``FashionMNIST(x_train, y_train, x_test, y_test)`` of new numpy arrays.

    Images are uint8 ``(N, 28, 28)`` with pixels 0..255, labels int64 ``(N,)`` in 0..9
    (``CLASSES[label]`` names them).  Without ``root``: the bundled subset (10,000 train, 2,000
    test).  With ``root``: the full IDX files from that directory (see the module docstring).
    """
    if root is not None:
        return _load_idx_set(Path(root))
    with np.load(_BUNDLED, allow_pickle=False) as data:
        return FashionMNIST(data["x_train"], data["y_train"].astype(np.int64),
                            data["x_test"], data["y_test"].astype(np.int64))

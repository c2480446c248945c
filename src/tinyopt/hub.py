"""``torch.hub``'s weight downloads: ``load_state_dict_from_url`` fetches a checkpoint once into
the hub cache (the same folder PyTorch uses: ``$TORCH_HOME/hub/checkpoints``, by default
``~/.cache/torch/hub/checkpoints``) and loads it with ``tinyopt.load`` -- files ``torch.save``
wrote load without PyTorch.  ``torch.hub.load`` (running a repository's hubconf) is not there:
it executes downloaded code.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import urllib.request
from typing import Any
from urllib.parse import urlparse

__all__ = ["download_url_to_file", "get_dir", "load_state_dict_from_url", "set_dir"]

HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")
_hub_dir: list[str] = []


def get_dir() -> str:
    """The hub cache folder (``set_dir``, else ``$TORCH_HOME/hub``, else
    ``$XDG_CACHE_HOME/torch/hub`` or ``~/.cache/torch/hub``)."""
    if _hub_dir:
        return _hub_dir[0]
    home = os.environ.get("TORCH_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torch")
    return os.path.join(os.path.expanduser(home), "hub")


def set_dir(d: str | os.PathLike) -> None:
    """Use ``d`` as the hub cache folder from now on."""
    _hub_dir[:] = [os.path.expanduser(os.fspath(d))]


def download_url_to_file(url: str, dst: str, hash_prefix: str | None = None,
                         progress: bool = True) -> None:
    """Download ``url`` to ``dst`` atomically (a temporary file in the same folder, renamed);
    with ``hash_prefix`` the file's SHA-256 must start with it, else ``RuntimeError``."""
    folder = os.path.dirname(os.path.abspath(dst))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".partial")
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url) as src:  # noqa: S310
            while chunk := src.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
        if hash_prefix is not None and not digest.hexdigest().startswith(hash_prefix):
            raise RuntimeError(f'invalid hash value (expected "{hash_prefix}", got '
                               f'"{digest.hexdigest()}")')
        shutil.move(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_state_dict_from_url(url: str, model_dir: str | None = None, map_location: Any = None,
                             progress: bool = True, check_hash: bool = False,
                             file_name: str | None = None,
                             weights_only: bool = False) -> dict[str, Any]:
    """The object saved at ``url`` (a state dict), downloaded into ``model_dir`` (default: the
    hub cache's ``checkpoints``) unless already there; ``check_hash`` checks the SHA-256 prefix
    in the file name (``name-<sha256 prefix>.pth``), as PyTorch does."""
    from tinyopt.serialization import load
    if model_dir is None:
        model_dir = os.path.join(get_dir(), "checkpoints")
    os.makedirs(model_dir, exist_ok=True)
    filename = file_name or os.path.basename(urlparse(url).path)
    cached = os.path.join(model_dir, filename)
    if not os.path.exists(cached):
        sys.stdout.write(f'Downloading: "{url}" to {cached}\n')
        match = HASH_REGEX.search(filename) if check_hash else None
        download_url_to_file(url, cached, match.group(1) if match else None, progress)
    return load(cached, map_location=map_location, weights_only=weights_only)

"""``torch.utils.model_zoo``: the old path of ``torch.hub.load_state_dict_from_url``."""

from __future__ import annotations

from tinyopt.hub import load_state_dict_from_url

__all__ = ["load_url"]

load_url = load_state_dict_from_url

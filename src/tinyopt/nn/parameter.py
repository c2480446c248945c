"""``torch.nn.parameter``: the module some code imports ``Parameter`` from (tinyopt's is the
engine's, as ``tinyopt.nn.Parameter``)."""

from __future__ import annotations

from tinyopt.engine.tensor import Parameter

__all__ = ["Parameter"]

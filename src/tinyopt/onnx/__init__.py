"""``torch.onnx``: export a model's forward pass to ONNX from tinyopt's static graph.

    import tinyopt.onnx
    tinyopt.onnx.export(model, (x,), "model.onnx", input_names=["x"], output_names=["logits"],
                        dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})

``export`` needs the ``onnx`` package (``pip install tinyopt[onnx]``); importing this module
does not.  See :func:`tinyopt.onnx.exporter.export`.
"""

from __future__ import annotations

from tinyopt.onnx.exporter import OperatorExportTypes, TrainingMode, export, is_in_onnx_export

__all__ = ["OperatorExportTypes", "TrainingMode", "export", "is_in_onnx_export"]

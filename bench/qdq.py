"""QDQ int8 versions of float ONNX models, as users make them: onnxruntime's ``quantize_static``.

u8 activations and s8 weights (symmetric, per output channel by default), calibrated on seeded
random inputs, in the QDQ format (QuantizeLinear/DequantizeLinear pairs around float ops) that
onnxruntime, OpenVINO and convtune all import. Nothing is downloaded.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_static,
)


class _SeededReader(CalibrationDataReader):
    """``samples`` feeds of standard-normal inputs at each input's static shape."""

    def __init__(self, model: onnx.ModelProto, samples: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        shapes = {
            i.name: [d.dim_value for d in i.type.tensor_type.shape.dim] for i in model.graph.input
        }
        self._feeds: Iterator[dict[str, np.ndarray]] = iter(
            [
                {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
                for _ in range(samples)
            ]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._feeds, None)


def quantize_qdq(
    model: onnx.ModelProto, *, seed: int = 0, samples: int = 4, per_channel: bool = True
) -> onnx.ModelProto:
    """``model`` quantized by onnxruntime's ``quantize_static`` (QDQ, u8 activations, s8
    weights), calibrated by MinMax on ``samples`` seeded inputs."""
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "qdq.onnx"
        onnx.save(model, src)
        quantize_static(
            str(src),
            str(dst),
            _SeededReader(model, samples, seed),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
        )
        return onnx.load(dst)

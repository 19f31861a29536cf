"""QDQ int8 versions of float ONNX models, as users make them: onnxruntime's ``quant_pre_process``
then ``quantize_static``, the flow its documentation gives.

u8 activations and s8 weights (symmetric, per output channel by default), calibrated on seeded
random inputs, in the QDQ format (QuantizeLinear/DequantizeLinear pairs around float ops) that
onnxruntime, OpenVINO and convtune all import. The pre-processing folds BatchNorm into the convs,
as the quantizer's own warning asks; without it every BatchNorm stays fp32 between a conv and
its QuantizeLinear. Nothing is downloaded.
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
from onnxruntime.quantization.shape_inference import quant_pre_process


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
        raw, src, dst = (Path(tmp) / f"{n}.onnx" for n in ("raw", "float", "qdq"))
        onnx.save(model, raw)
        quant_pre_process(str(raw), str(src), skip_symbolic_shape=True)
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

"""QDQ int8 versions of float ONNX models, as users make them: onnxruntime's ``quant_pre_process``
then ``quantize_static``, the flow its documentation gives.

u8 activations and s8 weights (symmetric, per output channel by default), calibrated on seeded
random inputs, in the QDQ format (QuantizeLinear/DequantizeLinear pairs around float ops) that
onnxruntime, OpenVINO and convtune all import. The pre-processing folds BatchNorm into the convs,
as the quantizer's own warning asks; without it every BatchNorm stays fp32 between a conv and
its QuantizeLinear. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Iterator
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

from bench.corpus.built import yolov8n_like
from bench.zoo import zoo_model


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


#: The int8 benchmark's models: float builder and the input it is calibrated at.
MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet50": lambda: onnx.load(zoo_model("resnet50")),
    "yolov8n_like": yolov8n_like,
}


def main(argv: list[str] | None = None) -> None:
    """Write ``<name>.onnx`` (float) and ``<name>_qdq.onnx`` for each model into ``--out``;
    tune and bench them with the CLI (docs/performance.md shows the commands)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--out", type=Path, default=Path("bench/.cache/qdq"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.models:
        model = MODELS[name]()
        onnx.save(model, args.out / f"{name}.onnx")
        onnx.save(quantize_qdq(model, seed=args.seed), args.out / f"{name}_qdq.onnx")
        print(args.out / f"{name}_qdq.onnx")


if __name__ == "__main__":
    main()

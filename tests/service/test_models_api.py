"""``/api/models`` against a real API process: uploads good and bad, limits, dedup, concurrency."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tests.models import conv_net, make_model, three_conv_cnn, to_bytes
from tests.service.conftest import UPLOAD_LIMIT, Service


def upload(client, data: bytes, filename: str = "model.onnx", **fields: str):
    return client.post("/api/models", files={"file": (filename, data)}, data=fields or None)


def assert_error(response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    message = body["error"]["message"]
    assert message and "\n" not in message and "Traceback" not in message
    return message


def leftovers(service: Service) -> list[Path]:
    """Partial uploads still on disk (every request must clean up after itself)."""
    return list((service.data_dir / "tmp").iterdir())


def test_upload_stores_by_content_hash_and_lists_workloads(service, client):
    data = to_bytes(conv_net(seed=101))
    response = upload(client, data, "resnet-ish.onnx")
    assert response.status_code == 201, response.text
    body = response.json()
    sha = hashlib.sha256(data).hexdigest()
    assert body["sha256"] == sha
    assert body["size_bytes"] == len(data)
    assert body["name"] == "resnet-ish"
    assert body["inputs"] == [{"name": "x", "shape": [1, 3, 16, 16], "dtype": "float32"}]
    assert (service.data_dir / "models" / f"{sha}.onnx").read_bytes() == data
    [conv] = body["workloads"]
    assert conv["op"] == "Conv" and conv["kind"] == "conv"
    assert conv["onnx_nodes"] == ["conv0"]
    assert conv["flops"] > 0 and conv["best_gflops"] is None
    assert conv["description"]["weight"] == [6, 3, 3, 3]

    again = upload(client, data, "another-name.onnx")
    assert again.status_code == 200
    assert again.json() == body

    assert client.get(f"/api/models/{body['id']}").json() == body
    listed = client.get("/api/models").json()
    assert [m["id"] for m in listed].count(body["id"]) == 1
    assert leftovers(service) == []


def test_multi_layer_model_has_one_entry_per_task(client):
    response = upload(client, to_bytes(three_conv_cnn(seed=102)))
    assert response.status_code == 201, response.text
    ops = [w["op"] for w in response.json()["workloads"]]
    assert ops.count("Conv") == 3
    assert "Gemm" in ops


@pytest.mark.parametrize(
    "filename", ["../../etc/passwd.onnx", "..\\..\\evil\\x.onnx", "/abs/m.onnx", "C:m.onnx", ".."]
)
def test_path_like_filename_is_refused(service, client, filename):
    data = to_bytes(conv_net(seed=103))
    before = sorted((service.data_dir / "models").iterdir())
    assert_error(upload(client, data, filename), 400, "invalid_filename")
    assert sorted((service.data_dir / "models").iterdir()) == before
    assert not (service.data_dir.parent.parent / "etc").exists()
    assert leftovers(service) == []


def test_plain_filename_is_the_display_name(client):
    response = upload(client, to_bytes(conv_net(seed=104)), "my model (v2).onnx")
    assert response.status_code == 201, response.text
    assert response.json()["name"] == "my model _v2"


def test_bytes_that_are_not_onnx_are_refused(service, client):
    message = assert_error(upload(client, b"MZ\x90\x00 this is not a model"), 400, "invalid_model")
    assert "ONNX" in message
    assert leftovers(service) == []


def test_a_model_tvm_cannot_convert_is_unprocessable(service, client):
    det = make_model(  # no TVM converter, and no rewrite of the normalizer
        [helper.make_node("Det", ["x"], ["y"], name="det0")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    message = assert_error(upload(client, to_bytes(det)), 422, "unsupported_op")
    assert "Det" in message and "det0" in message
    assert leftovers(service) == []


def test_empty_file_is_refused(client):
    assert_error(upload(client, b""), 400, "empty_file")


def test_model_with_external_data_is_refused(client, tmp_path):
    path = tmp_path / "ext.onnx"
    onnx.save_model(
        conv_net(seed=105), path, save_as_external_data=True, location="w.bin", size_threshold=0
    )
    message = assert_error(upload(client, path.read_bytes()), 400, "invalid_model")
    assert "external" in message


def test_upload_over_the_limit_is_refused_from_content_length(service, client):
    assert_error(upload(client, b"\0" * (UPLOAD_LIMIT * 2)), 413, "upload_too_large")
    assert leftovers(service) == []


def test_upload_over_the_limit_is_cut_off_while_streaming(service, client):
    """Chunked body, no Content-Length: the limit must hold as bytes arrive."""
    boundary = "convtuneboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.onnx"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()

    def body():
        yield head
        for _ in range((UPLOAD_LIMIT // 65536) + 2):
            yield b"\0" * 65536
        yield f"\r\n--{boundary}--\r\n".encode()

    response = client.post(
        "/api/models",
        content=body(),
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert "content-length" not in {k.lower() for k in response.request.headers}
    assert_error(response, 413, "upload_too_large")
    assert leftovers(service) == []


def test_request_without_file_part_or_not_multipart(client):
    assert_error(
        client.post("/api/models", data={"input_shapes": "x=1,3,16,16"}, files={"other": b"x"}),
        400,
        "missing_file",
    )
    assert_error(client.post("/api/models", json={"file": "x"}), 415, "unsupported_media_type")


def test_input_shapes_pin_a_dynamic_batch(client):
    data = to_bytes(conv_net(batch="N", seed=106))
    refused = upload(client, data)
    assert_error(refused, 400, "invalid_model")
    # An HTTP client is pointed at its form field, not at the CLI's flag.
    message = refused.json()["error"]["message"]
    assert "input_shapes x=1,3,16,16" in message and "--input-shape" not in message
    pinned = upload(client, data, input_shapes="x=1,3,16,16")
    assert pinned.status_code == 201, pinned.text
    assert pinned.json()["inputs"][0]["shape"] == [1, 3, 16, 16]
    assert upload(client, data, input_shapes="x=1,3,16,16").status_code == 200
    assert_error(upload(client, data, input_shapes="x=one,3"), 400, "bad_request")
    assert_error(upload(client, data, input_shapes="x=2,3,16,16"), 409, "model_exists")


def test_two_concurrent_uploads_of_different_models(service, client):
    models = [to_bytes(conv_net(seed=107, out_channels=4)), to_bytes(conv_net(seed=108))]
    results: dict[int, object] = {}

    def send(i: int) -> None:
        with service.client() as own:
            results[i] = upload(own, models[i], f"m{i}.onnx")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    bodies = [results[i].json() for i in range(2)]  # type: ignore[attr-defined]
    assert [results[i].status_code for i in range(2)] == [201, 201]  # type: ignore[attr-defined]
    assert bodies[0]["id"] != bodies[1]["id"]
    assert [b["sha256"] for b in bodies] == [hashlib.sha256(m).hexdigest() for m in models]
    listed = {m["id"] for m in client.get("/api/models").json()}
    assert {b["id"] for b in bodies} <= listed


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/api/models/999999", 404, "not_found"),
        ("/api/models/abc", 422, "validation_error"),
        ("/api/nothing-here", 404, "not_found"),
        ("/api/jobs/999999", 404, "not_found"),
        ("/api/artifacts/999999", 404, "not_found"),
    ],
)
def test_errors_have_one_shape(client, path, status, code):
    assert_error(client.get(path), status, code)


def test_healthz_reports_the_database(client, backend):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["database"]) == ("ok", backend)

"""docker-compose.yml runs a TVM RPC tracker and scalable `convtune rpc-server` devices."""

from __future__ import annotations

from tests.service.test_compose import load


def test_tracker_and_scalable_rpc_devices():
    services = load()["services"]
    tracker = services["tracker"]["command"]
    assert tracker[:3] == ["python", "-m", "tvm.exec.rpc_tracker"]
    port = tracker[tracker.index("--port") + 1]
    assert any(str(p).startswith(f"{port}:") for p in services["tracker"]["ports"])
    rpc = services["rpc"]
    command = rpc["command"]
    assert command[:2] == ["convtune", "rpc-server"]
    assert command[command.index("--tracker") + 1] == f"tracker:{port}"
    assert "--key" in command and "--threads" in command
    # Scalable: no fixed host port or container name to collide between replicas.
    assert "ports" not in rpc and "container_name" not in rpc

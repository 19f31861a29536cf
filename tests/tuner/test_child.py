"""Measurements in a process of their own: feeds cross over intact, failures become clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from convtune.tuner.errors import ConvtuneError
from convtune.tuner.measure.child import load_feeds, run_child, save_feeds, tvm_process_env


def test_feeds_cross_over_by_position_whatever_their_names(tmp_path):
    # ONNX input names are not file names: PyTorch exports "input.1", hand-written graphs "x/0".
    rng = np.random.default_rng(0)
    feeds = {
        "input.1": rng.standard_normal((1, 3, 4, 4)).astype(np.float32),
        "x/0": np.arange(6, dtype=np.int64).reshape(2, 3),
    }
    spec = save_feeds(tmp_path, ["x/0", "input.1"], feeds)
    back = load_feeds(spec)
    assert list(back) == ["x/0", "input.1"]
    for name, array in feeds.items():
        assert back[name].dtype == array.dtype
        np.testing.assert_array_equal(back[name], array)


def test_tvm_env_pins_the_pool_and_keeps_the_rest():
    env = tvm_process_env(3, {"PATH": "/bin", "TVM_NUM_THREADS": "64"})
    assert env["TVM_NUM_THREADS"] == "3" and env["PATH"] == "/bin"


def test_a_child_that_fails_says_why_in_one_line():
    with pytest.raises(ConvtuneError) as err:
        run_child("convtune.no_such_module", {}, what="profile: the TVM layers")
    message = str(err.value)
    assert message.startswith("profile: the TVM layers failed in its own process")
    assert "No module named" in message and "Traceback" not in message


def test_a_child_that_prints_no_json_is_an_error_not_a_crash():
    # timeit runs the spec as a statement (a dict display) and prints its timing, not JSON.
    with pytest.raises(ConvtuneError, match="printed no result"):
        run_child("timeit", {"a": 1}, what="bench: tuned")


def test_a_child_over_its_time_is_stopped():
    # timeit's automatic loop count alone takes longer than 0.05 s.
    with pytest.raises(ConvtuneError, match="did not finish in 0 s"):
        run_child("timeit", {"a": 1}, what="bench: tuned", timeout_s=0.05)

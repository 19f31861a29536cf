"""bench/run.py's report says whether its run started cold, and whether its profile adds up."""

from bench.run import profile_caveats, start_state
from convtune.tuner.profile import DISTURBED_NOTE, ORT_OTHER, OUTSIDE_KERNELS


def test_a_run_on_records_of_an_earlier_run_is_called_warm_with_their_count():
    curve = [{"tasks": 36}]
    assert start_state({"reused_workloads": 14}, curve) == (
        "**Warm**: 14 of 36 workloads had records before the run."
    )
    assert start_state({"reused_workloads": 2}, None).startswith("**Warm**: 2 workloads")


def test_a_run_from_an_empty_database_is_called_cold():
    assert start_state({"reused_workloads": 0}, [{"tasks": 37}]).startswith("Cold: no workload")
    assert start_state({}, None).startswith("Cold")


def test_a_profile_that_did_not_add_up_is_called_disturbed_above_its_table():
    calm = {"layer": OUTSIDE_KERNELS, "shape": "end to end 22.0 ms", "disturbed": False}
    theirs = {
        "layer": ORT_OTHER,
        "shape": f"end to end 22.1 ms; nodes sum to 40.5 ms: {DISTURBED_NOTE}",
        "disturbed": True,
    }
    layer = {"layer": "fused_conv2d", "shape": "1x64x56x56 * 64x64x1x1 s1,1", "disturbed": None}
    assert profile_caveats([layer, calm, theirs]) == [
        f"> **Disturbed**: onnxruntime's nodes: {theirs['shape']}.",
        "",
    ]
    assert profile_caveats([layer, calm]) == []
    ours = {**calm, "disturbed": True, "shape": "end to end 22.0 ms; kernels sum to 30.1 ms"}
    assert profile_caveats([ours])[0].startswith("> **Disturbed**: our kernels: end to end 22.0")

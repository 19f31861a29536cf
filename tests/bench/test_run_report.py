"""bench/run.py's report says whether its run started cold."""

from bench.run import start_state


def test_a_run_on_records_of_an_earlier_run_is_called_warm_with_their_count():
    curve = [{"tasks": 36}]
    assert start_state({"reused_workloads": 14}, curve) == (
        "**Warm**: 14 of 36 workloads had records before the run."
    )
    assert start_state({"reused_workloads": 2}, None).startswith("**Warm**: 2 workloads")


def test_a_run_from_an_empty_database_is_called_cold():
    assert start_state({"reused_workloads": 0}, [{"tasks": 37}]).startswith("Cold: no workload")
    assert start_state({}, None).startswith("Cold")

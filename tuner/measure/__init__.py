"""Measurements: how a kernel or a model is timed (timers, timing, child, runtime), where (this
host, or a fleet's devices: fleet, rpc, runner, on_fleet, device_server), against what
(reference, verify) and the machine's roofline (peak, results). Knows the graph, not the search."""

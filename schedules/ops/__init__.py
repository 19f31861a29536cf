"""Ops: computes, weight packing, transform matrices, epilogue matching, ISA facts and the
shared NCHWc schedule helpers. Imports nothing from ``spaces`` or ``lowering``."""

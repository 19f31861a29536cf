"""Lowering passes run after TVM's TIR pipeline (prefetch, stack arrays, fast exp) and the
pipeline that installs them. Imports at most ``ops``."""

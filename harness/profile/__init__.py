"""Timing and profiler backends: run a callable, return kernels with report-field metrics."""

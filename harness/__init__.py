"""harness: turn an Nsight Compute bottleneck report into measured counter-experiments."""

__version__ = "0.1.0"

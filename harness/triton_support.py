"""Moved to harness.api.triton_support; this import path stays for experiments written against it."""

import sys

from harness.api import triton_support

sys.modules[__name__] = triton_support

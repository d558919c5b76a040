"""Moved to harness.api.experiment; this import path stays for experiments written against it."""

import sys

from harness.api import experiment

sys.modules[__name__] = experiment

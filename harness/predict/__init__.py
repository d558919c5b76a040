"""Predict, then verify: every counter-experiment's expected speedup on a device before it is measured, derived
from the card's kernels and shapes, its dtype and the device's peaks, with an 80% interval from stated
uncertainties; scored against what a run then measures (harness.predict.calibration).

Torch-free: the run's side and `python -m harness.report predict` use it. One module per family of
counter-experiments registers its predictors (harness.predict.prediction.register); importing this package
registers them all.
"""

from harness.predict import attention, batching, kernels, layout, precision  # noqa: F401 - they register

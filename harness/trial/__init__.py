"""The worker child (`python -m harness.trial`): a trial rebuilt from its job, measured, judged and profiled."""

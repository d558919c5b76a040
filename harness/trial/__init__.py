"""The worker child (`python -m harness.trial`): each request answered; a trial rebuilt from its card's spec,
measured, judged and profiled."""

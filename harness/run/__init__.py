"""The run's side (the parent process): it never imports torch."""

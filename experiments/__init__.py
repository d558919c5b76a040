"""Counter-experiments: one module per experiment, its variants registered beside one baseline."""

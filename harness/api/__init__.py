"""What an experiment module imports: Experiment and its variants, tiles, Triton, torch.compile, optional packages."""

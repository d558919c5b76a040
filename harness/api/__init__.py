"""What an experiment module imports: Experiment and its variants, tiles, Triton, torch.compile, optional packages,
the peaks a card is judged against, a dtype's unit roundoff and the pinned math mode, a chunk card's attribution."""

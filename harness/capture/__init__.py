"""Capture: any PyTorch model as a report of cards, with its hot ops' real inputs.

`python -m harness.capture MODULE:FACTORY --out DIR` records one forward of the model at the level its
code calls torch (`recorder`), groups the calls by op and shapes (`calls`), keeps the hot groups, saves each
one's inputs by hash and writes its card (`writer`), replays and profiles every card in isolation through
the harness's own re-profile run (`profiling`), and writes DIR/report.json in the shipped report's format
(`pipeline`). `--apply` takes what a run on those cards adopted back to the whole model (`apply`).
"""

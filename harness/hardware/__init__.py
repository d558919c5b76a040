"""Torch-free hardware tables, below cards/: the occupancy calculator's arithmetic (`occupancy`), the GPU peak
table and its lookup by device name (`gpu_peaks`), and the ncu metric names a card check reads
(`ncu_metrics`). Pure Python: it imports nothing of the harness, so the report model and the run's side can
read them without the profiler's package, and every process can import it."""

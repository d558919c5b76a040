"""The Nsight Compute backend: metric table, unit conversion, parsing of ncu's outputs, command
lines, failure recognition, a deadline-bound runner, and the import of ncu outputs as report cards."""

"""Benchmark suite of surprisal_cc: ``surprisal-cc bench [--quick] [--json]`` or
``python -m benchmarks.run_all [--quick|--smoke] [--json]`` from the repository root."""

"""Benchmark suite of surprisal_cc: ``surprisal-cc bench [--quick] [--json]``, or from the repository root
``python -m benchmarks.run_all [--quick|--smoke] [--json]`` (one benchmark: ``python -m benchmarks.bench_rnn``)."""

"""Benchmark suite of surprisal_cc: from the repository root (or ``make bench``)
``python -m benchmarks.run_all [--quick|--smoke] [--json]`` (one benchmark: ``python -m benchmarks.bench_rnn``)."""

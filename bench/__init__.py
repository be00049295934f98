"""`make bench`: the benchmark suite of issue 8 (run `python -m bench --help`)."""

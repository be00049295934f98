"""Runnable examples: `make demo` (`python -m examples.demo`) and the spark-submit ETL job
`examples/streaming_etl.py`."""

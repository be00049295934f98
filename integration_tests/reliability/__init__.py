"""Reliability scenarios: real broker / Spark processes under crashes, restarts, corrupt files,
load and hostile input. Each scenario records its figures in `report.REPORT`; `make reliability`
writes them to RELIABILITY.md."""

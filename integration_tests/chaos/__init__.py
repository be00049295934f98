"""Chaos runs (issue 47): OpenChaos's faults on a cluster whose every member lives in its own
network namespace, and a checker over the recorded history (integration_tests/chaos/checker.py)."""

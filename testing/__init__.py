"""Test and benchmark harness, not part of the `rmq` product (not installed): `processes` starts
and stops local `rmq namesrv` / `rmq broker` processes for tests/, integration_tests/, bench/
and `make demo`."""

"""Metrics: per-topic and per-group put/get counters, the Prometheus collectors of the broker
and the name server, and the bounded `/metrics` HTTP endpoint."""

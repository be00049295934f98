"""The `rmq` command line (DESIGN.md "CLI"): `rmq namesrv|broker` start the servers of
`rmq.broker_server`, `rmq topic|produce|consume|group` are clients through `rmq.connector`.
Run as the `rmq` console script or `python -m rmq.cli`."""

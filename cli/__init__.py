"""The `rmq` command line (docs/manual/cli.md): `rmq namesrv|broker` start the servers of
`rmq.broker_server`, `rmq topic|produce|consume|group` are clients through `rmq.connector`.
Run as the `rmq` console script or `python -m rmq.cli`."""

"""Broker and name server processes: gRPC services over the store, long polling, consumer
offsets, membership, queue locks, delay levels, and the `rmq` command line."""

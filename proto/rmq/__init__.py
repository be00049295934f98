"""The rmq wire contract: generated gRPC/protobuf stubs (`rmq.v1`) and the byte layout of
a stored message (`rmq.message_format`), shared by the store, the broker and the clients."""

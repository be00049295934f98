"""The rmq wire contract: generated gRPC/protobuf stubs (`rmq.v1`) and the byte layout of
a stored message (`rmq.message_format`), shared by the store, the broker and the clients."""

# The one source of the version: pyproject.toml reads it (dynamic), `rmq --version` prints it, and
# CHANGELOG.md's newest released version is older (tests/cli/test_main.py).
__version__ = "0.3.0.dev0"

"""The remoting port closes a connection that sends nothing, or stops in the middle of a frame, for
idle_timeout_s (RocketMQ closes channels idle for 120 s): a silent client keeps no connection
place, and no read, for ever."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest

from rmq.broker_server.remoting.remoting_server import CallContext, RemotingLimits, RemotingServer
from rmq.remoting.remoting_command import RemotingCommand
from tests.broker_server.remoting_client import RemotingTestClient, serving

IDLE_TIMEOUT_S = 0.3


class Silent:
    """A processor that answers nothing (the test sends no whole request)."""

    async def process(self, context: CallContext, request: RemotingCommand) -> RemotingCommand | None:
        return None


@pytest.fixture
def address() -> Iterator[str]:
    limits = RemotingLimits(idle_timeout_s=IDLE_TIMEOUT_S)
    with serving(RemotingServer("127.0.0.1:0", Silent(), limits)) as address:
        yield address


@pytest.mark.parametrize("sent", [b"", struct.pack(">i", 100) + b"\0" * 10], ids=["silent", "mid-frame"])
def test_an_idle_connection_is_closed(address: str, sent: bytes) -> None:
    with RemotingTestClient(address) as client:
        client.socket.sendall(sent)
        assert client.closed_by_peer()

"""How a reader reads a queue's existing ranges (option `transport` of the Spark source and the
PullConsumer, docs/data-plane.md)."""

from __future__ import annotations

import enum
from collections.abc import Callable

from rmq.connector.errors import RmqReadError


class Transport(enum.Enum):
    AUTO = "auto"       # the broker's Arrow Flight data plane where the route advertises it, else PullMessage
    FLIGHT = "flight"   # Flight only: a broker without it is an error
    GRPC = "grpc"       # PullMessage only


TRANSPORTS = tuple(transport.value for transport in Transport)


def reads_through_flight(transport: Transport, advertised: Callable[[], bool], broker: str) -> bool:
    """The one rule (the Spark source's ranges, the PullConsumer's backlogs) for whether a read goes
    through the broker's Arrow Flight data plane: never with GRPC, where `advertised()` (the route
    names one) otherwise; with FLIGHT a broker advertising none is an RmqReadError. The caller's own
    conditions for AUTO (a backlog worth a ticket, a data plane that just failed) come before."""
    if transport is Transport.GRPC:
        return False
    if advertised():
        return True
    if transport is Transport.FLIGHT:
        raise RmqReadError(f"transport=flight, but broker {broker} advertises no Arrow Flight data plane "
                           "(started with --flight-listen off?): use transport auto or grpc")
    return False

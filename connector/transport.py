"""How a reader reads a queue's existing ranges (option `transport` of the Spark source and the
PullConsumer, docs/data-plane.md)."""

from __future__ import annotations

import enum


class Transport(enum.Enum):
    AUTO = "auto"       # the broker's Arrow Flight data plane where the route advertises it, else PullMessage
    FLIGHT = "flight"   # Flight only: a broker without it is an error
    GRPC = "grpc"       # PullMessage only


TRANSPORTS = tuple(transport.value for transport in Transport)

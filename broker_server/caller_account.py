"""The account a call is served for (RocketMQ 5's AuthenticationContext / ProxyContext access key):
the access key the call was signed with on a server started with `--acl`, ANONYMOUS otherwise
(every caller is then trusted and shares one account). The interceptors set it once a call is
admitted (rmq.v1 AuthInterceptor, RocketMQ 5 RocketMQv2AuthInterceptor); a grpc.aio call runs in
its own task, so the value is the call's own. Per-account shares of broker-wide bounds (held
pulls, filter CPU, consumer offsets) read it."""

from __future__ import annotations

from contextvars import ContextVar

ANONYMOUS = ""
_CALLER: ContextVar[str] = ContextVar("rmq_caller_account", default=ANONYMOUS)


def caller_account() -> str:
    return _CALLER.get()


def enter_call(access_key: str) -> None:
    """The rest of the current call (task) is served for `access_key`."""
    _CALLER.set(access_key)

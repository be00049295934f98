"""The account a call was admitted for, as the behaviour behind the ACL interceptors sees it.

The interceptors check the names a request carries (rpc_permissions, rocketmq_v2_auth);
some requests reach data those names do not name (a CommitLog offset, a transaction id, a
receipt handle). The behaviour then asks the current Caller whether the account may touch the
data it found (docs/security-model.md). Each gRPC call runs in its own task, so a ContextVar
set by the interceptor before the behaviour runs is that call's alone. Without `--acl` there
is no caller: every call is trusted.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from rmq.broker_server.security.acl import AccessDenied, Acl, Need, ResourceKind


@dataclass(frozen=True)
class Caller:
    access_key: str
    acl: Callable[[], Acl]    # the ACL in force (reloaded between calls)

    @property
    def admin(self) -> bool:
        account = self.acl().account(self.access_key)
        return account is not None and account.admin

    def may(self, kind: ResourceKind, name: str, need: Need) -> bool:
        try:
            self.acl().check(self.access_key, name, kind, need)
        except AccessDenied:
            return False
        return True


_CALLER: ContextVar[Caller | None] = ContextVar("rmq_caller", default=None)


def run_as(caller: Caller) -> None:
    """The interceptor's word: the running call was admitted for `caller`."""
    _CALLER.set(caller)


def current_caller() -> Caller | None:
    """The running call's account; None on a server without an ACL (every caller trusted)."""
    return _CALLER.get()


ANONYMOUS = ""   # the one account every caller shares on a server without --acl


def account_key() -> str:
    """The running call's access key ("" without an ACL): what per-account shares count by."""
    caller = _CALLER.get()
    return caller.access_key if caller is not None else ""


def may(kind: ResourceKind, name: str, need: Need) -> bool:
    """Whether the running call's account holds `need` on the resource (always, without an ACL)."""
    caller = _CALLER.get()
    return caller is None or caller.may(kind, name, need)


def owns(owner: str) -> bool:
    """Whether the running call comes from `owner` (an access key) or an admin account."""
    caller = _CALLER.get()
    return caller is None or caller.access_key == owner or caller.admin

"""Security of the broker and the name server: ACLs and their reloading, request signing and
admission, the caller's account, cluster authentication between members, and TLS."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmq.broker_server.exports import lazy_exports

if TYPE_CHECKING:
    from rmq.broker_server.security.acl import (
        AccessDenied as AccessDenied,
    )
    from rmq.broker_server.security.acl import (
        Acl as Acl,
    )
    from rmq.broker_server.security.acl import (
        Need as Need,
    )
    from rmq.broker_server.security.acl import (
        Requirement as Requirement,
    )
    from rmq.broker_server.security.acl import (
        ResourceKind as ResourceKind,
    )
    from rmq.broker_server.security.caller import (
        ANONYMOUS as ANONYMOUS,
    )
    from rmq.broker_server.security.caller import (
        Caller as Caller,
    )
    from rmq.broker_server.security.caller import (
        account_key as account_key,
    )
    from rmq.broker_server.security.caller import (
        run_as as run_as,
    )
    from rmq.broker_server.security.cluster_auth import (
        ClusterAuth as ClusterAuth,
    )
    from rmq.broker_server.security.cluster_auth import (
        Direction as Direction,
    )
    from rmq.broker_server.security.cluster_auth import (
        Exchange as Exchange,
    )
    from rmq.broker_server.security.cluster_auth import (
        MasterAuth as MasterAuth,
    )
    from rmq.broker_server.security.cluster_auth import (
        ProofRefused as ProofRefused,
    )
    from rmq.broker_server.security.cluster_auth import (
        Session as Session,
    )
    from rmq.broker_server.security.cluster_auth import (
        SlaveAuth as SlaveAuth,
    )
    from rmq.broker_server.security.cluster_auth import (
        load_cluster_secret as load_cluster_secret,
    )
    from rmq.broker_server.security.cluster_auth import (
        signed as signed,
    )
    from rmq.broker_server.security.refusal_log import RefusalLog as RefusalLog
    from rmq.broker_server.security.request_auth import (
        Admission as Admission,
    )
    from rmq.broker_server.security.request_auth import (
        CallRefused as CallRefused,
    )
    from rmq.broker_server.security.request_auth import (
        RequestAuthenticator as RequestAuthenticator,
    )
    from rmq.broker_server.security.request_auth import (
        admit_account as admit_account,
    )
    from rmq.broker_server.security.request_auth import (
        denied as denied,
    )
    from rmq.broker_server.security.request_auth import (
        key_label as key_label,
    )
    from rmq.broker_server.security.request_auth import (
        peer_address as peer_address,
    )
    from rmq.broker_server.security.request_auth import (
        unauthenticated as unauthenticated,
    )
    from rmq.broker_server.security.rpc_permissions import (
        check_call as check_call,
    )
    from rmq.broker_server.security.rpc_permissions import (
        client_id_of as client_id_of,
    )
    from rmq.broker_server.security.server_security import ServerSecurity as ServerSecurity
    from rmq.broker_server.security.tls import ServerTls as ServerTls

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "acl": (
            "AccessDenied",
            "Acl",
            "Need",
            "Requirement",
            "ResourceKind",
        ),
        "caller": (
            "ANONYMOUS",
            "Caller",
            "account_key",
            "run_as",
        ),
        "cluster_auth": (
            "ClusterAuth",
            "Direction",
            "Exchange",
            "MasterAuth",
            "ProofRefused",
            "Session",
            "SlaveAuth",
            "load_cluster_secret",
            "signed",
        ),
        "refusal_log": ("RefusalLog",),
        "request_auth": (
            "Admission",
            "CallRefused",
            "RequestAuthenticator",
            "admit_account",
            "denied",
            "key_label",
            "peer_address",
            "unauthenticated",
        ),
        "rpc_permissions": (
            "check_call",
            "client_id_of",
        ),
        "server_security": ("ServerSecurity",),
        "tls": ("ServerTls",),
    },
)

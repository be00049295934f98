"""ACL for 4.x clients (docs/remoting-protocol.md, "ACL signature"; RocketMQ AclClientRPCHook and
PlainAccessValidator): a request carries AccessKey, Signature and optionally SecurityToken among
its extFields; the signature is base64(HMAC-SHA1(secret key, every other extFields value in the
order of their sorted names, then the body)). The access key is one of rmq's ACL accounts
(`--acl`), and the permission the request needs is the one its rmq.v1 equivalent needs
(rpc_permissions.check_call), checked on the names the request touches.

RocketMQ 4's scheme signs no time or nonce: a captured request can be replayed (SECURITY.md), so
expose the remoting port over a trusted network only. rmq's own SDK signs its requests on this
port with rmq's scheme instead (rmq.remoting.request_signing: target server, timestamp, nonce),
checked by the same RequestAuthenticator as the gRPC port's calls, so its requests cannot be
replayed; the permission check after either is the same."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable

from google.protobuf.message import Message

from rmq.broker_server.offsets.client_id_owners import ClientIdOwners, ClientIdTaken
from rmq.broker_server.security.acl import AccessDenied, Acl
from rmq.broker_server.security.caller import Caller
from rmq.broker_server.security.request_auth import CallRefused, RequestAuthenticator, key_label
from rmq.broker_server.security.rpc_permissions import check_call, client_id_of
from rmq.remoting import request_signing
from rmq.remoting.remoting_command import RemotingCommand

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"


def signing_content(ext_fields: dict[str, str], body: bytes) -> bytes:
    """AclUtils.combineRequestContent: the extFields values but the signature's, by sorted name,
    then the body."""
    values = "".join(value for name, value in sorted(ext_fields.items()) if name != SIGNATURE)
    return values.encode() + body


def sign(secret_key: str, content: bytes) -> str:
    return base64.b64encode(hmac.new(secret_key.encode(), content, hashlib.sha1).digest()).decode()


def signed(request: RemotingCommand, access_key: str, secret_key: str) -> RemotingCommand:
    """The request with AccessKey and Signature added (what a 4.x client's RPC hook does)."""
    request.ext_fields[ACCESS_KEY] = access_key
    request.ext_fields.pop(SIGNATURE, None)
    request.ext_fields[SIGNATURE] = sign(secret_key, signing_content(request.ext_fields, request.body))
    return request


class WrongTarget(AccessDenied):
    """An rmq-signed request for another server: the refusal names this one (extFields
    x-rmq-server), and the client signs for it from then on (a member whose id changed)."""

    def __init__(self, message: str, server_id: str) -> None:
        super().__init__(message)
        self.ext_fields = {request_signing.SERVER_FIELD: server_id}


class RemotingAuthenticator:
    def __init__(self, acl: Callable[[], Acl], client_ids: ClientIdOwners,
                 rmq_signing: RequestAuthenticator | None = None, rocketmq_signing: bool = True) -> None:
        """`client_ids`: the server's table of which account registered each consumer client id
        (shared with rmq.v1 calls: both reach the same consumer table). `rmq_signing`: the check
        of requests signed with rmq's scheme (None: only RocketMQ 4's is accepted).
        `rocketmq_signing`: RocketMQ 4's AccessKey/Signature (replayable: no time, nonce or
        target) is accepted too; False on a broker's default port, which only the SDK uses."""
        self._acl = acl
        self._client_ids = client_ids
        self._rmq_signing = rmq_signing
        self._rocketmq_signing = rocketmq_signing

    def caller(self, access_key: str) -> Caller:
        """The account an admitted request runs as (rmq.broker_server.security.caller)."""
        return Caller(access_key, self._acl)

    def authenticate(self, request: RemotingCommand, address: str) -> str:
        """The access key whose secret signed `request` from `address`; AccessDenied otherwise."""
        acl = self._acl()
        if not acl.address_allowed(address):
            raise AccessDenied(f"address {address} is not in globalWhiteRemoteAddresses")
        if request_signing.is_signed(request) and self._rmq_signing is not None:
            return self._rmq_signed(acl, request, address)
        if not self._rocketmq_signing:
            raise AccessDenied(
                "request is not signed with rmq's scheme: this port (the broker's default, an "
                "ephemeral one) does not accept RocketMQ 4.x AccessKey/Signature, which can be "
                "replayed; give the broker --remoting-listen HOST:PORT for 4.x clients"
            )
        access_key = request.ext_fields.get(ACCESS_KEY, "")
        given = request.ext_fields.get(SIGNATURE, "")
        if not access_key or not given:
            raise AccessDenied(
                "request is not signed: this server requires AccessKey and Signature "
                "(the client's session credentials)"
            )
        account = acl.account(access_key)
        expected = sign(
            account.secret_key if account is not None else "",
            signing_content(request.ext_fields, request.body),
        )
        if account is None or not hmac.compare_digest(expected, given):
            raise AccessDenied(
                f"signature not accepted for access key {key_label(access_key)}: "
                f"unknown access key or wrong secret key"
            )
        if not account.may_connect_from(address):
            raise AccessDenied(f"access key {key_label(access_key)} may not be used from address {address}")
        return access_key

    def _rmq_signed(self, acl: Acl, request: RemotingCommand, address: str) -> str:
        assert self._rmq_signing is not None
        try:
            method = request_signing.method(request.code)
            admission = self._rmq_signing.admit_metadata(method, request.ext_fields)
        except CallRefused as refusal:
            server = dict(refusal.trailing_metadata).get(request_signing.SERVER_FIELD)
            if server is not None:
                raise WrongTarget(refusal.message, server) from None
            raise AccessDenied(refusal.message) from None
        if not hmac.compare_digest(request_signing.content_sha256(request), admission.headers.content_sha256):
            raise AccessDenied("request does not match its x-rmq-content-sha256")
        account = acl.account(admission.access_key)
        if account is None or not account.may_connect_from(address):
            raise AccessDenied(
                f"access key {key_label(admission.access_key)} may not be used from address {address}"
            )
        return admission.access_key

    def authorize(self, access_key: str, method: str, request: Message) -> None:
        """AccessDenied unless the account may make the rmq.v1 call `method` (e.g.
        "/rmq.v1.MessagingService/SendMessage") with `request`."""
        check_call(self._acl(), access_key, method, request)
        client_id = client_id_of(method, request)
        if client_id:
            try:
                self._client_ids.claim(access_key, client_id, int(time.time() * 1000))
            except ClientIdTaken as error:
                raise AccessDenied(str(error)) from None

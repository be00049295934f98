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
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from google.protobuf.message import Message

from rmq import message_format as mf
from rmq.broker_server.offsets.client_id_owners import ClientIdOwners, ClientIdTaken
from rmq.broker_server.remoting.headers import SEND_HEADER_V2_NAMES
from rmq.broker_server.security.acl import AccessDenied, Acl
from rmq.broker_server.security.caller import Caller
from rmq.broker_server.security.request_auth import Admission, CallRefused, RequestAuthenticator, key_label
from rmq.broker_server.security.rpc_permissions import check_call, client_id_of
from rmq.remoting import request_signing
from rmq.remoting.remoting_command import RemotingCommand
from rmq.remoting.request_code import RequestCode

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
SEPARATORS = mf.NAME_VALUE_SEPARATOR + mf.PROPERTY_SEPARATOR


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


# RocketMQ 4's signature covers the values without their names: adjacent values (by sorted name),
# and the last value and the body, could trade bytes under one signature. Each value a 4.x request
# carries must therefore be of its field's exact form, so that moving a byte across a boundary
# leaves some value malformed (docs/security-model.md, "RocketMQ 4 signs values, not names").
CANONICAL_INT = re.compile(r"0|-?[1-9][0-9]{0,18}")
FLAGS = frozenset({"true", "false", "0", "1"})
PROPERTIES = re.compile(
    f"(?:[^{SEPARATORS}]+{mf.NAME_VALUE_SEPARATOR}[^{SEPARATORS}]*{mf.PROPERTY_SEPARATOR})*"
)
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")   # tab and line ends may stay (SQL92)
EXPRESSION_TYPES = frozenset({"TAG", "SQL92"})
INT_FIELDS = frozenset({
    "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset", "suspendTimeoutMillis",
    "subVersion", "bornTimestamp", "flag", "reconsumeTimes", "maxReconsumeTimes",
    "defaultTopicQueueNums", "offset", "delayLevel", "timestamp", "tranStateTableOffset",
    "commitLogOffset", "commitOrRollback",
})
FLAG_FIELDS = frozenset({"unitMode", "batch", "fromTransactionCheck", "jstackEnable"})
PROPERTIES_FIELDS = frozenset({"properties"})
# codes whose requests carry no body: one may not carry bytes the last value could have lost
BODILESS_CODES = frozenset({
    RequestCode.PULL_MESSAGE, RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
    RequestCode.UNREGISTER_CLIENT, RequestCode.CONSUMER_SEND_MSG_BACK, RequestCode.END_TRANSACTION,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.GET_ROUTEINFO_BY_TOPIC,
    RequestCode.GET_CONSUMER_RUNNING_INFO,
})


def check_field_values(header: RemotingCommand) -> None:
    """AccessDenied naming the first extFields value not of its field's exact form: a canonical
    integer, a flag (true/false/0/1), well-formed properties (each `name SOH value STX`), or text
    without control characters."""
    v2 = header.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)
    for name, value in header.ext_fields.items():
        field = SEND_HEADER_V2_NAMES.get(name, name) if v2 else name
        if field in INT_FIELDS:
            well_formed = CANONICAL_INT.fullmatch(value) is not None
        elif field in FLAG_FIELDS:
            well_formed = value in FLAGS
        elif field in PROPERTIES_FIELDS:
            well_formed = PROPERTIES.fullmatch(value) is not None
        elif field == "expressionType":
            well_formed = value in EXPRESSION_TYPES
        else:
            well_formed = CONTROL.search(value) is None
        if not well_formed:
            raise AccessDenied(f"header field {name} has a malformed value {value[:32]!r}: a value signed "
                               f"with AccessKey/Signature must be of its field's exact form")


def check_bodiless(request: RemotingCommand) -> None:
    if request.body and request.code in BODILESS_CODES:
        raise AccessDenied(
            f"request code {request.code} carries no body, this one has {len(request.body)} bytes"
        )


def _not_accepted(access_key: str) -> AccessDenied:
    return AccessDenied(
        f"signature not accepted for access key {key_label(access_key)}: "
        f"unknown access key or wrong secret key"
    )


def _not_from(access_key: str, address: str) -> AccessDenied:
    return AccessDenied(f"access key {key_label(access_key)} may not be used from address {address}")


@dataclass(frozen=True)
class HeaderProof:
    """What admit_header found: the account a request names, and for an rmq-signed one the
    admission whose content digest the body must match (None: a 4.x signature, checked with
    the body)."""

    access_key: str
    rmq: Admission | None


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

    def admit_header(self, header: RemotingCommand, address: str) -> HeaderProof:
        """What a request's header alone proves (its body not read yet): the address is allowed,
        an rmq-signed header's signature (which covers the body's digest), time, nonce and target
        hold, a 4.x header names an account and its field values are well formed; AccessDenied
        otherwise. The body is counted in the proof's account only after this."""
        acl = self._acl()
        if not acl.address_allowed(address):
            raise AccessDenied(f"address {address} is not in globalWhiteRemoteAddresses")
        if request_signing.is_signed(header) and self._rmq_signing is not None:
            return self._rmq_signed(acl, header, address)
        if not self._rocketmq_signing:
            raise AccessDenied(
                "request is not signed with rmq's scheme: this port (the broker's default, an "
                "ephemeral one) does not accept RocketMQ 4.x AccessKey/Signature, which can be "
                "replayed; give the broker --remoting-listen HOST:PORT for 4.x clients"
            )
        access_key = header.ext_fields.get(ACCESS_KEY, "")
        if not access_key or not header.ext_fields.get(SIGNATURE):
            raise AccessDenied(
                "request is not signed: this server requires AccessKey and Signature "
                "(the client's session credentials)"
            )
        if acl.account(access_key) is None:
            raise _not_accepted(access_key)
        check_field_values(header)
        return HeaderProof(access_key, None)

    def admit_body(self, proof: object, request: RemotingCommand, address: str) -> str:
        """The access key whose secret signed the whole of `request`, its header admitted with
        `proof` (admit_header); AccessDenied otherwise."""
        if not isinstance(proof, HeaderProof):
            raise AccessDenied("request was not admitted by its header")
        if proof.rmq is not None:
            digest = request_signing.content_sha256(request)
            if not hmac.compare_digest(digest, proof.rmq.headers.content_sha256):
                raise AccessDenied("request does not match its x-rmq-content-sha256")
            return proof.access_key
        account = self._acl().account(proof.access_key)
        expected = sign(
            account.secret_key if account is not None else "",
            signing_content(request.ext_fields, request.body),
        )
        if account is None or not hmac.compare_digest(expected, request.ext_fields.get(SIGNATURE, "")):
            raise _not_accepted(proof.access_key)
        if not account.may_connect_from(address):
            raise _not_from(proof.access_key, address)
        check_bodiless(request)
        return proof.access_key

    def _rmq_signed(self, acl: Acl, request: RemotingCommand, address: str) -> HeaderProof:
        assert self._rmq_signing is not None
        try:
            method = request_signing.method(request.code)
            admission = self._rmq_signing.admit_metadata(method, request.ext_fields)
        except CallRefused as refusal:
            server = dict(refusal.trailing_metadata).get(request_signing.SERVER_FIELD)
            if server is not None:
                raise WrongTarget(refusal.message, server) from None
            raise AccessDenied(refusal.message) from None
        account = acl.account(admission.access_key)
        if account is None or not account.may_connect_from(address):
            raise _not_from(admission.access_key, address)
        return HeaderProof(admission.access_key, admission)

    def check_client_owner(self, access_key: str, client_id: str) -> None:
        """AccessDenied unless the account registered `client_id` or is an admin account."""
        account = self._acl().account(access_key)
        if account is not None and account.admin:
            return
        if self._client_ids.owner(client_id) != access_key:
            raise AccessDenied(f"client id {client_id[:64]!r} is registered by another account")

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

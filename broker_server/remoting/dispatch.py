"""Serving request codes (docs/remoting-protocol.md, "Request codes", "Response codes"): a
processor names a handler per code; `RequestDispatcher` is the remoting server's gate (it admits
each request's header before the body is read: the signature, when an ACL is on, of everything
but the body) and then finishes the authentication with the body, runs the handler and turns
refusals into RocketMQ response codes with the reason as remark. Unknown codes are answered
REQUEST_CODE_NOT_SUPPORTED from the header, never with a closed connection."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from rmq.broker_server.errors import BrokerError, EdgeError
from rmq.broker_server.remoting.remoting_acl import RemotingAuthenticator, WrongTarget
from rmq.broker_server.remoting.remoting_server import Admission, CallContext, Channel
from rmq.broker_server.security.acl import AccessDenied
from rmq.broker_server.security.caller import run_as
from rmq.remoting.remoting_command import RemotingCommand
from rmq.remoting.request_code import RMQ_CODE_FIELD, ResponseCode
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)

# rmq.v1 Status codes as RocketMQ response codes (each member mapped: test_remoting_codec).
RESPONSE_CODES: dict[int, ResponseCode] = {
    rmq_pb2.OK: ResponseCode.SUCCESS,
    rmq_pb2.ILLEGAL_ARGUMENT: ResponseCode.SYSTEM_ERROR,
    rmq_pb2.TOPIC_NOT_EXIST: ResponseCode.TOPIC_NOT_EXIST,
    rmq_pb2.TOPIC_ILLEGAL: ResponseCode.SYSTEM_ERROR,
    rmq_pb2.TOPIC_ALREADY_EXISTS: ResponseCode.TOPIC_EXIST_ALREADY,
    rmq_pb2.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    rmq_pb2.MESSAGE_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    rmq_pb2.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    rmq_pb2.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    rmq_pb2.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    rmq_pb2.NO_PERMISSION: ResponseCode.NO_PERMISSION,
    rmq_pb2.QUERY_NOT_FOUND: ResponseCode.QUERY_NOT_FOUND,
    rmq_pb2.GROUP_ILLEGAL: ResponseCode.SYSTEM_ERROR,
    rmq_pb2.SYSTEM_ERROR: ResponseCode.SYSTEM_ERROR,
    rmq_pb2.SUBSCRIPTION_GROUP_NOT_EXIST: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    rmq_pb2.TOO_MANY_WATCHERS: ResponseCode.SYSTEM_BUSY,
    rmq_pb2.SUBSCRIPTION_PARSE_FAILED: ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    rmq_pb2.FILTER_NOT_SUPPORTED: ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    rmq_pb2.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    rmq_pb2.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    rmq_pb2.LIMIT_EXCEEDED: ResponseCode.SYSTEM_BUSY,
    rmq_pb2.WHEEL_TIMER_MSG_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,   # RocketMQ's mapping of the put status
    rmq_pb2.WHEEL_TIMER_FLOW_CONTROL: ResponseCode.SYSTEM_BUSY,
}


class Refusal(EdgeError):
    """A request answered with `code` and `remark` instead of being run; `rmq_code`: the rmq.v1
    Code it stands for, when a processor's Status gave one."""

    def __init__(self, code: ResponseCode, remark: str, rmq_code: int | None = None) -> None:
        super().__init__(code, remark)
        self.remark = remark
        self.rmq_code = rmq_code


def remoting_answer(error: BrokerError) -> tuple[ResponseCode, str, dict[str, str]]:
    """The response code, remark and extFields a refusal is answered with at this edge (the
    rmq.v1 code behind it in RMQ_CODE_FIELD, when there is one)."""
    if isinstance(error, Refusal):
        return error.code, error.remark, _rmq_code_field(error.rmq_code)
    if isinstance(error, EdgeError):   # another edge's own code: never raised behind this one
        log.error("remoting call failed with %r", error)
        return ResponseCode.SYSTEM_ERROR, f"internal error: {error.message}", {}
    return RESPONSE_CODES[error.code], error.message, _rmq_code_field(error.code)


def _rmq_code_field(code: int | None) -> dict[str, str]:
    return {} if code is None else {RMQ_CODE_FIELD: str(code)}


def _log_answer(context: CallContext, request: RemotingCommand, response: RemotingCommand | None) -> None:
    log.debug("remoting %s: request code %d -> %s %s", context.channel.address, request.code,
              response and response.code, response and response.remark)


def _unsupported(request: RemotingCommand) -> RemotingCommand:
    remark = f"request code {request.code} is not supported"
    return request.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark)


def refusal_of(status: rmq_pb2.Status) -> Refusal:
    return Refusal(RESPONSE_CODES[status.code], status.message, status.code)


def check_ok(response: Any) -> None:
    """Raise the Refusal for a processor's answer whose status is not OK."""
    if response.status.code != rmq_pb2.OK:
        raise refusal_of(response.status)


@dataclass
class Call:
    """One request being served: the context it runs in and the account that signed it."""

    context: CallContext
    request: RemotingCommand
    access_key: str

    @property
    def channel(self) -> Channel:
        return self.context.channel


Handler = Callable[[Call], Awaitable[RemotingCommand | None]]


class RequestDispatcher:
    def __init__(self, handlers: Mapping[int, Handler], authenticator: RemotingAuthenticator | None) -> None:
        self.handlers = handlers
        self.authenticator = authenticator

    async def process(self, context: CallContext, request: RemotingCommand) -> RemotingCommand | None:
        handler = self.handlers.get(request.code)
        if handler is None:
            return _unsupported(request)
        try:
            response = await handler(self._call(context, request))
        except (BrokerError, ValueError) as error:
            response = self._refusal(request, error)
        if log.isEnabledFor(logging.DEBUG):   # not a log call per request unless asked for
            _log_answer(context, request, response)
        return response

    def answer_now(self, context: CallContext, request: RemotingCommand,
                   handler: Callable[[Call], RemotingCommand | None]) -> RemotingCommand | None:
        """`process` for a request the caller's `handler` may answer at once (a plain call, on the
        read): authenticated, run as its account and refused exactly as there. None when the
        handler leaves it to `process` (which then authenticates it again)."""
        try:
            if self.authenticator is None:   # nothing to authenticate, no account to run as
                response = handler(Call(context, request, ""))
            else:   # the account it runs as (run_as) stays this request's: a context of its own
                response = contextvars.copy_context().run(self._handle_now, context, request, handler)
        except (BrokerError, ValueError) as error:
            response = self._refusal(request, error)
        if response is not None and log.isEnabledFor(logging.DEBUG):
            _log_answer(context, request, response)
        return response

    def _call(self, context: CallContext, request: RemotingCommand) -> Call:
        """The call of an authenticated request, run as its account (run_as) when an ACL is on."""
        access_key = self._authenticate(context, request)
        if self.authenticator is not None:   # what the request reaches is checked for this account
            run_as(self.authenticator.caller(access_key))
        return Call(context, request, access_key)

    def _handle_now(self, context: CallContext, request: RemotingCommand,
                    handler: Callable[[Call], RemotingCommand | None]) -> RemotingCommand | None:
        return handler(self._call(context, request))

    def _refusal(self, request: RemotingCommand, error: BrokerError | ValueError) -> RemotingCommand:
        if isinstance(error, BrokerError):
            return self._refused(request, error)
        # a header number out of its field's range
        return request.response(ResponseCode.SYSTEM_ERROR, f"bad request field: {error}")

    def admit_header(self, channel: Channel, header: RemotingCommand) -> Admission | RemotingCommand:
        """The remoting server's gate: a request of a code served here, from an address and
        signed by an account the ACL admits (everything the header alone shows), is admitted
        for its body to be read, counted in that account's share; anything else is answered now."""
        if header.code not in self.handlers:
            return _unsupported(header)
        if self.authenticator is None:
            return Admission(channel.host)
        try:
            proof = self.authenticator.admit_header(header, channel.host)
        except BrokerError as error:
            return self._refused(header, error)
        return Admission(proof.access_key, proof)

    @staticmethod
    def _refused(request: RemotingCommand, error: BrokerError) -> RemotingCommand:
        code, remark, fields = remoting_answer(error)
        if isinstance(error, WrongTarget):   # names this server's id, for the client to sign for it
            fields.update(error.ext_fields)
        return request.response(code, remark, fields or None)

    def _authenticate(self, context: CallContext, request: RemotingCommand) -> str:
        """The access key whose secret signed the whole request (its header admitted already)."""
        if self.authenticator is None:
            return ""
        admission = context.admission
        if admission is None:
            raise AccessDenied("request was not admitted by its header")
        return self.authenticator.admit_body(admission.proof, request, context.channel.host)

    def authorize_client(self, call: Call, client_id: str) -> None:
        """AccessDenied unless the call's account registered `client_id` (or is an admin)."""
        if self.authenticator is not None:
            self.authenticator.check_client_owner(call.access_key, client_id)

    def authorize(self, call: Call, method: str, request: Message) -> None:
        """AccessDenied unless the call's account may make the rmq.v1 call `method` with `request`."""
        if self.authenticator is not None:
            self.authenticator.authorize(call.access_key, method, request)

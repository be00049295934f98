"""The console's routes: HTML pages for a person and the same data as JSON under /api/.

Sign-in: every browser session gets a cookie naming its own client. Without signing in a session
uses the console's own identity (`rmq console`'s --access-key, or none); signing in with an
account's access and secret key makes every call of that session signed as that account, so a
cluster with an ACL shows each person only what their account may see. Sessions are bounded
(MAX_SESSIONS, idle ones expire) and every form carries the session's CSRF token."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from rmq.auth import ClientSecurity
from rmq.cli.console.cluster_view import ClusterView, NotFound
from rmq.cli.console.history import History
from rmq.cli.output import timestamp
from rmq.connector.client import RmqClient
from rmq.connector.errors import RmqError, RmqUnavailable
from rmq.v1 import rmq_pb2

HERE = Path(__file__).parent
COOKIE = "rmq_console"
MAX_ANONYMOUS_SESSIONS = 256       # visitors who did not sign in (each only a CSRF token)
MAX_SIGNED_IN_SESSIONS = 256       # sessions signed in as an account (each its own client)
MAX_SESSIONS_PER_ACCOUNT = 8       # ... of which one account may hold
SESSION_IDLE_S = 30 * 60
MAX_RESENT_MARKS = 1_000
FORBIDDEN = (rmq_pb2.NO_PERMISSION,)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclass(frozen=True)
class ConsoleSettings:
    endpoints: str
    security: ClientSecurity = field(default_factory=ClientSecurity)   # the charts' identity
    hosts: tuple[str, ...] = LOOPBACK_HOSTS    # Host header names answered (DNS rebinding)


@dataclass
class Session:
    view: ClusterView
    account: str                      # "" until signed in
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    used: float = field(default_factory=time.monotonic)
    resent: OrderedDict[str, int] = field(default_factory=OrderedDict)   # dead letter id -> resent at (ms)

    def mark_resent(self, msg_ids: list[str]) -> None:
        """Remember (the last MAX_RESENT_MARKS) dead letters this session resent, for the DLQ page."""
        now_ms = int(time.time() * 1000)
        for msg_id in msg_ids:
            self.resent.pop(msg_id, None)
            self.resent[msg_id] = now_ms
        while len(self.resent) > MAX_RESENT_MARKS:
            self.resent.popitem(last=False)


class Sessions:
    """Two bounded pools: visitors who did not sign in share one unsigned client (the console's own
    identity only samples the charts) and are evicted among themselves, so cookieless requests
    never push a signed-in person out; signed-in sessions are bounded in total and per account."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        unsigned = _unsigned(settings).client_kwargs()
        self._anonymous_view = ClusterView(RmqClient(settings.endpoints, **unsigned))
        self._anonymous: OrderedDict[str, Session] = OrderedDict()
        self._signed_in: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str | None) -> tuple[str, Session]:
        with self._lock:
            now = time.monotonic()
            for pool in (self._anonymous, self._signed_in):
                for stale in [t for t, s in pool.items() if now - s.used > SESSION_IDLE_S]:
                    self._close(stale)
                if token is not None and token in pool:
                    session = pool[token]
                    session.used = now
                    pool.move_to_end(token)
                    return token, session
            token = secrets.token_urlsafe(24)
            while len(self._anonymous) >= MAX_ANONYMOUS_SESSIONS:
                self._close(next(iter(self._anonymous)))
            session = self._anonymous[token] = Session(self._anonymous_view, "")
            return token, session

    def sign_in(self, access_key: str, secret_key: str) -> tuple[str, Session]:
        """A session signed as the account, once the cluster accepted a call signed with its
        secret key (RmqError UNAUTHENTICATED otherwise; ValueError for a malformed pair)."""
        security = dataclasses.replace(self.settings.security, access_key=access_key or None,
                                       secret_key=secret_key or None)
        client = RmqClient(self.settings.endpoints, **security.client_kwargs())
        try:
            client.list_topics()
        except RmqError as error:
            if isinstance(error, RmqUnavailable) or _unauthenticated(error):
                client.close()
                raise
        token = secrets.token_urlsafe(24)
        with self._lock:
            mine = [t for t, s in self._signed_in.items() if s.account == access_key]
            if len(mine) >= MAX_SESSIONS_PER_ACCOUNT:
                self._close(mine[0])
            while len(self._signed_in) >= MAX_SIGNED_IN_SESSIONS:
                self._close(next(iter(self._signed_in)))
            session = self._signed_in[token] = Session(ClusterView(client), access_key)
        return token, session

    def close(self, token: str) -> None:
        with self._lock:
            self._close(token)

    def _close(self, token: str) -> None:
        self._anonymous.pop(token, None)
        session = self._signed_in.pop(token, None)
        if session is not None:
            session.view.client.close()

    def close_all(self) -> None:
        with self._lock:
            for token in list(self._signed_in):
                self._close(token)
            self._anonymous.clear()
            self._anonymous_view.client.close()


def _unsigned(settings: ConsoleSettings) -> ClientSecurity:
    """The console's TLS settings without its account."""
    return dataclasses.replace(settings.security, access_key=None, secret_key=None)


def create_app(settings: ConsoleSettings, history: History | None = None) -> Starlette:
    sessions = Sessions(settings)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["time"] = timestamp
    charts = history

    Handler = Callable[[Request, Session], tuple[str, dict[str, Any]]]

    def page(handler: Handler) -> Callable[[Request], Response]:
        """An HTML page: the handler returns (template, data); the API twin returns the data."""
        def endpoint(request: Request) -> Response:
            token, session = sessions.get(request.cookies.get(COOKIE))
            api = request.url.path.startswith("/api/")
            try:
                name, data = handler(request, session)
            except (NotFound, ValueError, RmqError) as error:
                return failure(request, token, session, api, error)
            return _answer(request, templates, token, session, api, name, data, 200)
        return endpoint

    def failure(request: Request, token: str, session: Session, api: bool,
                error: NotFound | ValueError | RmqError) -> Response:
        """The error page (or JSON) of a page that could not be answered."""
        if isinstance(error, NotFound):
            return _answer(request, templates, token, session, api, "error.html",
                           {"title": "Not found", "message": str(error)}, 404)
        if isinstance(error, RmqUnavailable):
            return _answer(request, templates, token, session, api, "error.html",
                           {"title": "Cluster unreachable", "message": str(error)}, 503)
        if isinstance(error, RmqError):
            status = 403 if _refused_identity(error) else 400
            return _answer(request, templates, token, session, api, "error.html",
                           {"title": "Refused", "message": str(error), "sign_in": status == 403}, status)
        return _answer(request, templates, token, session, api, "error.html",
                       {"title": "Bad request", "message": str(error)}, 400)

    def with_charts(request: Request, data: dict[str, Any]) -> dict[str, Any]:
        """A page's data with what its charts need (HTML pages, while the console samples)."""
        if charts is not None and not request.url.path.startswith("/api/"):
            return data | {"charts": True, "chart_interval": charts.interval_s}
        return data

    def cluster(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        return "cluster.html", with_charts(request, session.view.cluster())

    def topics(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        return "topics.html", session.view.topics(_int(request.query_params.get("page", "0"), "page"))

    def topic(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        return "topic.html", with_charts(request, session.view.topic(request.path_params["topic"]))

    async def create_topic(request: Request) -> Response:
        form, token, session = await _form(request, sessions)
        name, queues = str(form.get("topic", "")).strip(), _int(str(form.get("queues", "8")), "queues")
        return _after(lambda: session.view.create_topic(name, queues), f"/topics/{name}", token, request,
                      templates, session)

    async def topic_action(request: Request) -> Response:
        """The topic page's forms: permission, delete, send a test message."""
        form, token, session = await _form(request, sessions)
        name, action = request.path_params["topic"], request.path_params["action"]
        view = session.view
        actions: dict[str, tuple[Callable[[], object], str]] = {
            "permission": (lambda: view.set_permission(name, str(form.get("perm", ""))),
                           f"/topics/{name}"),
            "delete": (lambda: view.delete_topic(name), "/topics"),
            "send": (lambda: view.send_test_message(name, *(str(form.get(field, ""))
                                                           for field in ("body", "tags", "keys"))),
                     f"/messages?topic={name}"),
        }
        if action not in actions:
            return failure(request, token, session, False, NotFound(f"no topic action {action}"))
        run, location = actions[action]
        return _after(run, location, token, request, templates, session)

    def groups(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        return "groups.html", session.view.groups()

    def group(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        group_name = request.path_params["group"]
        producers = request.query_params.get("producers", group_name)
        return "group.html", with_charts(request, session.view.group(group_name, producers))

    async def reset(request: Request) -> Response:
        form, token, session = await _form(request, sessions)
        group_name = request.path_params["group"]
        topic_name, to, force = str(form.get("topic", "")), str(form.get("to", "")), form.get("force") == "on"
        return _after(lambda: session.view.reset(group_name, topic_name, to, force),
                      f"/groups/{group_name}", token, request, templates, session)

    async def group_settings(request: Request) -> Response:
        form, token, session = await _form(request, sessions)
        group_name = request.path_params["group"]
        enable = form.get("consume_enable") == "on"
        retries = str(form.get("retry_max_times", ""))
        return _after(lambda: session.view.update_settings(group_name, enable,
                                                           _int(retries, "retry_max_times")),
                      f"/groups/{group_name}", token, request, templates, session)

    def messages(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        query = request.query_params
        if query.get("msg_id"):
            return "message.html", session.view.message(query["msg_id"].strip())
        topic_name = query.get("topic", "")
        if not topic_name:
            return "messages.html", {"topic": "", "key": "", "page": 0, "messages": []}
        begin = _optional_int(query.get("begin"), "begin")
        end = _optional_int(query.get("end"), "end")
        return "messages.html", session.view.messages(topic_name, query.get("key", ""), begin, end,
                                                      _int(query.get("page", "0"), "page"))

    def message(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        return "message.html", session.view.message(request.path_params["msg_id"])

    async def resend_message(request: Request) -> Response:
        form, token, session = await _form(request, sessions)
        msg_id, group_name = request.path_params["msg_id"], str(form.get("group", ""))
        return _after(lambda: session.view.resend_message(msg_id, group_name), f"/messages/{msg_id}", token,
                      request, templates, session)

    def dlq(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        page_number = _int(request.query_params.get("page", "0"), "page")
        data = session.view.dlq(request.path_params["group"], page_number)
        ids = {m["msg_id"] for m in data["messages"]} | {m["origin_msg_id"] for m in data["messages"]}
        return "dlq.html", data | {"resent": {i: at for i, at in session.resent.items() if i in ids}}

    async def resend(request: Request) -> Response:
        """Resend the selected dead letters (`msg_id`, repeated); the page then marks them."""
        token, session = sessions.get(request.cookies.get(COOKIE))
        form = await request.form()
        _check_csrf(str(form.get("csrf", "")), session)
        group_name = request.path_params["group"]
        msg_ids = [str(value) for value in form.getlist("msg_id") if str(value)]
        if not msg_ids:
            return _answer(request, templates, token, session, False, "error.html",
                           {"title": "Bad request", "message": "select at least one dead letter to resend"},
                           400)
        page = _int(str(form.get("page", "0")), "page")

        def resend_and_mark() -> None:
            session.view.resend(group_name, msg_ids, form.get("to") == "group")
            session.mark_resent(msg_ids)
        return _after(resend_and_mark, f"/dlq/{group_name}?page={page}", token, request, templates, session)

    def export_dlq(request: Request) -> Response:
        """Every dead letter of the group as JSON lines (one message_dict per line), read page by page."""
        token, session = sessions.get(request.cookies.get(COOKIE))
        group_name = request.path_params["group"]
        try:
            session.view.dlq(group_name)          # 404 / 403 / 503 before the stream starts
        except (NotFound, RmqError) as error:
            return failure(request, token, session, True, error)
        lines = (json.dumps(letter) + "\n" for letter in session.view.all_dead_letters(group_name))
        attachment = {"Content-Disposition": f'attachment; filename="dlq-{group_name}.jsonl"'}
        stream = StreamingResponse(iterate_in_threadpool(lines), media_type="application/x-ndjson",
                                   headers=attachment)
        return _with_cookie(stream, token)

    def acl(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        return "acl.html", session.view.acl()

    def sign_in_page(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        return "signin.html", {"message": ""}

    async def sign_in(request: Request) -> Response:
        form, token, session = await _form(request, sessions)
        access_key, secret_key = str(form.get("access_key", "")).strip(), str(form.get("secret_key", ""))
        try:
            if not access_key:
                raise ValueError("give an account's access key and its secret key")
            new_token, _ = await run_in_threadpool(sessions.sign_in, access_key, secret_key)
        except ValueError as error:
            return _answer(request, templates, token, session, False, "signin.html",
                           {"message": str(error)}, 400)
        except RmqUnavailable as error:
            return _answer(request, templates, token, session, False, "signin.html",
                           {"message": f"cannot check the account, the cluster is unreachable: {error}"}, 503)
        except RmqError as error:
            return _answer(request, templates, token, session, False, "signin.html",
                           {"message": f"the cluster refused {access_key}: wrong access key or secret key "
                                       f"({error.message})"}, 403)
        sessions.close(token)
        return _with_cookie(RedirectResponse("/", status_code=303), new_token)

    async def sign_out(request: Request) -> Response:
        _, token, _ = await _form(request, sessions)
        sessions.close(token)
        return RedirectResponse("/", status_code=303)

    def charts_api(request: Request, session: Session) -> tuple[str, dict[str, Any]]:
        if charts is None:
            return "", {"tps": {}, "lag": {}, "consume": {}}
        return "", dict(session.view.visible_series(charts.snapshot())) | {"error": charts.error}

    routes: list[Route | Mount] = []
    pages: list[tuple[str, Handler]] = [
        ("/", cluster), ("/topics", topics), ("/topics/{topic}", topic), ("/groups", groups),
        ("/groups/{group}", group), ("/messages", messages), ("/messages/{msg_id}", message),
        ("/dlq/{group}", dlq), ("/acl", acl)]
    for path, handler in pages:
        routes.append(Route(path, page(handler)))
        routes.append(Route("/api" + ("/cluster" if path == "/" else path), page(handler)))
    routes += [
        Route("/api/charts", page(charts_api)),
        Route("/api/dlq/{group}/export", export_dlq),
        Route("/sign-in", page(sign_in_page)),
        Route("/sign-in", sign_in, methods=["POST"]),
        Route("/sign-out", sign_out, methods=["POST"]),
        Route("/topics", create_topic, methods=["POST"]),
        Route("/topics/{topic}/{action}", topic_action, methods=["POST"]),
        Route("/groups/{group}/reset", reset, methods=["POST"]),
        Route("/groups/{group}/settings", group_settings, methods=["POST"]),
        Route("/dlq/{group}/resend", resend, methods=["POST"]),
        Route("/messages/{msg_id}/resend", resend_message, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        sessions.close_all()

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={StaleForm: _stale_form},
                    middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(settings.hosts))])
    return app


class StaleForm(Exception):
    """A posted form without the session's CSRF token (stale, or from another site)."""


async def _form(request: Request, sessions: Sessions) -> tuple[dict[str, Any], str, Session]:
    """The posted form of a session whose CSRF token it carries; StaleForm otherwise."""
    token, session = sessions.get(request.cookies.get(COOKIE))
    form = dict(await request.form())
    _check_csrf(str(form.get("csrf", "")), session)
    return form, token, session


def _check_csrf(posted: str, session: Session) -> None:
    if not secrets.compare_digest(posted, session.csrf):
        raise StaleForm("the form is stale or from another site: reload the page and try again")


def _stale_form(request: Request, error: Exception) -> Response:
    return JSONResponse({"error": str(error)}, status_code=403)


def _after(action: Callable[[], object], location: str, token: str, request: Request,
           templates: Jinja2Templates, session: Session) -> Response:
    """Run a form's action, then show `location`; a refusal is shown on an error page."""
    try:
        action()
    except NotFound as missing:
        return _answer(request, templates, token, session, False, "error.html",
                       {"title": "Not found", "message": str(missing)}, 404)
    except (RmqError, ValueError) as error:
        return _answer(request, templates, token, session, False, "error.html",
                       {"title": "Refused", "message": str(error)}, 400)
    return _with_cookie(RedirectResponse(location, status_code=303), token)


def _answer(request: Request, templates: Jinja2Templates, token: str, session: Session, api: bool,
            template: str, data: dict[str, Any], status: int) -> Response:
    if api:
        response: Response = JSONResponse(data if status == 200 else {"error": data.get("message", "")},
                                          status_code=status)
    else:
        context = {"request": request, "account": session.account, "csrf": session.csrf, **data}
        response = templates.TemplateResponse(request, template, context, status_code=status)
    return _with_cookie(response, token)


def _with_cookie(response: Response, token: str) -> Response:
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
    return response


def _refused_identity(error: RmqError) -> bool:
    """The account may not do this, or the call carried no (valid) signature: signing in helps."""
    return error.code in FORBIDDEN or _unauthenticated(error)


def _unauthenticated(error: RmqError) -> bool:
    """The cluster did not accept the call's signature (unknown access key, wrong secret key)."""
    return "UNAUTHENTICATED" in error.message


def _int(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {text!r}") from None
    if value < 0:
        raise ValueError(f"{name} must not be negative")
    return value


def _optional_int(text: str | None, name: str) -> int | None:
    return None if not text else _int(text, name)


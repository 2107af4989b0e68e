"""Thin HTML handlers of the human viewer: one page-data call, then a template; and the
session page's live view, its attempts' news as server-sent events."""

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.datastructures import ResponseHeader, State
from litestar.exceptions import HTTPException, PermissionDeniedException, ValidationException
from litestar.params import Parameter, QueryParameter
from litestar.response import Redirect, ServerSentEvent, Template
from litestar.response.sse import ServerSentEventMessage

from ctxd import redact
from ctxd.errors import Invalid, NotFound
from ctxd.http.api import SessionPath, Version, use
from ctxd.models import SESSION_ID_PATTERN
from ctxd.render import pagedata
from ctxd.render.html import CSP, ENV, HEADERS
from ctxd.snapshotter.news import WAIT_MAX_S, stopping
from ctxd.snapshotter.snapshotter import Snapshotter
from ctxd.usecases.search import OFFSET_MAX

HTML = "text/html"  # Litestar appends "; charset=utf-8" to text types
# The session page's one script (templates/_live.html), allowed by its hash and nothing else;
# it may open the page's news stream (connect-src 'self').
_LIVE = hashlib.sha256(ENV.get_template("_live.html").render().encode()).digest()
LIVE_CSP = f"{CSP}; script-src 'sha256-{base64.b64encode(_LIVE).decode()}'; connect-src 'self'"


def snapshotter(state: State) -> Snapshotter:
    """The pages read through the snapshotter directly: a reader's visit is not activity."""
    return state.snapshotter


def _error_page(status: int, title: str, detail: str) -> Template:
    context = {"error": {"status": status, "title": title, "detail": redact.text(detail)[:2000]}}
    return Template(
        "base.html", context=context, status_code=status, headers=HEADERS, media_type=HTML
    )


def _not_found(_: Request, exc: NotFound) -> Template:
    return _error_page(404, "not found", str(exc))


# Handler argument names a reader never typed, shown as the query or path names they did type.
_SHOWN_AS = {"start": "from", "end": "to", "n": "version"}


def _invalid(_: Request, exc: ValidationException) -> Template:
    problems = [
        f"{_SHOWN_AS.get(item.get('key', ''), item.get('key') or 'input')}: "
        f"{item.get('message', 'invalid')}"
        for item in (exc.extra if isinstance(exc.extra, list) else [])
        if isinstance(item, dict)
    ]
    return _error_page(400, "bad request", "; ".join(problems) or str(exc.detail))


def _bad_query(_: Request, exc: Invalid) -> Template:
    return _error_page(400, "bad query", str(exc))


def _http(_: Request, exc: HTTPException) -> Template:
    return _error_page(exc.status_code, "refused", str(exc.detail))


def _same_origin(request: Request) -> None:
    """A page on another site must not make the reader's browser take snapshots here."""
    origin = request.headers.get("origin")
    site = request.headers.get("sec-fetch-site")
    here = f"{request.url.scheme}://{request.headers.get('host', '')}"
    if (origin not in (None, "null") and origin != here) or site == "cross-site":
        raise PermissionDeniedException("a snapshot can only be taken from ctxd's own pages")


class PageController(Controller):
    path = ""
    include_in_schema = False
    response_headers = [ResponseHeader(name=k, value=v) for k, v in HEADERS.items()]
    exception_handlers = {
        NotFound: _not_found,
        Invalid: _bad_query,
        ValidationException: _invalid,
        HTTPException: _http,
    }

    @get("/", sync_to_thread=True, media_type=HTML)
    def index(self, state: State) -> Template:
        rows = pagedata.index(snapshotter(state).store)
        return Template("index.html", context={"rows": rows})

    @get(
        "/s/{sid:str}",
        sync_to_thread=True,
        media_type=HTML,
        response_headers=[ResponseHeader(name="Content-Security-Policy", value=LIVE_CSP)],
    )
    def session(self, state: State, sid: SessionPath) -> Template:
        page = pagedata.session_page(snapshotter(state), sid)
        return Template("session.html", context={"sid": sid, "page": page})

    @get("/s/{sid:str}/news")
    async def news(
        self,
        state: State,
        sid: SessionPath,
        since: Annotated[int, Parameter(ge=0, le=2**63 - 1)] = 0,
        last_event_id: Annotated[
            int | None, Parameter(header="last-event-id", ge=0, le=2**63 - 1)
        ] = None,
    ) -> ServerSentEvent:
        """The session page's live view: each outcome of its attempts after version `since`
        (or the stream's last event, when the browser reconnects) as an `outcome` event, as
        it is stored. Each reader waits on the news board; a comment now and then tells a
        closed connection."""
        cases = use(state)
        await cases.news(sid, 0, None, 0, reader=True)  # an unknown session: 404 before the stream

        async def told() -> AsyncIterator[ServerSentEventMessage]:
            cursor = last_event_id if last_event_id is not None else since
            while True:
                got = await cases.news(sid, cursor, None, WAIT_MAX_S, reader=True)
                for one in got.news:
                    data = json.dumps(one.model_dump(mode="json"))
                    yield ServerSentEventMessage(data=data, event="outcome", id=one.version)
                if not got.news:
                    if stopping():  # answered by the stop, not by news: the stream ends
                        return
                    yield ServerSentEventMessage(comment="nothing new")
                cursor = got.version

        return ServerSentEvent(told())

    @get("/search", sync_to_thread=True, media_type=HTML)
    def search(
        self,
        state: State,
        q: Annotated[str, QueryParameter(max_length=4096)] = "",
        s: Annotated[str | None, Parameter(pattern=SESSION_ID_PATTERN, max_length=64)] = None,
        offset: Annotated[int, Parameter(ge=0, le=OFFSET_MAX)] = 0,
    ) -> Template:
        page = pagedata.search_page(snapshotter(state).store, s or None, q, offset)
        return Template("search.html", context={"page": page})

    @get("/s/{sid:str}/v/{n:int}", sync_to_thread=True, media_type=HTML)
    def version(self, state: State, sid: SessionPath, n: Version) -> Template:
        page = pagedata.version_page(snapshotter(state).store, sid, n)
        return Template("version.html", context={"sid": sid, "page": page})

    @get("/s/{sid:str}/diff", sync_to_thread=True, media_type=HTML)
    def diff(
        self,
        state: State,
        sid: SessionPath,
        start: Annotated[int | None, QueryParameter(name="from", ge=1, le=2**63 - 1)] = None,
        end: Annotated[int | None, QueryParameter(name="to", ge=1, le=2**63 - 1)] = None,
    ) -> Template:
        page = pagedata.diff_page(snapshotter(state), sid, start, end)
        return Template("diff.html", context={"sid": sid, "page": page})

    @get("/s/{sid:str}/now", sync_to_thread=True, media_type=HTML)
    def now(self, state: State, sid: SessionPath) -> Template:
        page = pagedata.now_page(snapshotter(state), sid)
        return Template("now.html", context={"sid": sid, "page": page})

    @post("/s/{sid:str}/now", sync_to_thread=True)
    def take(self, state: State, request: Request[Any, Any, Any], sid: SessionPath) -> Redirect:
        _same_origin(request)
        snapshot = use(state).take(sid, note="taken from the now page")
        return Redirect(f"/s/{sid}/v/{snapshot.header.version}", status_code=303)

"""The admin HTTP server over real sockets on 127.0.0.1: routing, errors, keep-alive, limits,
and survival under garbage.

Why: the admin port is how operators and the test harness look into a bookie, and it shares
the bookie's process, so a misbehaving client must never take it (or the bookie) down. Most
tests talk through an ``h11`` client, which also checks that every response is well-formed
HTTP/1.1; a few send raw bytes where a well-behaved client could not.
"""

from __future__ import annotations

import json
import logging
import re
import urllib.request
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from typing import TYPE_CHECKING

import h11
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from bookiesim.bookie.http_admin import (
    AdminRequest,
    AdminResponse,
    AdminRouter,
    json_response,
    metrics_handler,
    serve_admin,
    text_response,
)
from bookiesim.bookie.metrics import BookieMetrics

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

HOST = "127.0.0.1"
# Generous: the machine is shared, and these only bound hangs, they are not measurements.
DEADLINE = 10.0

# --- Fixtures and a small client ----------------------------------------------------------


class Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> object:
        assert self.headers["content-type"] == "application/json"
        return json.loads(self.body)


class Client:
    """An HTTP/1.1 client on one connection, driven by h11 (keep-alive between requests)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)

    async def request(
        self,
        method: str,
        target: str,
        body: bytes = b"",
        headers: list[tuple[str, str]] | None = None,
    ) -> Reply:
        if self.conn.our_state is h11.DONE:
            self.conn.start_next_cycle()
        all_headers = [("Host", HOST), ("Content-Length", str(len(body))), *(headers or [])]
        data = self.conn.send(h11.Request(method=method, target=target, headers=all_headers))
        assert data is not None
        data += self.conn.send(h11.Data(data=body)) or b""
        data += self.conn.send(h11.EndOfMessage()) or b""
        with trio.fail_after(DEADLINE):
            await self.stream.send_all(data)
            return await self.receive()

    async def receive(self) -> Reply:
        status = 0
        headers: dict[str, str] = {}
        body = bytearray()
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(await self.stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
                headers = {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.InformationalResponse):
                assert event.status_code == 100
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return Reply(status, headers, bytes(body))
            else:
                raise AssertionError(f"unexpected {event!r}")

    async def server_closed(self) -> bool:
        """Whether the server closes the connection (EOF) within the deadline."""
        with trio.move_on_after(DEADLINE):
            while await self.stream.receive_some(65536):
                pass
            return True
        return False


@asynccontextmanager
async def connect(port: int) -> AsyncIterator[Client]:
    stream = await trio.open_tcp_stream(HOST, port)
    try:
        yield Client(stream)
    finally:
        await stream.aclose()


async def raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data``, half-close, and return everything the server sends until it closes."""
    stream = await trio.open_tcp_stream(HOST, port)
    received = bytearray()
    try:
        with trio.fail_after(DEADLINE):
            try:
                await stream.send_all(data)
                await stream.send_eof()
                while chunk := await stream.receive_some(65536):
                    received += chunk
            except trio.BrokenResourceError:
                pass  # the server may reset a connection that sent a lot of garbage
    finally:
        await stream.aclose()
    return bytes(received)


async def info(request: AdminRequest) -> AdminResponse:
    return json_response({"bookieId": "127.0.0.1:3181", "state": "writable"})


async def echo(request: AdminRequest) -> AdminResponse:
    return json_response(
        {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "body": request.body.decode("latin-1"),
            "x-test": request.headers.get("x-test"),
        }
    )


async def boom(request: AdminRequest) -> AdminResponse:
    raise RuntimeError("disk on fire")


async def hello(request: AdminRequest) -> AdminResponse:
    return text_response("hello\n")


def make_router(metrics: BookieMetrics | None = None) -> AdminRouter:
    router = AdminRouter()
    router.add("GET", "/api/v1/bookie/info", info)
    router.add("GET", "/echo", echo)
    router.add("POST", "/echo", echo)
    router.add("GET", "/echo path/ü", echo)
    router.add("GET", "/boom", boom)
    router.add("GET", "/hello", hello)
    router.add("GET", "/metrics", metrics_handler((metrics or BookieMetrics()).render))
    return router


@pytest.fixture
async def port(nursery: trio.Nursery) -> int:
    bound: int = await nursery.start(partial(serve_admin, make_router(), HOST, 0))
    return bound


@contextmanager
def errors_logged() -> Iterator[list[logging.LogRecord]]:
    """ERROR records of the admin server, without pytest's function-scoped caplog (hypothesis)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("bookiesim.bookie.http_admin")
    handler = Keep(logging.ERROR)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


# --- Routing ------------------------------------------------------------------------------


async def test_get_json(port: int) -> None:
    async with connect(port) as client:
        reply = await client.request("GET", "/api/v1/bookie/info")
    assert reply.status == 200
    assert reply.json() == {"bookieId": "127.0.0.1:3181", "state": "writable"}
    assert "date" in reply.headers


async def test_query_body_headers_and_decoded_path_reach_the_handler(port: int) -> None:
    async with connect(port) as client:
        reply = await client.request(
            "POST", "/echo?a=1&flag&a=2&b=x%20y", b"payload", [("X-Test", "yes")]
        )
        assert reply.status == 200
        assert reply.json() == {
            "method": "POST",
            "path": "/echo",
            "query": {"a": "2", "flag": "", "b": "x y"},
            "body": "payload",
            "x-test": "yes",
        }
        reply = await client.request("GET", "/echo%20path/%C3%BC")
        assert reply.status == 200
        assert reply.json() == {
            "method": "GET",
            "path": "/echo path/ü",
            "query": {},
            "body": "",
            "x-test": None,
        }


async def test_request_target_forms(port: int) -> None:
    async with connect(port) as client:
        # Absolute form (as sent to a proxy) names the same resource.
        reply = await client.request("GET", f"http://{HOST}:{port}/echo?x=1")
        assert reply.json() == {
            "method": "GET",
            "path": "/echo",
            "query": {"x": "1"},
            "body": "",
            "x-test": None,
        }
        # A doubled slash is part of the path, not a host name.
        reply = await client.request("GET", "//echo")
        assert reply.status == 404
        assert reply.json() == {"error": "no such path: //echo"}


async def test_unknown_path_is_404_json(port: int) -> None:
    async with connect(port) as client:
        reply = await client.request("GET", "/api/v1/nope")
    assert reply.status == 404
    assert reply.json() == {"error": "no such path: /api/v1/nope"}


async def test_wrong_method_is_405_with_allow(port: int) -> None:
    async with connect(port) as client:
        reply = await client.request("DELETE", "/api/v1/bookie/info")
        assert reply.status == 405
        assert reply.headers["allow"] == "GET, HEAD"
        assert "DELETE" in str(reply.json())
        reply = await client.request("PUT", "/echo")
        assert reply.headers["allow"] == "GET, HEAD, POST"


async def test_handler_exception_is_500_and_the_server_keeps_serving(
    port: int, caplog: pytest.LogCaptureFixture
) -> None:
    async with connect(port) as client:
        reply = await client.request("GET", "/boom")
        assert reply.status == 500
        assert reply.json() == {"error": "RuntimeError: disk on fire"}
        # Same connection, next request.
        reply = await client.request("GET", "/api/v1/bookie/info")
        assert reply.status == 200
    async with connect(port) as client:
        assert (await client.request("GET", "/hello")).body == b"hello\n"
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failures) == 1
    assert "GET /boom failed" in failures[0].getMessage()
    assert failures[0].exc_info is not None


async def test_head_has_headers_and_no_body(port: int) -> None:
    async with connect(port) as client:
        reply = await client.request("HEAD", "/hello")
        assert reply.status == 200
        assert reply.headers["content-length"] == "6"
        assert reply.body == b""
        # h11 framed the bodiless reply correctly: the connection is still usable.
        assert (await client.request("GET", "/hello")).body == b"hello\n"


async def test_dispatch_without_sockets() -> None:
    router = make_router()
    reply = await router.dispatch(AdminRequest("GET", "/api/v1/bookie/info"))
    assert reply.status == 200
    assert (await router.dispatch(AdminRequest("GET", "/x"))).status == 404
    assert (await router.dispatch(AdminRequest("POST", "/boom"))).status == 405
    assert (await router.dispatch(AdminRequest("GET", "/boom"))).status == 500
    assert router.allowed("/echo") == ["GET", "HEAD", "POST"]
    assert router.allowed("/nowhere") == []


def test_router_rejects_bad_and_duplicate_routes() -> None:
    router = AdminRouter()
    router.add("GET", "/a", info)
    with pytest.raises(ValueError, match="already routed"):
        router.add("GET", "/a", echo)
    with pytest.raises(ValueError, match="upper-case"):
        router.add("get", "/b", info)
    with pytest.raises(ValueError, match="start with '/'"):
        router.add("GET", "b", info)


# --- Connections --------------------------------------------------------------------------


async def test_keep_alive_serves_two_requests_on_one_connection(port: int) -> None:
    async with connect(port) as client:
        first = await client.request("GET", "/api/v1/bookie/info")
        second = await client.request("GET", "/hello")
        assert (first.status, second.status) == (200, 200)
        assert "connection" not in second.headers
        assert client.conn.our_state is h11.DONE  # nobody asked to close


async def test_pipelined_requests_are_answered_in_order(port: int) -> None:
    raw = (
        b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /api/v1/nope HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /api/v1/bookie/info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    reply = await raw_exchange(port, raw)
    assert re.findall(rb"HTTP/1\.1 (\d{3}) ", reply) == [b"200", b"404", b"200"]
    assert reply.endswith(b'"state": "writable"}\n')


async def test_connection_close_is_honoured(port: int) -> None:
    async with connect(port) as client:
        reply = await client.request("GET", "/hello", headers=[("Connection", "close")])
        assert reply.status == 200
        assert reply.headers["connection"] == "close"
        assert await client.server_closed()


async def test_http_1_0_gets_an_answer_and_a_close(port: int) -> None:
    reply = await raw_exchange(port, b"GET /hello HTTP/1.0\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n")
    assert reply.endswith(b"\r\n\r\nhello\n")


async def test_connections_are_served_concurrently(nursery: trio.Nursery) -> None:
    release = trio.Event()

    async def slow(request: AdminRequest) -> AdminResponse:
        await release.wait()
        return text_response("done")

    router = make_router()
    router.add("GET", "/slow", slow)
    port = await nursery.start(partial(serve_admin, router, HOST, 0))
    async with connect(port) as blocked, connect(port) as other, trio.open_nursery() as inner:
        replies: list[Reply] = []

        async def ask_slow() -> None:
            replies.append(await blocked.request("GET", "/slow"))

        inner.start_soon(ask_slow)
        # The first connection is stuck in its handler; the second is still served.
        assert (await other.request("GET", "/hello")).status == 200
        assert not replies
        release.set()
    assert replies[0].body == b"done"


async def test_cancelling_the_server_closes_open_connections() -> None:
    async with trio.open_nursery() as outer:
        port = await outer.start(partial(serve_admin, make_router(), HOST, 0))
        async with connect(port) as client:
            assert (await client.request("GET", "/hello")).status == 200
            outer.cancel_scope.cancel()
            assert await client.server_closed()


async def test_localhost_reports_one_usable_port(nursery: trio.Nursery) -> None:
    # "localhost" may resolve to 127.0.0.1 and ::1; port 0 must still mean one port.
    port = await nursery.start(partial(serve_admin, make_router(), "localhost", 0))
    stream = await trio.open_tcp_stream("localhost", port)
    async with stream:
        client = Client(stream)
        assert (await client.request("GET", "/hello")).status == 200


async def test_a_real_http_client_agrees(port: int) -> None:
    def fetch() -> tuple[int, str, bytes]:
        url = f"http://{HOST}:{port}/api/v1/bookie/info"
        with urllib.request.urlopen(url, timeout=DEADLINE) as response:
            return response.status, response.headers["Content-Type"], response.read()

    status, content_type, body = await trio.to_thread.run_sync(fetch)
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body)["state"] == "writable"


# --- /metrics -----------------------------------------------------------------------------


async def test_metrics_route_serves_the_registry(nursery: trio.Nursery) -> None:
    metrics = BookieMetrics()
    metrics.request("add_entry", "EOK", 0.002)
    port = await nursery.start(partial(serve_admin, make_router(metrics), HOST, 0))
    async with connect(port) as client:
        reply = await client.request("GET", "/metrics")
        assert reply.status == 200
        assert reply.headers["content-type"].startswith("text/plain; version=")
        families = {f.name: f for f in text_string_to_metric_families(reply.body.decode("utf-8"))}
        [sample] = families["bookie_requests"].samples
        assert sample.labels == {"operation": "add_entry", "status": "EOK"}
        assert sample.value == 1

        reply = await client.request(
            "GET", "/metrics", headers=[("Accept", "application/openmetrics-text; version=1.0.0")]
        )
        assert reply.headers["content-type"].startswith("application/openmetrics-text")
        assert reply.body.endswith(b"# EOF\n")


# --- Limits and hostile input -------------------------------------------------------------


async def test_declared_body_over_the_limit_is_413_and_closes(nursery: trio.Nursery) -> None:
    port = await nursery.start(partial(serve_admin, make_router(), HOST, 0, max_body=1000))
    async with connect(port) as client:
        assert (await client.request("POST", "/echo", b"x" * 1000)).status == 200
    reply = await raw_exchange(
        port, b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n" + b"x" * 1001
    )
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b"connection: close" in reply.lower()


async def test_chunked_body_over_the_limit_is_413(nursery: trio.Nursery) -> None:
    port = await nursery.start(partial(serve_admin, make_router(), HOST, 0, max_body=1000))
    chunk = b"400\r\n" + b"y" * 0x400 + b"\r\n"
    reply = await raw_exchange(
        port,
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk * 3,
    )
    assert reply.startswith(b"HTTP/1.1 413 ")


async def test_expect_100_continue(port: int) -> None:
    async with connect(port) as client:
        reply = await client.request("POST", "/echo", b"abc", [("Expect", "100-continue")])
        assert reply.status == 200
        assert reply.json() == {
            "method": "POST",
            "path": "/echo",
            "query": {},
            "body": "abc",
            "x-test": None,
        }


async def test_oversized_headers_are_431(nursery: trio.Nursery) -> None:
    port = await nursery.start(partial(serve_admin, make_router(), HOST, 0, max_header_bytes=1024))
    # Unterminated: h11 enforces the limit while it waits for the end of the headers.
    reply = await raw_exchange(port, b"GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4096)
    assert reply.startswith(b"HTTP/1.1 431 ")


async def test_garbage_gets_400_and_the_server_lives_on(port: int) -> None:
    with errors_logged() as errors:
        reply = await raw_exchange(
            port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 TLS?\r\n\r\n"
        )
        assert reply.startswith(b"HTTP/1.1 400 ")
        assert b'"error": "bad request' in reply
        async with connect(port) as client:
            assert (await client.request("GET", "/hello")).status == 200
    assert not errors


async def test_idle_and_slow_connections_time_out(nursery: trio.Nursery) -> None:
    port = await nursery.start(partial(serve_admin, make_router(), HOST, 0, idle_timeout=0.2))
    async with connect(port) as client:
        assert (await client.request("GET", "/hello")).status == 200
        assert await client.server_closed()  # idle keep-alive: closed without a word
    stream = await trio.open_tcp_stream(HOST, port)
    async with stream:
        await stream.send_all(b"GET /hello HTTP/1.1\r\nHost: x\r\n")  # never finished
        received = bytearray()
        with trio.fail_after(DEADLINE):
            while chunk := await stream.receive_some(65536):
                received += chunk
    assert received.startswith(b"HTTP/1.1 408 ")


_REQUEST_PARTS = st.sampled_from(
    [
        b"GET / HTTP/1.1\r\n",
        b"GET /hello HTTP/1.1\r\n",
        b"POST /echo HTTP/1.1\r\n",
        b"Host: x\r\n",
        b"Content-Length: 5\r\n",
        b"Content-Length: 99999999999\r\n",
        b"Content-Length: -1\r\n",
        b"Transfer-Encoding: chunked\r\n",
        b"Expect: 100-continue\r\n",
        b"Connection: close\r\n",
        b"Connection: upgrade\r\nUpgrade: h2c\r\n",
        b"5\r\nhello\r\n0\r\n\r\n",
        b"\r\n",
        b"\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n",
        b"\x00\xff",
    ]
)
_GARBAGE = st.one_of(
    st.binary(max_size=4096),
    st.lists(st.one_of(_REQUEST_PARTS, st.binary(max_size=64)), max_size=20).map(b"".join),
)


@given(data=_GARBAGE)
async def test_random_bytes_never_kill_the_server(data: bytes) -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            partial(serve_admin, make_router(), HOST, 0, max_body=4096, idle_timeout=DEADLINE)
        )
        with errors_logged() as errors:
            reply = await raw_exchange(port, data)
            async with connect(port) as client:
                assert (await client.request("GET", "/hello")).body == b"hello\n"
        # Garbage takes the protocol-error path, never the "unexpected error" one; and as no
        # route raised, nothing answered 5xx (a 500 is always logged as an error).
        assert not errors, (data, reply)
        nursery.cancel_scope.cancel()

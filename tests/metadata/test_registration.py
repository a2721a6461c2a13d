"""Bookie registration: ephemeral, feature-flagged, re-created after expiry — on both backends.

The kill -9 case (a registered bookie process dies) is in ``test_store.py``, since it is the
ephemeral-liveness test of the store as much as of registration.
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from bookiesim.client import BookKeeper
from bookiesim.cluster.in_process import running_cluster
from bookiesim.metadata import (
    FEATURE_WRITE_CLOSE,
    BookieIdInUseError,
    BookieInfo,
    MetadataStore,
    bookie_address,
    live_bookies,
    read_only_bookies,
    register_bookie,
    registered_bookies,
    watch_live_bookies,
)
from bookiesim.metadata.registration import BookieRegistration, available_path
from bookiesim.metadata.sqlite_store import SqliteStore
from bookiesim.metadata.store import join_path
from bookiesim.metadata.zk_store import ZkStore
from bookiesim.proto import DataFormats_pb2 as pb

if TYPE_CHECKING:
    from pathlib import Path

    from tests.metadata.helpers import Backend

BOOKIE = BookieInfo(
    "127.0.0.1:3181",
    host="127.0.0.1",
    port=3181,
    http_port=8000,
    features=frozenset({FEATURE_WRITE_CLOSE}),
    pid=1234,
)


async def test_register_and_unregister(store: MetadataStore) -> None:
    assert await live_bookies(store) == {}
    async with register_bookie(store, BOOKIE) as registration:
        assert registration.path == "/ledgers/available/127.0.0.1:3181"
        live = await live_bookies(store)
        assert live == {"127.0.0.1:3181": BOOKIE}
        assert live["127.0.0.1:3181"].supports_write_close
        node = await store.get(registration.path)
        assert node is not None
        assert node.ephemeral_owner == store.session_id
    assert await live_bookies(store) == {}


# --- the registration's value: upstream's BookieServiceInfoFormat ------------------------


def test_registration_is_upstreams_service_info() -> None:
    msg = pb.BookieServiceInfoFormat.FromString(BOOKIE.to_service_info())
    # http first, as upstream's ConcurrentHashMap iterates "httpserver" before "bookie".
    assert [(e.id, e.host, e.port, e.protocol) for e in msg.endpoints] == [
        ("httpserver", "0.0.0.0", 8000, "http"),
        ("bookie", "127.0.0.1", 3181, "bookie-rpc"),
    ]
    assert all(not e.auth and not e.extensions for e in msg.endpoints)
    assert dict(msg.properties) == {"bookiesim.features": "writeClose", "bookiesim.pid": "1234"}


def test_plain_bookie_writes_what_upstream_writes() -> None:
    # No http, no features, no pid: one bookie-rpc endpoint, nothing else (the 37 bytes of
    # the vectors' zk/01 for 127.0.0.1:34181; tests/interop/test_zk_records.py checks them).
    plain = BookieInfo("127.0.0.1:34181")
    expected = pb.BookieServiceInfoFormat(
        endpoints=[
            pb.BookieServiceInfoFormat.Endpoint(
                id="bookie", port=34181, host="127.0.0.1", protocol="bookie-rpc"
            )
        ]
    )
    assert plain.to_service_info() == expected.SerializeToString()
    assert len(plain.to_service_info()) == 37


def test_previous_versions_json_is_still_read() -> None:
    # Byte for byte what the previous bookiesim wrote (a cluster half-way through an upgrade).
    old = (
        b'{"bookieId": "127.0.0.1:3181", "features": ["writeClose"], "host": "127.0.0.1", '
        b'"httpPort": 8000, "pid": 1234, "port": 3181}'
    )
    assert BookieInfo.from_registration(BOOKIE.bookie_id, old) == BOOKIE
    bare = b'{"bookieId": "10.0.0.1:3181", "features": [], "host": "10.0.0.1", "httpPort": null, '
    bare += b'"pid": null, "port": 3181}'
    assert BookieInfo.from_registration("10.0.0.1:3181", bare) == BookieInfo("10.0.0.1:3181")


@pytest.mark.parametrize(
    "value",
    [
        b"",  # upstream's legacy bookies register with no data
        b"\x0a\x04http",  # a protobuf with no endpoint we know
        b"[1, 2]",  # JSON, not ours
        b"{not json",
        b"\xff\xff\xff",  # neither
        pb.BookieServiceInfoFormat(properties={"bookiesim.pid": "x"}).SerializeToString(),
    ],
)
def test_undecodable_registration_is_a_bare_bookie(value: bytes) -> None:
    # Live, at the address its id names, with no features: no WriteClose is sent to it.
    info = BookieInfo.from_registration("10.0.0.2:3181", value)
    assert info == BookieInfo("10.0.0.2:3181", host="10.0.0.2", port=3181)
    assert not info.supports_write_close


def test_address_defaults_to_the_ids() -> None:
    assert BookieInfo("[::1]:3181") == BookieInfo("[::1]:3181", host="::1", port=3181)
    custom = BookieInfo("bookie-7")  # upstream allows ids that are not addresses
    assert (custom.host, custom.port) == ("", 0)
    with pytest.raises(ValueError, match="not a valid bookie id"):
        BookieInfo("readonly")
    with pytest.raises(ValueError, match="not a valid bookie id"):
        BookieInfo("a/b:1")
    with pytest.raises(ValueError, match="out of range"):
        BookieInfo("h:1", http_port=70000)
    with pytest.raises(ValueError, match="comma"):
        BookieInfo("h:1", features=frozenset({"a,b"}))


_NAMES = st.text(string.ascii_letters + string.digits + "-_.", min_size=1, max_size=20)
_PORTS = st.integers(0, 65535)


@st.composite
def _infos(draw: st.DrawFn) -> BookieInfo:
    host = draw(st.one_of(st.just("127.0.0.1"), _NAMES))
    return BookieInfo(
        bookie_id=draw(st.one_of(st.builds("{}:{}".format, _NAMES, _PORTS), _NAMES)),
        host=draw(st.one_of(st.just(""), st.just(host))),
        port=draw(_PORTS),
        http_port=draw(st.one_of(st.none(), _PORTS)),
        features=draw(st.frozensets(_NAMES, max_size=4)),
        pid=draw(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))),
        http_host=draw(st.sampled_from(["0.0.0.0", "127.0.0.1", "::"])),
    )


@given(_infos())
def test_registration_codec_round_trips(info: BookieInfo) -> None:
    data = info.to_service_info()
    assert BookieInfo.from_registration(info.bookie_id, data) == info
    assert info.to_service_info() == data  # deterministic: equal infos, equal bytes
    # Whatever else a newer writer puts beside it, the bookie-rpc endpoint is found.
    msg = pb.BookieServiceInfoFormat.FromString(data)
    msg.endpoints.add(id="x", port=1, host="h", protocol="grpc", auth=["tls"])
    msg.properties["upstream.someday"] = "y"
    extended = BookieInfo.from_registration(info.bookie_id, msg.SerializeToString())
    assert (extended.host, extended.port, extended.features) == (
        info.host,
        info.port,
        info.features,
    )


# --- resolving a bookie id to an address ----------------------------------------------------


async def test_bookie_address_follows_the_registration(store: MetadataStore) -> None:
    # An upstream bookie may register an id that is not its address (the vectors rewrote an
    # endpoint to reach a proxy this way): clients connect where the endpoint says.
    moved = BookieInfo("10.0.0.9:3181", host="127.0.0.1", port=40000)
    assert await bookie_address(store, moved.bookie_id) == ("10.0.0.9", 3181)  # unregistered
    async with register_bookie(store, moved) as registration:
        assert await bookie_address(store, moved.bookie_id) == ("127.0.0.1", 40000)
        await registration.set_read_only()
        assert await bookie_address(store, moved.bookie_id) == ("127.0.0.1", 40000)
    legacy = join_path(available_path(store.ledgers_root), "10.0.0.8:3182")
    await store.create(legacy, b"", make_parents=True)  # upstream's legacy: no data at all
    assert await bookie_address(store, "10.0.0.8:3182") == ("10.0.0.8", 3182)
    with pytest.raises(ValueError, match="not host:port"):
        await bookie_address(store, "bookie-7")


async def test_readonly_node_is_not_a_bookie(store: MetadataStore) -> None:
    await store.create("/ledgers/available/readonly", make_parents=True)
    async with register_bookie(store, BOOKIE):
        assert list(await live_bookies(store)) == ["127.0.0.1:3181"]


async def test_re_registers_after_session_expiry(backend: Backend) -> None:
    async with backend.open() as store, backend.open() as observer:
        assert isinstance(store, SqliteStore | ZkStore)
        async with register_bookie(store, BOOKIE) as registration:
            first_session = store.session_id
            await store.expire_session()
            with trio.fail_after(backend.session_timeout * 5 + 5):
                while True:
                    node = await observer.get(registration.path)
                    # The node can be visible before the registering task has returned from
                    # its create and counted it: wait for both.
                    ours = node is not None and node.ephemeral_owner == store.session_id
                    if ours and registration.registrations == 2:
                        break
                    await trio.sleep(0.05)
            assert store.session_id != first_session
            assert registration.registrations == 2
            assert (await live_bookies(observer))[BOOKIE.bookie_id] == BOOKIE


async def test_same_id_held_by_another_session(backend: Backend) -> None:
    async with (
        backend.open() as first,
        backend.open() as second,
        register_bookie(first, BOOKIE),
    ):
        with pytest.raises(BookieIdInUseError, match=r"^/ledgers/available/127\.0\.0\.1:3181"):
            async with register_bookie(second, BOOKIE, stale_wait=0.3):
                pass  # pragma: no cover


async def test_waits_for_a_stale_registration(backend: Backend) -> None:
    async with backend.open() as first, backend.open() as second:
        await first.create(
            "/ledgers/available/127.0.0.1:3181", b"{}", ephemeral=True, make_parents=True
        )

        async def close_first_later() -> None:
            await trio.sleep(0.3)
            await first.close()  # the old incarnation's session ends

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_first_later)
            with trio.fail_after(10):
                async with register_bookie(second, BOOKIE, stale_wait=10) as registration:
                    node = await second.get(registration.path)
                    assert node is not None
                    assert node.ephemeral_owner == second.session_id


async def test_watch_live_bookies(backend: Backend, store: MetadataStore) -> None:
    other = BookieInfo("127.0.0.1:3182", port=3182)
    async with backend.open() as bookie_side, watch_live_bookies(store) as updates:
        with trio.fail_after(10):
            assert await anext(updates) == {}
            async with register_bookie(bookie_side, BOOKIE):
                assert await anext(updates) == {BOOKIE.bookie_id: BOOKIE}
                async with register_bookie(bookie_side, other):
                    assert await anext(updates) == {
                        BOOKIE.bookie_id: BOOKIE,
                        other.bookie_id: other,
                    }
                assert await anext(updates) == {BOOKIE.bookie_id: BOOKIE}
            assert await anext(updates) == {}


async def test_a_read_only_bookie_moves_under_readonly(store: MetadataStore) -> None:
    # Upstream's transition to read-only mode: no longer offered for new ensembles,
    # still registered (and so still alive) for everyone who reads from it.
    async with register_bookie(store, BOOKIE) as registration:
        await registration.set_read_only()
        assert registration.path == "/ledgers/available/readonly/127.0.0.1:3181"
        assert await live_bookies(store) == {}
        assert await read_only_bookies(store) == {"127.0.0.1:3181": BOOKIE}
        await registration.set_read_only()  # once is enough
        assert list(await read_only_bookies(store)) == ["127.0.0.1:3181"]
        # Still there for auto-recovery: a read-only bookie is not lost.
        assert await registered_bookies(store) == {"127.0.0.1:3181"}
    assert await read_only_bookies(store) == {}
    assert await live_bookies(store) == {}
    assert await registered_bookies(store) == set()


async def test_a_writable_again_bookie_moves_back_to_available(backend: Backend) -> None:
    # Upstream's transition to writable mode (the disk has room again): offered for new
    # ensembles again, and the registration's watch follows the node to each place.
    async with backend.open() as store, backend.open() as observer:
        async with register_bookie(store, BOOKIE) as registration:
            await registration.set_writable()  # writable already: nothing to do
            assert registration.registrations == 1
            for _ in range(2):
                await registration.set_read_only()
                assert list(await read_only_bookies(observer)) == [BOOKIE.bookie_id]
                await registration.set_writable()
                assert registration.path == "/ledgers/available/127.0.0.1:3181"
                assert await live_bookies(observer) == {BOOKIE.bookie_id: BOOKIE}
                assert await read_only_bookies(observer) == {}
            # The watch moved with it: a lost node is registered again where it now is.
            await store.delete(registration.path)
            with trio.fail_after(backend.session_timeout * 5 + 5):
                while BOOKIE.bookie_id not in await live_bookies(observer):  # noqa: ASYNC110
                    await trio.sleep(0.05)
        assert await registered_bookies(observer) == set()


async def test_a_read_only_registration_comes_back_after_session_expiry(
    backend: Backend,
) -> None:
    async with backend.open() as store, backend.open() as observer:
        assert isinstance(store, SqliteStore | ZkStore)
        async with register_bookie(store, BOOKIE) as registration:
            await registration.set_read_only()
            await store.expire_session()
            with trio.fail_after(backend.session_timeout * 5 + 5):
                while True:
                    seen = await read_only_bookies(observer)
                    # Writable, read-only, read-only again (a create retried after the
                    # session's loss may count twice); and visible to others.
                    if registration.registrations >= 3 and seen == {BOOKIE.bookie_id: BOOKIE}:
                        break
                    await trio.sleep(0.05)
            assert await live_bookies(observer) == {}


async def test_the_client_reaches_bookies_where_their_registrations_say(tmp_path: Path) -> None:
    # Upstream's bookies may have ids that are not addresses (a custom bookieId), and the
    # vectors' wire recording pointed an endpoint at a proxy: the client must connect to the
    # bookie-rpc endpoint, not to the id. Here the ids name no address at all.
    async with running_cluster(tmp_path, 0) as cluster, trio.open_nursery() as nursery:
        for n in range(3):
            address = await cluster.start_bookie(register=False)
            port = int(address.rsplit(":", 1)[1])
            info = BookieInfo(f"bookie-{n}", host="127.0.0.1", port=port)
            await nursery.start(BookieRegistration(cluster.store, info).run)
        async with BookKeeper(cluster.store) as bk:
            lh = await bk.create_ledger(3, 2, 2)
            assert sorted(lh.ensemble) == ["bookie-0", "bookie-1", "bookie-2"]
            for i in range(5):
                await lh.add_entry(b"entry %d" % i)
            await lh.close()
            reader = await bk.open_ledger(lh.ledger_id)
            entries = await reader.read_entries(0, 4)
            assert [e.payload for e in entries] == [b"entry %d" % i for i in range(5)]
        nursery.cancel_scope.cancel()

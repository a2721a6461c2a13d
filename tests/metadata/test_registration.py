"""Bookie registration: ephemeral, feature-flagged, re-created after expiry — on both backends.

The kill -9 case (a registered bookie process dies) is in ``test_store.py``, since it is the
ephemeral-liveness test of the store as much as of registration.
"""

from __future__ import annotations

import pytest
import trio

from bookiesim.metadata import (
    FEATURE_WRITE_CLOSE,
    BookieIdInUseError,
    BookieInfo,
    MetadataStore,
    live_bookies,
    read_only_bookies,
    register_bookie,
    watch_live_bookies,
)
from bookiesim.metadata.sqlite_store import SqliteStore
from bookiesim.metadata.zk_store import ZkStore
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


def test_registration_json() -> None:
    old_style = BookieInfo("10.0.0.1:3181", host="10.0.0.1", port=3181)
    assert not old_style.supports_write_close
    assert BookieInfo.from_registration(BOOKIE.bookie_id, BOOKIE.to_json()) == BOOKIE
    assert BookieInfo.from_registration(old_style.bookie_id, old_style.to_json()) == old_style
    # An upstream bookie's value (a BookieServiceInfoFormat protobuf, or nothing): live, but
    # with no features, so no WriteClose is sent to it.
    for value in (b"", b"\x0a\x04http", b"[1, 2]"):
        upstream = BookieInfo.from_registration("10.0.0.2:3181", value)
        assert upstream == BookieInfo("10.0.0.2:3181", host="10.0.0.2", port=3181)
        assert not upstream.supports_write_close
    with pytest.raises(ValueError, match="not a valid bookie id"):
        BookieInfo("readonly")
    with pytest.raises(ValueError, match="not a valid bookie id"):
        BookieInfo("a/b:1")


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
    assert await read_only_bookies(store) == {}
    assert await live_bookies(store) == {}


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

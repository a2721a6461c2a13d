"""What a producer hands the broker, and the entries a broker stores for it (no I/O).

:meth:`~bookiesim.mledger.managed_ledger.ManagedLedger.publish` stores messages as a Pulsar
broker with both entry interceptors does: each in Pulsar's entry layout with a CRC32C
checksum and, if configured, broker entry metadata — the broker timestamp and the index of the
entry's last message, counting from 0 across the topic.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bookiesim.proto.pulsar_entry import encode_pulsar_entry

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["Message", "encode_messages", "wall_clock_ms"]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Message:
    """What a producer hands the broker: a payload and its MessageMetadata fields."""

    payload: bytes
    publish_time: int | None = None
    """Client clock ms; None: the managed ledger's clock at publish."""
    num_messages: int = 1
    producer_name: str = "bookiesim"


def encode_messages(
    messages: Sequence[Message],
    clock: Callable[[], int],
    *,
    last_index: int,
    broker_entry_metadata: bool,
) -> list[bytes]:
    """The entries for ``messages``; ``last_index``: the index of the topic's last message
    so far (-1: none), used only with ``broker_entry_metadata``."""
    index = last_index
    payloads = []
    for message in messages:
        now = clock()
        broker_timestamp = entry_idx = None
        if broker_entry_metadata:
            index += message.num_messages
            broker_timestamp, entry_idx = now, index
        payloads.append(
            encode_pulsar_entry(
                message.payload,
                publish_time=now if message.publish_time is None else message.publish_time,
                producer_name=message.producer_name,
                num_messages=message.num_messages,
                broker_timestamp=broker_timestamp,
                index=entry_idx,
            )
        )
    return payloads

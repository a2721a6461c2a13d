"""``GET /api/v1/bookie/list_bookie_info``: every writable bookie's disk space, asked of the
bookie itself (the v3 GET_BOOKIE_INFO operation), in upstream's answer's form.

Each bookie that answers gets ``"ID": ": {Free: F(R), Total: T(R)},"`` and the sum gets
``"ClusterInfo: ": "{Free: F(R), Total: T(R)}"``, where ``(R)`` is the figure in KB, MB, GB
or TB (powers of 1000, at most three decimals, cut rather than rounded; nothing under 1000
bytes). The strings are upstream's format; a script parses the digits after ``Free:`` and
``Total:``. No bookie answering gets 404.
"""

from __future__ import annotations

import logging
from decimal import ROUND_DOWN, Decimal
from typing import TYPE_CHECKING

from bookiesim.bookie.http_admin import (
    AdminRequest,
    AdminResponse,
    AdminRouter,
    json_response,
    text_response,
)
from bookiesim.client.errors import BKError
from bookiesim.proto import BookkeeperProtocol_pb2 as pb
from bookiesim.proto.v3 import from_message

if TYPE_CHECKING:
    from bookiesim.client import BookKeeper

__all__ = ["BOOKIE_INFO_PATH", "add_bookie_info_route", "readable"]

log = logging.getLogger(__name__)

BOOKIE_INFO_PATH = "/api/v1/bookie/list_bookie_info"
_UNITS = ("", "KB", "MB", "GB", "TB")
_BOTH = pb.GetBookieInfoRequest.TOTAL_DISK_CAPACITY | pb.GetBookieInfoRequest.FREE_DISK_SPACE


def readable(value: int) -> str:
    """``(1.5GB)`` for 1,500,000,000 bytes; ``""`` under 1000."""
    figure = float(value)
    unit = 0
    while figure >= 1000 and unit < len(_UNITS) - 1:
        figure /= 1000
        unit += 1
    if unit == 0:
        return ""
    cut = Decimal(repr(figure)).quantize(Decimal("0.001"), rounding=ROUND_DOWN).normalize()
    return f"({cut:f}{_UNITS[unit]})"


def _space(free: int, total: int) -> str:
    return f"{{Free: {free}{readable(free)}, Total: {total}{readable(total)}}}"


class _BookieInfoRoute:
    def __init__(self, client: BookKeeper) -> None:
        self.client = client

    async def list_bookie_info(self, request: AdminRequest) -> AdminResponse:
        request_info = from_message(
            pb.Request(getBookieInfoRequest=pb.GetBookieInfoRequest(requested=_BOTH))
        )
        answer: dict[str, str] = {}
        free_sum = total_sum = 0
        for bookie_id in sorted(await self.client.live_bookies()):
            try:
                response = await self.client.pool.call(bookie_id, request_info)
            except BKError as exc:
                log.info("admin: bookie %s gave no info: %s", bookie_id, exc)
                continue
            if response.status != pb.EOK:
                continue
            info = response.getBookieInfoResponse
            free, total = info.freeDiskSpace, info.totalDiskCapacity
            answer[bookie_id] = f": {_space(free, total)},"
            free_sum += free
            total_sum += total
        if not answer:
            return text_response("no bookie answered with its disk space", 404)
        answer["ClusterInfo: "] = _space(free_sum, total_sum)
        return json_response(answer)


def add_bookie_info_route(router: AdminRouter, client: BookKeeper) -> None:
    router.add("GET", BOOKIE_INFO_PATH, _BookieInfoRoute(client).list_bookie_info)

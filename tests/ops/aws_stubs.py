"""botocore helpers of the capacity tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

from botocore.stub import Stubber


class PartialStubber(Stubber):
    """A botocore Stubber that answers only when the next queued response is for the operation being called.

    Every other call goes on to moto, so one client can be served by moto for what moto emulates and by recorded
    responses for what it cannot (get-spot-placement-scores, capacity reservations, EC2 service quotas). The queue
    order is still enforced among the stubbed operations. Relies on two private hooks of the pinned botocore.
    """

    def _stubbed(self, model) -> bool:
        return bool(self._queue) and self._queue[0]["operation_name"] == model.name

    def _get_response_handler(self, model, params, context, **kwargs):
        return super()._get_response_handler(model, params, context, **kwargs) if self._stubbed(model) else None

    def _assert_expected_params(self, model, params, context, **kwargs):
        if self._stubbed(model):
            super()._assert_expected_params(model, params, context, **kwargs)


# -- the capacity probe's recorded answers (tests/ops/test_capacity.py and its signal child, probe_signals.py) -------

FIXTURES = Path(__file__).parent / "fixtures" / "capacity"
RESERVATION_ID = "cr-0123456789abcdef0"


class ProbeArgs(TypedDict):
    """The keyword arguments of `capacity.probe_zone` every probe test passes."""

    region: str
    instance_type: str
    zone: str
    count: int


PROBE = ProbeArgs(region="us-east-1", instance_type="p5en.48xlarge", zone="us-east-1c", count=2)
CANCEL = ("cancel_capacity_reservation", {"Return": True}, {"CapacityReservationId": RESERVATION_ID})


def recorded(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def reservation(state: str) -> dict[str, Any]:
    response = recorded("create_capacity_reservation_active.json")
    response["CapacityReservation"]["State"] = state
    return response

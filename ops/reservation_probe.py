"""The capacity probe, the one part of `ray-efa capacity` that spends money: a real targeted On-Demand Capacity
Reservation for N instances in one AZ, cancelled at once.

It is the only signal that means "yes, now": EC2 either reserves the capacity or answers InsufficientInstanceCapacity.
The reservation is billed while it exists, so it lives for seconds and is always cancelled, also on errors, Ctrl-C and
SIGTERM (a signal waits until the cancel is done, then surfaces as ProbeInterrupted); it is created with an end date
one hour ahead as a last resort, and a cancel that fails raises CancelFailed naming the command that cancels it by
hand. ops.capacity runs it only when asked (`--probe`) and ranks the zones with its outcome.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ray_efa.ops._status import Status, quiet

# `ec2` is a boto3 client (or a botocore Stubber-wrapped one in the tests), typed Any as in ops.capacity.

__all__ = [
    "AVAILABLE",
    "INSUFFICIENT_CAPACITY",
    "QUOTA_EXCEEDED",
    "UNSUPPORTED",
    "ERROR",
    "ProbeResult",
    "ProbeInterrupted",
    "CancelFailed",
    "probe_zone",
    "error_text",
]

# -- outcomes -------------------------------------------------------------------------------------------------------

AVAILABLE = "available"
"""The probe reservation became active: EC2 has the capacity now."""
INSUFFICIENT_CAPACITY = "insufficient-capacity"
"""EC2 has no capacity for N instances of the type in this AZ right now."""
QUOTA_EXCEEDED = "quota-exceeded"
"""The account's limits refused the reservation; says nothing about EC2's capacity."""
UNSUPPORTED = "unsupported"
"""EC2 does not support the type (or reservations of it) in this AZ."""
ERROR = "error"
"""Anything else (permissions, a reservation that did not settle); says nothing about capacity."""

_CAPACITY_ERRORS = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity", "InsufficientHostCapacity"})
_QUOTA_ERRORS = frozenset(
    {
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "ReservationCapacityExceeded",
        "ReservationLimitExceeded",
        "CapacityReservationLimitExceeded",
    }
)
_UNSUPPORTED_ERRORS = frozenset({"Unsupported", "UnsupportedOperation"})


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeResult:
    """What a create-and-cancel capacity reservation in one AZ said."""

    zone: str
    outcome: str
    """One of AVAILABLE, INSUFFICIENT_CAPACITY, QUOTA_EXCEEDED, UNSUPPORTED, ERROR."""
    error_code: str | None = None
    message: str = ""
    reservation_id: str | None = None
    cancelled: bool = False
    """True when a reservation was created and has been cancelled."""


def error_text(error: Exception) -> str:
    """An AWS call's error as one line: a ClientError's "Code: message", else the exception's type and text."""
    if isinstance(error, ClientError):
        info = error.response.get("Error", {})
        return f"{info.get('Code', 'Error')}: {info.get('Message', str(error))}"
    return f"{type(error).__name__}: {error}"


# -- the probe ------------------------------------------------------------------------------------------------------


class ProbeInterrupted(KeyboardInterrupt):
    """A signal (Ctrl-C, SIGTERM, SIGHUP) arrived while a probe reservation existed; it has been cancelled."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class CancelFailed(RuntimeError):
    """A probe reservation could not be cancelled: the one situation that costs money, so it says what to run."""

    def __init__(self, reservation_ids: list[str], region: str, cause: str):
        self.reservation_ids = reservation_ids
        commands = "; ".join(
            f"aws ec2 cancel-capacity-reservation --capacity-reservation-id {rid} --region {region}"
            for rid in reservation_ids
        )
        super().__init__(
            f"could not cancel capacity reservation(s) {', '.join(reservation_ids)} ({cause}); it is billed until "
            f"cancelled or until its end date within two hours: run {commands}"
        )


_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)


class _SignalGuard:
    """Turns SIGINT, SIGTERM and SIGHUP into ProbeInterrupted, or holds them while `holding` (during the cancel)."""

    def __init__(self) -> None:
        self.holding = False
        self.received: list[int] = []

    def handle(self, signum: int, _frame: Any) -> None:
        if self.holding:
            self.received.append(signum)  # a second Ctrl-C must not abort the cancel
        else:
            raise ProbeInterrupted(signum)

    def release(self) -> None:
        """Stop holding; re-raise the first signal that arrived meanwhile."""
        self.holding = False
        if self.received:
            raise ProbeInterrupted(self.received[0])


@contextlib.contextmanager
def _signal_guard() -> Iterator[_SignalGuard]:
    """While a reservation may exist, signals raise an exception instead of ending the process, so `finally` runs.

    SIGTERM and SIGHUP would otherwise end the process at once, skipping every cleanup. Python allows signal handlers
    only in the main thread; elsewhere the guard installs nothing and only Ctrl-C's KeyboardInterrupt is covered.
    """
    guard = _SignalGuard()
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    previous = {s: signal.signal(s, guard.handle) for s in _SIGNALS}
    try:
        yield guard
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


_PROBE_TAG = "ray-efa:capacity-probe"
_SETTLED = {"active", "failed", "cancelled", "expired", "unsupported"}
_GONE = {"cancelled", "expired", "failed"}


def _cancel(ec2: Any, reservation_id: str, *, attempts: int = 3, sleep: Callable[[float], None] = time.sleep) -> None:
    """Cancel one reservation, retrying a few times beyond botocore's own retries; raise on final failure."""
    for attempt in range(1, attempts + 1):
        try:
            ec2.cancel_capacity_reservation(CapacityReservationId=reservation_id)
            return
        except (ClientError, BotoCoreError) as error:
            if (
                isinstance(error, ClientError)
                and error.response.get("Error", {}).get("Code") == "InvalidCapacityReservationId.NotFound"
            ):
                return  # already gone
            if attempt == attempts:
                raise
            sleep(attempt)


def _reservations_by_token(ec2: Any, token: str) -> list[str]:
    """Live reservations carrying this probe's tag (when the create call's answer was lost)."""
    response = ec2.describe_capacity_reservations(Filters=[{"Name": f"tag:{_PROBE_TAG}", "Values": [token]}])
    return [r["CapacityReservationId"] for r in response["CapacityReservations"] if r.get("State") not in _GONE]


def _outcome_of_error(zone: str, error: ClientError) -> ProbeResult:
    code = error.response.get("Error", {}).get("Code", "")
    if code in _CAPACITY_ERRORS:
        outcome = INSUFFICIENT_CAPACITY
    elif code in _QUOTA_ERRORS:
        outcome = QUOTA_EXCEEDED
    elif code in _UNSUPPORTED_ERRORS:
        outcome = UNSUPPORTED
    else:
        outcome = ERROR
    return ProbeResult(
        zone=zone, outcome=outcome, error_code=code, message=error.response.get("Error", {}).get("Message", "")
    )


def _reservation_request(token: str, *, instance_type: str, zone: str, count: int) -> dict[str, Any]:
    """The probe's create_capacity_reservation arguments: targeted, ending by itself within the hour, tagged."""
    return dict(
        ClientToken=token,  # a retried create returns the same reservation instead of making a second one
        InstanceType=instance_type,
        InstancePlatform="Linux/UNIX",
        AvailabilityZone=zone,
        InstanceCount=count,
        InstanceMatchCriteria="targeted",
        # Belt and braces: if this process is killed with SIGKILL between create and cancel, EC2 ends it itself.
        EndDateType="limited",
        EndDate=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1),
        TagSpecifications=[
            {
                "ResourceType": "capacity-reservation",
                "Tags": [{"Key": _PROBE_TAG, "Value": token}, {"Key": "Name", "Value": "ray-efa capacity probe"}],
            }
        ],
    )


def _settled_result(
    zone: str, reservation_id: str | None, state: str, what: str, settle_timeout_s: float
) -> ProbeResult:
    """What the reservation's state (`what`: count x type) says of the zone's capacity."""
    if state == "active":
        return ProbeResult(zone=zone, outcome=AVAILABLE, reservation_id=reservation_id, message=f"reserved {what}")
    if state == "unsupported":
        return ProbeResult(
            zone=zone,
            outcome=UNSUPPORTED,
            reservation_id=reservation_id,
            message="EC2 does not support this reservation here",
        )
    return ProbeResult(
        zone=zone,
        outcome=ERROR,
        reservation_id=reservation_id,
        message=f"reservation {state} after {settle_timeout_s:.0f} s; capacity unknown",
    )


def probe_zone(
    ec2: Any,
    *,
    region: str,
    instance_type: str,
    zone: str,
    count: int,
    settle_timeout_s: float = 60.0,
    poll_s: float = 2.0,
    status: Status = quiet,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> ProbeResult:
    """Reserve `count` instances in `zone` (targeted, so no running instance slips into it), then cancel it.

    The cancel runs in `finally`, with signals held, whatever happens between the create and the cancel:
    a ClientError while waiting, Ctrl-C, SIGTERM. If the create call itself was cut short (its answer lost), the
    reservation is found by the probe's unique tag and cancelled. A cancel that fails raises CancelFailed.
    """
    token = uuid.uuid4().hex
    request = _reservation_request(token, instance_type=instance_type, zone=zone, count=count)
    reservation_id: str | None = None
    create_may_have_happened = False
    result: ProbeResult | None = None
    cancelled = False
    with _signal_guard() as guard:
        try:
            status(f"probing {zone}: reserving {count} x {instance_type}")
            create_may_have_happened = True
            try:
                response = ec2.create_capacity_reservation(**request)
            except ClientError as error:
                create_may_have_happened = False  # EC2 answered with an error: it created nothing
                return _outcome_of_error(zone, error)
            reservation = response["CapacityReservation"]
            reservation_id = reservation["CapacityReservationId"]
            state = reservation.get("State", "pending")
            deadline = clock() + settle_timeout_s
            while state not in _SETTLED and clock() < deadline:
                status(f"probing {zone}: reservation {reservation_id} is {state}")
                sleep(poll_s)
                described = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
                state = described["CapacityReservations"][0].get("State", state)
            result = _settled_result(zone, reservation_id, state, f"{count} x {instance_type}", settle_timeout_s)
        finally:
            guard.holding = True
            try:
                if reservation_id is not None:
                    status(f"probing {zone}: cancelling {reservation_id}")
                    _cancel(ec2, reservation_id, sleep=sleep)
                    cancelled = True
                elif create_may_have_happened:
                    status(f"probing {zone}: looking for a reservation whose create call was cut short")
                    for rid in _reservations_by_token(ec2, token):
                        reservation_id = rid
                        _cancel(ec2, rid, sleep=sleep)
                        cancelled = True
            except (ClientError, BotoCoreError) as error:
                raise CancelFailed(
                    [reservation_id] if reservation_id else [f"(tag {_PROBE_TAG}={token})"], region, error_text(error)
                ) from error
            guard.release()
    return replace(result, cancelled=cancelled)

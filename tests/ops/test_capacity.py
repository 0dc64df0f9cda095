"""`ops.capacity`: offerings, quota, placement scores, the create-and-cancel probe, the ranking.

What runs where:
- moto (`mock_aws`) emulates describe-availability-zones, describe-instance-type-offerings (its per-region data
  has real gaps, e.g. p5en.48xlarge only in us-east-1a and us-east-1c), run-instances / describe-instances and
  describe-instance-types. Those run against moto.
- moto cannot emulate get-spot-placement-scores and create/describe/cancel-capacity-reservation (it raises
  NotImplementedError), nor EC2's service quotas (its Service Quotas backend knows only the vpc service), nor any
  capacity or limit error. Those paths use botocore Stubber with recorded responses (tests/ops/fixtures/capacity/),
  which botocore validates against the service model. A PartialStubber (conftest) lets one client mix both.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.client import BaseClient
from botocore.exceptions import ClientError
from botocore.stub import ANY, Stubber
from moto import mock_aws

from ray_efa.ops import capacity
from ray_efa.ops.capacity import (
    AVAILABLE,
    ERROR,
    INSUFFICIENT_CAPACITY,
    QUOTA_EXCEEDED,
    CancelFailed,
    CapacityRequest,
    ProbeResult,
    ZoneReport,
)
from tests.ops.aws_stubs import CANCEL, PROBE, RESERVATION_ID, PartialStubber, recorded, reservation

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def moto_region():
    """An emulated account in us-east-1 (moto); yields (ec2 client, service-quotas client)."""
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1"), boto3.client("service-quotas", region_name="us-east-1")


def launch(ec2, instance_type: str, count: int = 1, zone: str = "us-east-1a") -> list[str]:
    # moto's example AMI ID: listing moto's 1,300 recorded images would cost seconds per test
    response = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=count,
        MaxCount=count,
        InstanceType=instance_type,
        Placement={"AvailabilityZone": zone},
    )
    return [i["InstanceId"] for i in response["Instances"]]


def stubbed_ec2() -> BaseClient:
    """An EC2 client whose every call must be stubbed (no moto behind it)."""
    return boto3.client("ec2", region_name="us-east-1")


# -- quota family ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("instance_type", "code"),
    [
        ("g6.12xlarge", "L-DB2E81BA"),
        ("g6e.48xlarge", "L-DB2E81BA"),
        ("vt1.24xlarge", "L-DB2E81BA"),
        ("p4d.24xlarge", "L-417A185B"),
        ("p5en.48xlarge", "L-417A185B"),
        ("gr6.8xlarge", None),
        ("dl1.24xlarge", None),
        ("m7i.xlarge", None),
    ],
)
def test_quota_class_maps_family_letters_to_the_quota_code(instance_type, code):
    # GIVEN an instance type WHEN its quota class is looked up
    quota = capacity.quota_class(instance_type)
    # THEN it is the family's On-Demand vCPU quota (exact letters: gr6 and dl1 have quotas of their own)
    assert (quota.code if quota else None) == code


# -- moto: offerings, usage -----------------------------------------------------------------------------------------


def test_offered_zones_lists_only_the_azs_that_offer_the_type(moto_region):
    """moto emulates describe-instance-type-offerings with per-AZ data."""
    ec2, _ = moto_region
    # WHEN asking which AZs of us-east-1 offer p5en.48xlarge
    zones = capacity.offered_zones(ec2, "p5en.48xlarge")
    # THEN only the two that do are listed
    assert zones == {"us-east-1a", "us-east-1c"}


def g_and_vt_quota() -> capacity.VcpuQuotaClass:
    quota = capacity.quota_class("g6.12xlarge")
    assert quota is not None
    return quota


def test_vcpus_in_use_counts_running_instances_of_the_quota_family_only(moto_region):
    """moto emulates run-instances, describe-instances and describe-instance-types."""
    ec2, _ = moto_region
    # GIVEN one g6.12xlarge (48 vCPUs), two g5.xlarge (4 each), a p4d and an m7i running
    launch(ec2, "g6.12xlarge")
    launch(ec2, "g5.xlarge", count=2)
    launch(ec2, "p4d.24xlarge")
    launch(ec2, "m7i.xlarge")
    # WHEN counting what runs against the G and VT quota
    used = capacity.vcpus_in_use(ec2, g_and_vt_quota())
    # THEN only the G instances count, at their vCPUs
    assert used == 48 + 2 * 4


def test_vcpus_in_use_ignores_stopped_instances(moto_region):
    ec2, _ = moto_region
    # GIVEN a running and a stopped g6.12xlarge
    launch(ec2, "g6.12xlarge")
    ec2.stop_instances(InstanceIds=launch(ec2, "g6.12xlarge"))
    # WHEN counting WHEN the stopped one does not hold quota
    assert capacity.vcpus_in_use(ec2, g_and_vt_quota()) == 48


# -- Stubber: service quotas ----------------------------------------------------------------------------------------


def test_check_quota_short_gives_the_exact_request_command(moto_region):
    """EC2 quotas: moto's Service Quotas knows only vpc, so the quota is a recorded response (Stubber)."""
    ec2, quotas = moto_region
    # GIVEN a G quota of 64 vCPUs with one g6.12xlarge (48 vCPUs) already running
    launch(ec2, "g6.12xlarge")
    with Stubber(quotas) as stub:
        stub.add_response(
            "get_service_quota",
            recorded("service_quota_g_and_vt.json"),
            {"ServiceCode": "ec2", "QuotaCode": "L-DB2E81BA"},
        )
        # WHEN two more g6.12xlarge are needed
        quota = capacity.check_quota(
            ec2, quotas, region="us-east-1", instance_type="g6.12xlarge", count=2, vcpus_per_instance=48
        )
    # THEN the quota is short by the right amount and the request asks for usage + need
    assert quota is not None
    assert (quota.limit_vcpus, quota.used_vcpus, quota.needed_vcpus, quota.sufficient) == (64, 48, 96, False)
    assert quota.request_command() == (
        "aws service-quotas request-service-quota-increase --service-code ec2 --quota-code L-DB2E81BA "
        "--desired-value 144 --region us-east-1"
    )


def test_quota_limit_falls_back_to_the_aws_default_when_no_value_is_applied():
    """Stubber: NoSuchResourceException for get-service-quota, then the default quota."""
    quotas = boto3.client("service-quotas", region_name="us-east-1")
    default = recorded("service_quota_p.json")
    default["Quota"]["Value"] = 0.0
    with Stubber(quotas) as stub:
        stub.add_client_error(
            "get_service_quota",
            "NoSuchResourceException",
            "The request failed because the specified service does not exist.",
        )
        stub.add_response("get_aws_default_service_quota", default, {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"})
        # WHEN reading the P quota THEN the default is used
        assert capacity.quota_limit(quotas, "L-417A185B") == 0.0
        stub.assert_no_pending_responses()


def test_unreadable_quota_is_a_note_not_a_failure(moto_region):
    """Stubber: AccessDeniedException from Service Quotas (moto has no IAM enforcement here)."""
    ec2, quotas = moto_region
    with PartialStubber(ec2) as ec2_stub, Stubber(quotas) as quota_stub:
        quota_stub.add_client_error(
            "get_service_quota", "AccessDeniedException", "not authorized to perform servicequotas:GetServiceQuota"
        )
        ec2_stub.add_response("get_spot_placement_scores", recorded("spot_placement_scores_us_east_1.json"))
        # WHEN the whole check runs without quota permissions
        report = capacity.check_capacity(
            CapacityRequest(region="us-east-1", instance_type="p5en.48xlarge", count=2),
            ec2=ec2,
            service_quotas=quotas,
            catalog_vcpus=192,
        )
    # THEN the quota is unknown, a note says why, and the check still recommends an AZ
    assert report.quota is not None and report.quota.sufficient is None
    assert any("AccessDeniedException" in note for note in report.notes)
    assert report.ok and report.recommended_zone == "us-east-1c"


# -- Stubber: placement scores --------------------------------------------------------------------------------------


def test_placement_scores_map_zone_ids_to_the_accounts_zone_names():
    """Stubber: get-spot-placement-scores answers with AZ IDs; moto does not implement it."""
    ec2 = stubbed_ec2()
    response = recorded("spot_placement_scores_us_east_1.json")
    response["SpotPlacementScores"].append({"Region": "us-west-2", "AvailabilityZoneId": "usw2-az1", "Score": 9})
    with Stubber(ec2) as stub:
        stub.add_response(
            "get_spot_placement_scores",
            response,
            {
                "InstanceTypes": ["p5en.48xlarge"],
                "TargetCapacity": 2,
                "TargetCapacityUnitType": "units",
                "SingleAvailabilityZone": True,
                "RegionNames": ["us-east-1"],
            },
        )
        # WHEN reading the scores with this account's ID -> name mapping
        scores = capacity.placement_scores(
            ec2,
            region="us-east-1",
            instance_type="p5en.48xlarge",
            count=2,
            zone_names={"use1-az6": "us-east-1a", "use1-az2": "us-east-1c", "use1-az4": "us-east-1d"},
        )
    # THEN they are keyed by AZ name, and other regions' entries are dropped
    assert scores == {"us-east-1a": 3, "us-east-1c": 8, "us-east-1d": 1}


def test_missing_placement_scores_leave_the_offered_zones_usable(moto_region):
    """moto for offerings; Stubber for the quota and for the placement-score error (UnauthorizedOperation)."""
    ec2, quotas = moto_region
    with PartialStubber(ec2) as ec2_stub, Stubber(quotas) as quota_stub:
        quota_stub.add_response("get_service_quota", recorded("service_quota_p.json"))
        ec2_stub.add_client_error("get_spot_placement_scores", "UnauthorizedOperation", "not authorized")
        report = capacity.check_capacity(
            CapacityRequest(region="us-east-1", instance_type="p5en.48xlarge", count=2),
            ec2=ec2,
            service_quotas=quotas,
            catalog_vcpus=192,
        )
    # THEN the error is reported and the first offered AZ (by name) is recommended
    assert report.placement_scores_error is not None
    assert report.placement_scores_error.startswith("UnauthorizedOperation")
    assert report.recommended_zone == "us-east-1a"


# -- ranking --------------------------------------------------------------------------------------------------------


def test_rank_zones_orders_offered_then_probe_then_score():
    # GIVEN zones with every kind of signal
    zones = [
        ZoneReport(zone="z-not-offered", zone_id=None, offered=False, placement_score=10),
        ZoneReport(
            zone="z-no-capacity",
            zone_id=None,
            offered=True,
            placement_score=9,
            probe=ProbeResult(zone="z-no-capacity", outcome=INSUFFICIENT_CAPACITY),
        ),
        ZoneReport(zone="z-unknown-high", zone_id=None, offered=True, placement_score=7),
        ZoneReport(zone="z-unknown-low", zone_id=None, offered=True, placement_score=2),
        ZoneReport(
            zone="z-reserved",
            zone_id=None,
            offered=True,
            placement_score=1,
            probe=ProbeResult(zone="z-reserved", outcome=AVAILABLE),
        ),
    ]
    # WHEN ranked THEN a reserved AZ beats any score, no capacity sinks below unknown, not offered is last
    assert [z.zone for z in capacity.rank_zones(zones)] == [
        "z-reserved",
        "z-unknown-high",
        "z-unknown-low",
        "z-no-capacity",
        "z-not-offered",
    ]


# -- the probe (Stubber: moto implements no capacity reservation call) ----------------------------------------------


def create_params() -> dict:
    return {
        "ClientToken": ANY,
        "InstanceType": "p5en.48xlarge",
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": "us-east-1c",
        "InstanceCount": 2,
        "InstanceMatchCriteria": "targeted",
        "EndDateType": "limited",
        "EndDate": ANY,
        "TagSpecifications": ANY,
    }


def test_probe_reserves_targeted_capacity_and_cancels_it():
    ec2 = stubbed_ec2()
    with Stubber(ec2) as stub:
        stub.add_response("create_capacity_reservation", reservation("active"), create_params())
        stub.add_response(*CANCEL)
        # WHEN probing an AZ that has the capacity
        result = capacity.probe_zone(ec2, **PROBE)
        # THEN the reservation was targeted, it counted as available, and it was cancelled
        stub.assert_no_pending_responses()
    assert (result.outcome, result.reservation_id, result.cancelled) == (AVAILABLE, RESERVATION_ID, True)


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        ("InsufficientInstanceCapacity", INSUFFICIENT_CAPACITY),
        ("InstanceLimitExceeded", QUOTA_EXCEEDED),
        ("ReservationCapacityExceeded", QUOTA_EXCEEDED),
        ("VcpuLimitExceeded", QUOTA_EXCEEDED),
        ("UnauthorizedOperation", ERROR),
    ],
)
def test_probe_tells_capacity_errors_from_quota_errors(code, outcome):
    """Stubber: EC2's error answers to create-capacity-reservation; nothing was created, so nothing is cancelled."""
    ec2 = stubbed_ec2()
    with Stubber(ec2) as stub:
        stub.add_client_error("create_capacity_reservation", code, f"{code} in us-east-1c")
        result = capacity.probe_zone(ec2, **PROBE)
        stub.assert_no_pending_responses()  # and no cancel call was made
    assert (result.outcome, result.error_code, result.cancelled) == (outcome, code, False)


def test_probe_cancels_when_an_exception_is_raised_between_create_and_cancel():
    ec2 = stubbed_ec2()
    with Stubber(ec2) as stub:
        # GIVEN a reservation that is created pending, and an API error while waiting for it to settle
        stub.add_response("create_capacity_reservation", reservation("pending"))
        stub.add_client_error("describe_capacity_reservations", "RequestLimitExceeded", "slow down")
        stub.add_response(*CANCEL)
        # WHEN probing THEN the error propagates AND the reservation was cancelled on the way out
        with pytest.raises(ClientError, match="RequestLimitExceeded"):
            capacity.probe_zone(ec2, **PROBE, sleep=lambda _: None)
        stub.assert_no_pending_responses()


def interrupted_probe(scenario: str) -> dict[str, object]:
    """The probe of tests/ops/probe_signals.py, interrupted by real signals in a process of its own: a signal sent to
    pytest's process could still be pending when the test ends and reach a later one."""
    child = subprocess.run(
        [sys.executable, "-m", "tests.ops.probe_signals", scenario],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, f"the probe's process ended with {child.returncode}:\n{child.stderr}"
    return json.loads(child.stdout.splitlines()[-1])


@pytest.mark.spawn
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_probe_cancels_when_a_signal_arrives_between_create_and_cancel(signum: signal.Signals):
    # WHEN the signal arrives while the probe waits for its reservation to settle
    outcome = interrupted_probe(signum.name)
    # THEN it surfaces as ProbeInterrupted after the cancel (the last stubbed call)
    assert (outcome["raised"], outcome["signum"], outcome["every_stubbed_call_made"]) == (
        "ProbeInterrupted",
        signum,
        True,
    )
    # AND the process's own signal handlers are back
    assert outcome["handlers_back"] is True


@pytest.mark.spawn
def test_a_second_signal_during_the_cancel_does_not_abort_it():
    # GIVEN the first cancel attempt fails and the user presses Ctrl-C again while it is retried
    outcome = interrupted_probe("second-SIGINT")
    # THEN the retry still ran: the reservation is cancelled, and the probe ends as interrupted
    assert (outcome["raised"], outcome["every_stubbed_call_made"]) == ("ProbeInterrupted", True)


def test_probe_finds_and_cancels_a_reservation_whose_create_answer_was_lost():
    ec2 = stubbed_ec2()

    def interrupt_after_create(**_):
        raise KeyboardInterrupt  # EC2 made the reservation, the process never saw the answer

    ec2.meta.events.register("after-call.ec2.CreateCapacityReservation", interrupt_after_create)
    with Stubber(ec2) as stub:
        stub.add_response("create_capacity_reservation", reservation("active"))
        # THEN it is found by the probe's own tag and cancelled
        stub.add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": [reservation("active")["CapacityReservation"]]},
            {"Filters": [{"Name": "tag:ray-efa:capacity-probe", "Values": [ANY]}]},
        )
        stub.add_response(*CANCEL)
        with pytest.raises(KeyboardInterrupt):
            capacity.probe_zone(ec2, **PROBE)
        stub.assert_no_pending_responses()


def test_a_failed_cancel_says_which_command_to_run():
    ec2 = stubbed_ec2()
    with Stubber(ec2) as stub:
        stub.add_response("create_capacity_reservation", reservation("active"))
        for _ in range(3):
            stub.add_client_error("cancel_capacity_reservation", "InternalError", "try again")
        # WHEN every cancel attempt fails THEN the error names the reservation and the exact command
        with pytest.raises(
            CancelFailed,
            match=f"aws ec2 cancel-capacity-reservation --capacity-reservation-id {RESERVATION_ID} --region us-east-1",
        ):
            capacity.probe_zone(ec2, **PROBE, sleep=lambda _: None)


# -- the whole check: moto + stubs ----------------------------------------------------------------------------------


def test_check_capacity_ranks_by_placement_score_and_lists_zones_that_do_not_offer_the_type(moto_region):
    ec2, quotas = moto_region
    with PartialStubber(ec2) as ec2_stub, Stubber(quotas) as quota_stub:
        quota_stub.add_response("get_service_quota", recorded("service_quota_p.json"))
        ec2_stub.add_response("get_spot_placement_scores", recorded("spot_placement_scores_us_east_1.json"))
        report = capacity.check_capacity(
            CapacityRequest(region="us-east-1", instance_type="p5en.48xlarge", count=2),
            ec2=ec2,
            service_quotas=quotas,
            catalog_vcpus=192,
        )
    # THEN us-east-1c (score 8) beats us-east-1a (score 3); the four AZs without p5en come after, not usable
    assert [z.zone for z in report.zones[:2]] == ["us-east-1c", "us-east-1a"]
    assert not any(z.offered for z in report.zones[2:]) and len(report.zones) == 6
    assert report.quota is not None and report.quota.needed_vcpus == 2 * 192 and report.quota.sufficient
    assert report.ok


def test_check_capacity_probes_offered_zones_best_score_first_and_prefers_reserved_capacity(moto_region):
    ec2, quotas = moto_region
    with PartialStubber(ec2) as ec2_stub, Stubber(quotas) as quota_stub:
        quota_stub.add_response("get_service_quota", recorded("service_quota_p.json"))
        ec2_stub.add_response("get_spot_placement_scores", recorded("spot_placement_scores_us_east_1.json"))
        # GIVEN the higher-scored us-east-1c has no capacity now, us-east-1a has
        ec2_stub.add_client_error(
            "create_capacity_reservation",
            "InsufficientInstanceCapacity",
            "no capacity",
            expected_params={**create_params(), "AvailabilityZone": "us-east-1c"},
        )
        ec2_stub.add_response(
            "create_capacity_reservation", reservation("active"), {**create_params(), "AvailabilityZone": "us-east-1a"}
        )
        ec2_stub.add_response(*CANCEL)
        report = capacity.check_capacity(
            CapacityRequest(region="us-east-1", instance_type="p5en.48xlarge", count=2, probe=True),
            ec2=ec2,
            service_quotas=quotas,
            catalog_vcpus=192,
        )
        ec2_stub.assert_no_pending_responses()
    # THEN the AZ with reserved (and cancelled) capacity is recommended
    assert report.recommended_zone == "us-east-1a"
    first, second = report.zones[0].probe, report.zones[1].probe
    assert first is not None and first.cancelled
    assert second is not None and second.outcome == INSUFFICIENT_CAPACITY


def test_check_capacity_skips_the_probe_when_the_quota_is_short(moto_region):
    ec2, quotas = moto_region
    launch(ec2, "g6.12xlarge")
    with PartialStubber(ec2) as ec2_stub, Stubber(quotas) as quota_stub:
        quota_stub.add_response("get_service_quota", recorded("service_quota_g_and_vt.json"))
        ec2_stub.add_response("get_spot_placement_scores", {"SpotPlacementScores": []})
        # WHEN probing with a short quota (no create call is queued: one would fail the test)
        report = capacity.check_capacity(
            CapacityRequest(region="us-east-1", instance_type="g6.12xlarge", count=2, probe=True),
            ec2=ec2,
            service_quotas=quotas,
            catalog_vcpus=48,
        )
    # THEN no reservation was attempted and the report fails on the quota
    assert all(z.probe is None for z in report.zones)
    assert report.quota_refused and not report.ok


# -- a named reservation: its AZ, type, size and state, before the deploy -------------------------------------------
# moto has no capacity reservations: describe-capacity-reservations is answered from the recorded reservation
# (validated by botocore against the EC2 model); the rest of the check runs on moto.


def _reservation_request(**changes) -> CapacityRequest:
    return CapacityRequest(
        **{
            "region": "us-east-1",
            "instance_type": "p5en.48xlarge",
            "count": 2,
            "reservation_id": RESERVATION_ID,
            "reservation_zone": "us-east-1c",
            **changes,
        }
    )


def _check_with(moto_region, request: CapacityRequest, described: dict | None, error: str | None = None):
    ec2, quotas = moto_region
    with PartialStubber(ec2) as ec2_stub, Stubber(quotas) as quota_stub:
        quota_stub.add_response("get_service_quota", recorded("service_quota_p.json"))
        ec2_stub.add_response("get_spot_placement_scores", recorded("spot_placement_scores_us_east_1.json"))
        if error:
            ec2_stub.add_client_error("describe_capacity_reservations", service_error_code=error, http_status_code=400)
        else:
            ec2_stub.add_response(
                "describe_capacity_reservations",
                {"CapacityReservations": [described]},
                {"CapacityReservationIds": [RESERVATION_ID]},
            )
        return capacity.check_capacity(request, ec2=ec2, service_quotas=quotas, catalog_vcpus=192)


def _reserved(**changes) -> dict:
    return {**recorded("create_capacity_reservation_active.json")["CapacityReservation"], **changes}


def test_a_reservation_that_fits_the_nodes_passes(moto_region):
    report = _check_with(moto_region, _reservation_request(), _reserved())
    assert report.reservation is not None and report.reservation.ok and report.ok
    assert report.as_dict()["reservation"]["zone"] == "us-east-1c"


@pytest.mark.parametrize(
    "changes, request_changes, says",
    [
        (
            {"AvailabilityZone": "us-east-1a"},
            {},
            "is in us-east-1a, but the GPU nodes launch in us-east-1c: set gpuAvailabilityZone=us-east-1a",
        ),
        ({"InstanceType": "p5.48xlarge"}, {}, "reserves p5.48xlarge, but gpuInstanceType is p5en.48xlarge"),
        ({"TotalInstanceCount": 1, "AvailableInstanceCount": 1}, {}, "holds 1 instance(s), but gpuNodeCount is 2"),
        ({"State": "expired"}, {}, "is expired: nothing launches into it"),
        ({"State": "cancelled"}, {}, "is cancelled"),
        ({}, {"capacity_block": True}, "is a capacity reservation: set capacityReservationType=odcr"),
        ({"ReservationType": "capacity-block"}, {}, "is a Capacity Block: set capacityReservationType=capacity-block"),
    ],
)
def test_a_reservation_the_nodes_cannot_launch_into_is_refused_naming_the_setting(
    moto_region, changes, request_changes, says
):
    report = _check_with(moto_region, _reservation_request(**request_changes), _reserved(**changes))
    assert report.reservation is not None and not report.ok
    assert any(says in p for p in report.reservation.problems), report.reservation.problems
    assert all(p.startswith(f"capacityReservationId {RESERVATION_ID}") for p in report.reservation.problems)


def test_a_capacity_block_not_started_yet_is_a_note(moto_region):
    block = _reserved(State="scheduled", ReservationType="capacity-block", StartDate="2026-12-10T11:30:00Z")
    report = _check_with(moto_region, _reservation_request(capacity_block=True), block)
    assert report.reservation is not None
    assert report.ok and "is scheduled: the nodes launch once it is active" in report.reservation.notes[0]


def test_a_reservation_ec2_does_not_know_is_refused(moto_region):
    report = _check_with(moto_region, _reservation_request(), None, error="InvalidCapacityReservationId.NotFound")
    assert not report.ok and report.reservation is not None
    assert report.reservation.problems == (
        f"capacityReservationId {RESERVATION_ID}: EC2 knows no such reservation in us-east-1 for this account",
    )

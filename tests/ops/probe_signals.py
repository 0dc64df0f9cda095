"""A capacity probe interrupted by a real signal, in a process of its own: `python -m tests.ops.probe_signals SCENARIO`.

tests/ops/test_capacity.py starts this: the signal goes to this child's pid, never to pytest's process, where a
signal still pending under load once reached a later test. Prints one JSON line (what `outcome` returns); EC2 is a
botocore Stubber with the recorded answers, as in the test module.

Scenarios: SIGINT or SIGTERM while the probe waits for its reservation to settle; `second-SIGINT` is Ctrl-C while
waiting and again while the first cancel attempt is retried.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import boto3
from botocore.stub import Stubber

from ray_efa.ops import capacity
from tests.ops.aws_stubs import CANCEL, PROBE, reservation

SCENARIOS = {"SIGINT": [signal.SIGINT], "SIGTERM": [signal.SIGTERM], "second-SIGINT": [signal.SIGINT, signal.SIGINT]}


def outcome(scenario: str) -> dict[str, object]:
    """What the probe raised (its name and `signum`), whether every stubbed call ran (the cancel's among them), and
    whether SIGINT's and SIGTERM's handlers are the process's own again."""
    ec2 = boto3.client("ec2", region_name="us-east-1")
    signals = iter(SCENARIOS[scenario])

    def signal_while_waiting(_seconds: float) -> None:
        os.kill(os.getpid(), next(signals))  # Ctrl-C, or `kill` from another shell, while the reservation exists

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    raised: BaseException | None = None
    with Stubber(ec2) as stub:
        stub.add_response("create_capacity_reservation", reservation("pending"))
        if scenario == "second-SIGINT":  # the first cancel attempt fails, so the retry's wait gets the second signal
            stub.add_client_error("cancel_capacity_reservation", "RequestLimitExceeded", "slow down")
        stub.add_response(*CANCEL)
        try:
            capacity.probe_zone(ec2, **PROBE, sleep=signal_while_waiting)
        except BaseException as error:  # noqa: BLE001 (a KeyboardInterrupt that is not ProbeInterrupted is the finding)
            raised = error
        try:
            stub.assert_no_pending_responses()
            every_call_made = True
        except AssertionError:
            every_call_made = False
    return {
        "raised": type(raised).__name__ if raised is not None else None,
        "signum": getattr(raised, "signum", None),
        "every_stubbed_call_made": every_call_made,
        "handlers_back": {s: signal.getsignal(s) for s in handlers} == handlers,
    }


if __name__ == "__main__":
    print(json.dumps(outcome(sys.argv[1])))

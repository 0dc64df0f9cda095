"""The failure policy of every run (training.failure_policy), judged on the errors Ray Train hands it: a lost worker
is retried maxFailures times and said in one line; an exception of the code ends the run at once."""

import pytest
import torch.distributed as dist
from ray.exceptions import ActorDiedError, NodeDiedError, RayActorError
from ray.train import FailureConfig, WorkerGroupError
from ray.train.v2._internal.exceptions import WorkerHealthCheckFailedError
from ray.train.v2._internal.execution.failure_handling import FailureDecision

from ray_efa.training.failure_policy import RetryLostWorkersPolicy, code_errors, is_worker_loss


def _failed(**by_rank: Exception) -> WorkerGroupError:
    return WorkerGroupError("workers failed", {int(rank.removeprefix("r")): e for rank, e in by_rank.items()})


def _lost() -> Exception:
    return WorkerHealthCheckFailedError("worker 1 health check failed", ActorDiedError())


def test_an_exception_of_the_code_is_raised_at_once_whatever_max_failures(capsys):
    policy = RetryLostWorkersPolicy(FailureConfig(max_failures=2))
    assert policy.make_decision(_failed(r0=ValueError("bad shape"))) == FailureDecision.RAISE
    assert capsys.readouterr().out == ""  # the driver prints the traceback; nothing about a retry


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("CUDA error: an illegal memory access was encountered"),
        RuntimeError("mat1 and mat2 shapes cannot be multiplied"),
    ],
)
def test_a_runtime_error_of_the_code_is_not_a_lost_worker(capsys, error):
    # GIVEN a RuntimeError on one rank and nothing lost (torch raises RuntimeError for the code's own bugs)
    policy = RetryLostWorkersPolicy(FailureConfig(max_failures=2))
    # THEN it is the code's: raised at once, not retried
    assert not is_worker_loss(error)
    assert set(code_errors(_failed(r1=error))) == {1}
    assert policy.make_decision(_failed(r1=error)) == FailureDecision.RAISE
    assert capsys.readouterr().out == ""


def test_a_lost_worker_is_retried_max_failures_times_each_said_in_one_line(capsys):
    policy = RetryLostWorkersPolicy(FailureConfig(max_failures=2))
    # the lost rank's peers fail in their collectives, or with the code's own error that followed: still a loss
    error = _failed(r0=RuntimeError("gloo: Connection closed by peer"), r1=_lost())
    assert [policy.make_decision(error) for _ in range(3)] == [
        FailureDecision.RETRY,
        FailureDecision.RETRY,
        FailureDecision.RAISE,
    ]
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("worker lost (rank 1: ActorDiedError: The actor died unexpectedly")
    assert lines[0].endswith("retrying from the last checkpoint, attempt 2 of 3")
    assert lines[1].endswith("attempt 3 of 3")


def test_a_broken_collective_alone_is_retried():
    policy = RetryLostWorkersPolicy(FailureConfig(max_failures=1))
    assert policy.make_decision(_failed(r0=dist.DistBackendError("NCCL error"))) == FailureDecision.RETRY


@pytest.mark.parametrize(
    ("failures", "code"),
    [
        ({0: ValueError("x")}, {0}),
        ({0: ValueError("x"), 1: dist.DistNetworkError("peer gone")}, {0}),  # the code's error, its peer's collective
        ({0: ValueError("x"), 1: ActorDiedError()}, set()),  # a lost worker explains the rest
        ({0: dist.DistBackendError("timeout")}, set()),
    ],
)
def test_the_code_errors_are_the_ranks_that_raised_without_a_lost_worker(failures, code):
    assert set(code_errors(WorkerGroupError("failed", failures))) == code


def _unpicklable() -> Exception:
    """The failed health check of a live worker whose exception the controller cannot rebuild (the TypeError
    unpickling raises for an exception class with a required second argument, as Ray 2.58 reports it)."""
    return WorkerHealthCheckFailedError(
        "A worker health check failed.",
        TypeError("TwoPartError.__init__() missing 1 required positional argument: 'code'"),
    )


def test_a_health_check_that_failed_on_the_codes_exception_is_not_a_lost_worker(capsys):
    # GIVEN a failed health check whose cause is an exception the controller could not rebuild, maxFailures 1
    policy = RetryLostWorkersPolicy(FailureConfig(max_failures=1))
    error = _failed(r0=_unpicklable(), r1=_unpicklable())
    # THEN it is the code's: raised at once, not retried as a lost worker
    assert not is_worker_loss(error.worker_failures[0])
    assert set(code_errors(error)) == {0, 1}
    assert policy.make_decision(error) == FailureDecision.RAISE
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("cause", [ActorDiedError(), NodeDiedError("node gone"), RayActorError(preempted=True)])
def test_a_health_check_that_failed_on_a_dead_actor_or_node_is_a_lost_worker(cause):
    assert is_worker_loss(WorkerHealthCheckFailedError("A worker health check failed.", cause))


def test_a_preemption_retry_counts_preemptions(capsys):
    # GIVEN a worker on a preempted node (Ray Train counts these apart, against maxPreemptionFailures) and 2 allowed
    policy = RetryLostWorkersPolicy(FailureConfig(max_failures=0, max_preemption_failures=2))
    preempted = _failed(
        r1=WorkerHealthCheckFailedError(
            "worker 1 health check failed", RayActorError(error_msg="node preempted", preempted=True)
        )
    )
    # WHEN it is preempted three times
    assert [policy.make_decision(preempted) for _ in range(3)] == [
        FailureDecision.RETRY,
        FailureDecision.RETRY,
        FailureDecision.RAISE,
    ]
    # THEN each retry line counts the preemptions, against their own limit (not attempt 1 of 1 each time)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": retrying")[0] for line in lines] == [
        "worker preempted (rank 1: RayActorError: node preempted)"
    ] * 2
    assert [line.rsplit(", ", 1)[1] for line in lines] == ["attempt 2 of 3", "attempt 3 of 3"]

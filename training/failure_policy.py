"""Which failures a run retries: a lost worker or node, yes (maxFailures times); an exception of the code, never.

Ray Train's default policy retries every worker error up to FailureConfig(max_failures), so a deterministic
ValueError in trainFunction ran again (and printed its traceback again, and ran the preflight again) only to fail the
same way. This policy, installed by training.driver.fit, asks what failed:

    a worker died (its actor, its node, Ray's memory monitor)   retry, one line: "worker lost (...): retrying, attempt
                                                                2 of 3"; the other ranks' broken collectives go with it
    only collectives broke (torch.distributed.DistError)        retry the same way: the network, not the code
    the code raised (any other exception on any rank)           end the run now: the driver prints the traceback once

A failed health check (WorkerHealthCheckFailedError) is a lost worker only when its cause is: the poll of a live
worker also fails when what the worker sent cannot be rebuilt on the controller (an exception of the code whose class
takes other arguments than its args, or lives in a module the controller cannot import), and that is the code's.
A hanging health check (WorkerHealthCheckTimeoutError) is a worker that stopped answering: lost.

Preemptions and controller errors keep Ray Train's own counting (ray/train/v2/_internal/execution/failure_handling/
default.py), which this extends; a preemption's retry line counts preemptions against maxPreemptionFailures.
"""

from __future__ import annotations

import sys

from ray.exceptions import LocalRayletDiedError, NodeDiedError, OutOfMemoryError, RayActorError, WorkerCrashedError
from ray.train.v2._internal.exceptions import WorkerHealthCheckFailedError, WorkerHealthCheckTimeoutError
from ray.train.v2._internal.execution.failure_handling import DefaultFailurePolicy, FailureDecision
from ray.train.v2._internal.execution.failure_handling.default import _is_preemption_failure
from ray.train.v2.api.exceptions import TrainingFailedError, WorkerGroupError

__all__ = ["RetryLostWorkersPolicy", "is_worker_loss", "is_collective_error", "code_errors"]

_DIED = (RayActorError, WorkerCrashedError, NodeDiedError, OutOfMemoryError, LocalRayletDiedError)
"""What Ray raises for a process or node that is gone (ray.exceptions; RayActorError covers ActorDiedError, also a
preempted node's, and ActorUnavailableError)."""


def is_worker_loss(error: BaseException) -> bool:
    """The worker's process or node is gone (or stopped answering): nothing the code on it raised. A failed health
    check is a loss only when its cause is one (see the module docstring)."""
    if isinstance(error, WorkerHealthCheckFailedError):
        return isinstance(error.health_check_failure, _DIED)
    return isinstance(error, (*_DIED, WorkerHealthCheckTimeoutError))


def is_collective_error(error: BaseException) -> bool:
    """A torch.distributed communication error (DistBackendError, DistNetworkError, DistStoreError): a peer or the
    network broke the collective. Matched by name, so that the controller need not import torch."""
    return any(cls.__name__ == "DistError" and cls.__module__.startswith("torch") for cls in type(error).__mro__)


def code_errors(error: WorkerGroupError) -> dict[int, BaseException]:
    """The ranks whose failure is the code's own exception; empty when a worker was lost (the other ranks' errors are
    then its consequence) or when only collectives broke."""
    failures = error.worker_failures
    if any(is_worker_loss(e) for e in failures.values()):
        return {}
    return {rank: e for rank, e in failures.items() if not is_collective_error(e)}


def _reason(error: WorkerGroupError) -> str:
    """One line: what failed first, on which ranks."""
    failures = error.worker_failures
    if not failures:
        return "no worker error recorded"
    lost = {rank: e for rank, e in failures.items() if is_worker_loss(e)} or failures
    _, first = min(lost.items())
    first = getattr(first, "health_check_failure", first)  # the health check's cause: the actor's death
    message = " ".join(str(first).split())
    if len(message) > 160:
        message = message[:157] + "..."
    ranks = ", ".join(str(r) for r in sorted(lost))
    return f"rank{'s' if len(lost) > 1 else ''} {ranks}: {type(first).__name__}: {message}"


class RetryLostWorkersPolicy(DefaultFailurePolicy):
    """Ray Train's DefaultFailurePolicy, except that an exception of the code on a worker is never retried, and each
    retry is said in one line."""

    def make_decision(self, training_failed_error: TrainingFailedError) -> FailureDecision:
        if isinstance(training_failed_error, WorkerGroupError) and code_errors(training_failed_error):
            return FailureDecision.RAISE  # the same code on the same data fails the same way: no retry
        decision = super().make_decision(training_failed_error)
        if decision == FailureDecision.RETRY and isinstance(training_failed_error, WorkerGroupError):
            config = self.failure_config
            if _is_preemption_failure(training_failed_error):  # Ray counts these apart, against their own limit
                what = "worker preempted"
                failures, limit = self._preemption_failures, config.max_preemption_failures
            else:
                lost = any(is_worker_loss(e) for e in training_failed_error.worker_failures.values())
                what = "worker lost" if lost else "collective failed"
                failures, limit = self._worker_group_failures, config.max_failures
            total = "unlimited" if limit == -1 else str(limit + 1)
            # The controller's stdout reaches the driver's output (Ray's log_to_driver), one line.
            sys.stdout.write(
                f"{what} ({_reason(training_failed_error)}): retrying from the last checkpoint, "
                f"attempt {failures + 1} of {total}\n"
            )
            sys.stdout.flush()
        return decision

"""`ray-efa submit`'s pure parts: unique job names and the exit code a finished RayJob gives. Everything that talks
to the Kubernetes API runs against the real control plane: tests/cluster/test_submit.py (and test_submit_follow.py
with the real KubeRay operator)."""

from __future__ import annotations

import json

import pytest

from ray_efa.ops.submit import JobState, job_exit_code, unique_job_name

JOB = "mlp-exp-run1"


def test_unique_names_fit_job_name_and_differ():
    names = {unique_job_name("train-efa") for _ in range(20)}
    assert len(names) == 20 and all(n.startswith("train-efa-") and len(n) == 15 for n in names)
    assert unique_job_name("x" * 43, token="abcde") == "x" * 37 + "-abcde"


@pytest.mark.parametrize(
    ("status", "code"),
    [
        ({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}, 0),
        (
            {
                "jobDeploymentStatus": "Failed",
                "jobStatus": "FAILED",
                "message": "Job entrypoint command failed with exit code 2, last available logs",
            },
            2,
        ),
        (
            {
                "jobDeploymentStatus": "Failed",
                "reason": "DeadlineExceeded",
                "message": "The RayJob has passed the deadline",
            },
            1,
        ),
    ],
)
def test_the_exit_code_is_the_drivers(status, code):
    state = JobState(deployment=status["jobDeploymentStatus"], job=status.get("jobStatus", ""), status=status)
    assert job_exit_code(state) == code
    assert json.dumps(status)  # plain data

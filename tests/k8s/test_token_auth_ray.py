"""Ray token authentication as KubeRay sets it up, on a real Ray 2.58 head: nobody in the job's path copies a token.

KubeRay puts RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (from the cluster's Secret) into the head's container, where
`ray start` runs, and into the submitter's. The job's driver is started on the head by Ray's job supervisor, a Ray
worker process, so it has the head's environment. This test starts a head the same way (`ray start --head` with those
two variables), then, like the job supervisor, runs a driver from a Ray worker process with no token passed to it,
and checks that a client without the token is turned away.

The submitter's own call (`ray job submit` against the dashboard) is not run here: the dashboard needs the
ray[default] extras, which this project's lock file does not install. KubeRay's e2e test "Successful RayJob in K8s
Job mode with auth token" (ray-operator/test/e2erayjob/rayjob_test.go, v1.7.0) covers that path.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ray_efa.k8s.security import AUTH_MODE_ENV

# Serialized with the other tests that start Ray: the no-cluster test would see this head and skip.
pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray-token-auth")]  # one head for the module

RAY = Path(sys.executable).with_name("ray")

DRIVER_FROM_A_WORKER = """
import os, subprocess, sys
import ray

ray.init(address=sys.argv[1])

@ray.remote(num_cpus=0)
def start_driver(address):
    # What the job supervisor does with the RayJob's entrypoint: a subprocess with the worker's environment.
    code = "import ray, sys; ray.init(address=sys.argv[1]); print('driver', ray.get(ray.remote(lambda: 6 * 7).remote()))"
    done = subprocess.run([sys.executable, "-c", code, address], capture_output=True, text=True, timeout=180,
                          env=dict(os.environ))
    return done.returncode, done.stdout, done.stderr[-2000:], "RAY_AUTH_TOKEN" in os.environ

returncode, stdout, stderr, worker_had_token = ray.get(start_driver.remote(sys.argv[1]))
print("worker_had_token", worker_had_token)
print(stdout)
print(stderr, file=sys.stderr)
sys.exit(returncode)
"""

CONNECT = "import ray, sys; ray.init(address=sys.argv[1]); print('connected')"
HEAD_REFUSES = "InvalidAuthToken: Authentication token is missing or incorrect"
"""What the head's GCS answers a client whose token is missing or wrong (the client logs it, then gives up)."""
CONNECT_ATTEMPTS = {"RAY_NUM_REDIS_GET_RETRIES": "2"}
"""Ray's own setting for how many times (about 1 s apart) a client asks the GCS before it gives up: 20 by default.
Every attempt gets the same refusal (HEAD_REFUSES, asserted), so two prove what twenty do, in 2 s instead of 20."""


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    # HOME of our own: Ray also looks for a token in ~/.ray/auth_token, which must not decide the outcome.
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


@pytest.fixture(scope="module")
def token_head():
    """A Ray head started as KubeRay starts it with token auth on; yields (address, token, scratch dir)."""
    scratch = Path(tempfile.mkdtemp(prefix="rta-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    (scratch / "home").mkdir()
    token = secrets.token_urlsafe(32)
    gcs, agent, agent_grpc, metrics, runtime_env = _free_ports(5)
    head_env = _env(scratch / "home", **{AUTH_MODE_ENV: "token", "RAY_AUTH_TOKEN": token})
    log = (scratch / "head.log").open("w")
    head = subprocess.Popen(
        [
            str(RAY),
            "start",
            "--head",
            "--block",
            f"--port={gcs}",
            "--num-cpus=1",
            "--include-dashboard=false",
            f"--temp-dir={scratch / 't'}",
            f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--metrics-export-port={metrics}",
            f"--runtime-env-agent-port={runtime_env}",
        ],
        env=head_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert head.poll() is None, (scratch / "head.log").read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", gcs), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the Ray head did not open its GCS port in 120 s"
                time.sleep(1)
        yield f"127.0.0.1:{gcs}", token, scratch
    finally:
        # Our own process group (start_new_session): the head and everything it started, nothing else.
        os.killpg(head.pid, signal.SIGTERM)
        # A moment for the raylet and the agents, which exit on SIGTERM at once. `ray start --block` itself does not
        # (it keeps the GCS up: both still there 10 s later), so a longer wait only ever ran out.
        try:
            head.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        if _group_alive(head.pid):  # `ray start --block` leaves GCS (and itself) behind on SIGTERM
            os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=30)
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_a_driver_started_on_the_head_joins_with_no_token_handed_to_it(token_head):
    # GIVEN the head's token in the caller's env, as KubeRay gives it to the submitter and to `kubectl exec` shells
    address, token, scratch = token_head
    env = _env(scratch / "home", **{AUTH_MODE_ENV: "token", "RAY_AUTH_TOKEN": token})
    # WHEN a Ray worker on the head starts a driver the way the job supervisor does, passing it no token
    done = subprocess.run(
        [sys.executable, "-c", DRIVER_FROM_A_WORKER, address], env=env, capture_output=True, text=True, timeout=300
    )
    # THEN the driver joined the cluster and ran a task: it had the token from the head's environment
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "worker_had_token True" in done.stdout and "driver 42" in done.stdout


def test_a_client_without_the_right_token_is_refused(token_head):
    address, _, scratch = token_head
    # GIVEN pods that reach the GCS without the cluster's token (fresh HOMEs, so no ~/.ray/auth_token either):
    # Ray's auth mode on and no token (refused before it sends anything), mode off (refused by the head), a wrong token
    clients = {
        "no token": ({AUTH_MODE_ENV: "token"}, ("no authentication token was found",)),
        "auth off": ({AUTH_MODE_ENV: "disabled"}, ("Failed to connect", HEAD_REFUSES)),
        "wrong token": ({AUTH_MODE_ENV: "token", "RAY_AUTH_TOKEN": secrets.token_urlsafe(32)}, (HEAD_REFUSES,)),
    }
    running = {}
    for who, (extra, _) in clients.items():  # at once: each refusal takes Ray's connection attempts
        home = scratch / who.replace(" ", "-")
        home.mkdir(exist_ok=True)
        running[who] = subprocess.Popen(
            [sys.executable, "-c", CONNECT, address],
            env=_env(home, **extra, **CONNECT_ATTEMPTS),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    # WHEN they connect THEN none gets in
    for who, client in running.items():
        stdout, stderr = client.communicate(timeout=240)
        assert client.returncode != 0 and "connected" not in stdout, (who, stdout)
        assert all(words in stderr for words in clients[who][1]), (who, stderr[-3000:])

"""`ray-efa jobs`, `logs` and `cancel` against the real control plane: the deployment's training RayJob (running: its
submitter pod keeps running, tests/cluster/deployment.py) reconciled by the real KubeRay operator into a RayCluster and
pods on the nodes, read by a researcher (the stack's Role and admission policy, k8s.researcher_rbac and
k8s.admission_policy: read, and delete only their own RayJobs) and by an admin.
The pods' logs come from KWOK's kubelet API through the API server (ControlPlane.serve_logs)."""

from __future__ import annotations

import base64
import http.server
import io
import json
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from ray_efa.core.settings import Settings
from ray_efa.k8s.admission_policy import SUBMITTED_BY_ANNOTATION, researcher_admission
from ray_efa.k8s.researcher_rbac import RESEARCHER_GROUP, researcher_rbac
from tests.cluster.conftest import served_kuberay, wait_for
from tests.cluster.controlplane import ControlPlane
from tests.cluster.deployment import Deployment, exists, kubeconfig_with_context, ray_job_name
from tests.cluster.objects import name_of
from tests.cluster.rbac import api_client_of, user_kubeconfig
from tests.ops.cli_helpers import run_cli

NAMESPACE = "ops-jobs"
SETTINGS = Settings.from_context(
    {"gpuInstanceType": "g6.12xlarge", "gpuNodeCount": 2, "namespace": NAMESPACE, "kuberayVersion": served_kuberay()}
)  # what the served CRDs take
JOB = ray_job_name(SETTINGS)
NS = ("-c", f"namespace={NAMESPACE}")
DRIVER_LOG = (
    "Job 'x' submitted successfully\n"
    "step  10/100 | loss 2.3011 | 412 ms/step | 39,768 tok/s (4,971/device) | MFU 31.2% | mem 40.1/44.0 GiB"
    " | ETA 0:37\n"
    "step  20/100 | loss 2.1001 | 410 ms/step | 39,960 tok/s (4,995/device) | MFU 31.4% | mem 40.1/44.0 GiB"
    " | ETA 0:33\n"
    "transport gate: PASS: all 8 processes whose traffic crossed nodes used EFA (aws-ofi-nccl)\n"
)
WORKER_LOG = "worker 0: NCCL INFO NET/OFI Selected provider is efa\n"


@pytest.fixture(scope="module")
def deployed(control_plane: ControlPlane, api: ApiClient) -> Iterator[Deployment]:
    made = Deployment.up(control_plane, api, SETTINGS)
    # what ResearcherAccess applies: the Role (which lets researchers delete RayJobs) and the admission policy (which
    # admits the delete of their own alone)
    control_plane.apply([*researcher_rbac(NAMESPACE), *researcher_admission(NAMESPACE, group=RESEARCHER_GROUP)])
    control_plane.serve_logs(NAMESPACE, {"ray-job-submitter": DRIVER_LOG, "ray-worker": WORKER_LOG})
    yield made
    made.remove()


@pytest.fixture(scope="module")
def researcher(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A researcher: in the access entry's group, which the stack's Role lets read RayJobs, pods and logs."""
    return str(
        user_kubeconfig(
            control_plane, tmp_path_factory.mktemp("researcher"), user="researcher", groups=(RESEARCHER_GROUP,)
        )
    )


@pytest.fixture
def admin(control_plane: ControlPlane, tmp_path: Path) -> list[str]:
    return ["--kubeconfig", str(kubeconfig_with_context(control_plane, tmp_path)), "--kube-context", "research"]


def _job(api: ApiClient) -> Any:
    return client.CustomObjectsApi(api).get_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayjobs", JOB)


def test_jobs_lists_the_running_job_with_its_gpus_step_and_tokens_per_second(
    deployed: Deployment, researcher: str, capsys: pytest.CaptureFixture[str]
):
    wait_for(
        lambda: run_cli("logs", JOB, "--kubeconfig", researcher, *NS) == 0 and DRIVER_LOG in capsys.readouterr().out,
        "the driver log served by KWOK",
    )
    # WHEN a researcher lists the jobs as JSON
    code = run_cli("jobs", "--kubeconfig", researcher, *NS, "--json")
    out = capsys.readouterr().out
    assert code == 0, out
    (row,) = json.loads(out)["jobs"]
    # THEN the one RayJob is there as the operator runs it, with what its spec and its driver's log say
    assert (row["name"], row["state"], row["gpus"]) == (JOB, "Running", 8), row  # 2 x 4 GPUs
    assert (row["step"], row["total_steps"], row["tokens_per_s"]) == (20, 100, 39960.0), row
    assert row["gate"].startswith("transport gate: PASS"), row
    assert row["function"] == SETTINGS.training.train_function and row["age_s"] >= 0, row
    # AND the table shows the same for a person
    assert run_cli("jobs", "--kubeconfig", researcher, *NS) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header.split()[:6] == ["NAME", "STATE", "AGE", "GPUS", "STEP", "TOKENS/S"], header
    assert line.split()[0] == JOB and "Running" in line and " 20/100 " in line and "39,960" in line and "PASS" in line


def test_logs_prints_the_driver_a_worker_and_the_gates_verdict(
    deployed: Deployment, researcher: str, capsys: pytest.CaptureFixture[str]
):
    assert run_cli("logs", JOB, "--kubeconfig", researcher, *NS) == 0
    assert capsys.readouterr().out == DRIVER_LOG
    wait_for(
        lambda: (
            run_cli("logs", JOB, "--worker", "1", "--kubeconfig", researcher, *NS) == 0
            and capsys.readouterr().out == WORKER_LOG
        ),
        "worker 1's log",
    )
    assert run_cli("logs", JOB, "--gate", "--kubeconfig", researcher, *NS) == 0
    assert capsys.readouterr().out.splitlines() == [DRIVER_LOG.splitlines()[-1]]
    # a worker it does not have, and a job that is not there: exit 2, naming them
    assert run_cli("logs", JOB, "--worker", "2", "--kubeconfig", researcher, *NS) == 2
    assert f"RayJob {NAMESPACE}/{JOB} has no worker 2: it has workers 0..1" in capsys.readouterr().err
    assert run_cli("logs", "no-such-job", "--kubeconfig", researcher, *NS) == 2
    assert f"no RayJob {NAMESPACE}/no-such-job" in capsys.readouterr().err


class _Dashboard(http.server.BaseHTTPRequestHandler):
    """Stands in for the Ray dashboard behind the head's port 8265 (KWOK forwards there): answers each request with
    the Authorization header it got."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = f"ray dashboard {self.path} auth={self.headers.get('Authorization')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        pass


def test_dashboard_forwards_to_the_head_with_the_ray_token_until_ctrl_c(
    deployed: Deployment,
    api: ApiClient,
    control_plane: ControlPlane,
    researcher: str,
    admin: list[str],
    capsys: pytest.CaptureFixture[str],
):
    cluster = _job(api)["status"]["rayClusterName"]
    (head,) = (
        client.CoreV1Api(api)
        .list_namespaced_pod(NAMESPACE, label_selector=f"ray.io/cluster={cluster},ray.io/node-type=head")
        .items
    )
    # GIVEN the token Secret KubeRay 1.7.0's authOptions makes (named like the RayCluster; the operator here, v1.5.0,
    # makes none: tests/cluster/deployment.py) and the head's port 8265 forwarded by KWOK to a local server
    token = "t0ken-of-" + cluster
    client.CoreV1Api(api).create_namespaced_secret(
        NAMESPACE,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name=cluster), data={"auth_token": base64.b64encode(token.encode()).decode()}
        ),
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    client.CustomObjectsApi(api).create_cluster_custom_object(
        "kwok.x-k8s.io",
        "v1alpha1",
        "clusterportforwards",
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterPortForward",
            "metadata": {"name": "ray-dashboard"},
            "spec": {
                "selector": {"matchNamespaces": [NAMESPACE], "matchNames": [name_of(head)]},
                "forwards": [{"ports": [8265], "target": {"port": server.server_address[1], "address": "127.0.0.1"}}],
            },
        },
    )
    # a researcher may not read the Secret (nor port-forward): exit 1, saying so
    assert run_cli("dashboard", JOB, "--kubeconfig", researcher, *NS) == 1
    err = capsys.readouterr().err
    assert f"refused to read Secret {NAMESPACE}/{cluster}" in err and "403" in err and "researcher Role" in err, err
    # ...and where no token is read (a cluster without token auth), the port-forward itself is refused by name
    from ray_efa.ops.dashboard import DashboardForward, DashboardRefused, dashboard_target

    as_researcher = api_client_of(Path(researcher))
    forward = DashboardForward(as_researcher, dashboard_target(as_researcher, NAMESPACE, JOB), None)
    try:
        with pytest.raises(DashboardRefused, match=r"create pods/portforward is not allowed .*researcher Role"):
            forward.check()
    finally:
        forward.close()
    # WHEN an admin opens the dashboard of the job
    process = subprocess.Popen(
        [sys.executable, "-m", "ray_efa.cli", "dashboard", JOB, *admin, *NS, "--port", "0", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a terminal starts it: a suite run under nohup (SIGINT ignored, inherited) must still send it Ctrl-C
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline()]
        while lines[-1] and lines[-1].rstrip() != "}":
            lines.append(process.stdout.readline())
        printed = json.loads("".join(lines))
        # THEN a request to the local URL reaches the head's 8265 through the API server, with the token
        with urllib.request.urlopen(printed["url"] + "api/jobs/", timeout=30) as response:
            assert response.read().decode() == f"ray dashboard /api/jobs/ auth=Bearer {token}"
        assert (printed["ray_cluster"], printed["head_pod"], printed["token"]) == (cluster, name_of(head), True)
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = process.communicate(timeout=30)
        server.shutdown()
    # AND Ctrl-C ends it with exit 130 and one line
    assert process.returncode == 130, err
    assert err.strip().splitlines()[-1] == f"ray-efa dashboard: stopped forwarding {printed['url']}", err
    assert "Traceback" not in err


def _status(call: Any) -> int:
    try:
        call()
    except ApiException as error:
        return error.status or 0
    return 200


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_cancel_refuses_what_it_may_not_or_cannot_delete(
    deployed: Deployment,
    api: ApiClient,
    researcher: str,
    admin: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    # a name that is not a RayJob: exit 2, naming it, nothing deleted
    assert run_cli("cancel", "no-such-job", "--yes", *admin, *NS) == 2
    assert f"no RayJob {NAMESPACE}/no-such-job" in capsys.readouterr().err
    # no terminal to ask on and no --yes: exit 2
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert run_cli("cancel", JOB, *admin, *NS) == 2
    assert "pass --yes" in capsys.readouterr().err
    # asked, and answered no: exit 1
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    assert run_cli("cancel", JOB, *admin, *NS) == 1
    err = capsys.readouterr().err
    assert f"delete RayJob {NAMESPACE}/{JOB} (Running" in err and "nothing deleted" in err, err
    # a researcher, whom RBAC lets delete a RayJob and the admission policy only one they submitted: the deployment's
    # is refused (once the API server enforces the policy: a dry-run delete says when), exit 1, saying why
    as_researcher = client.CustomObjectsApi(api_client_of(Path(researcher)))
    wait_for(
        lambda: (
            _status(
                lambda: as_researcher.delete_namespaced_custom_object(
                    "ray.io", "v1", NAMESPACE, "rayjobs", JOB, dry_run="All"
                )
            )
            == 422
        ),
        "the researchers' admission policy enforced",
    )
    assert run_cli("cancel", JOB, "--yes", "--kubeconfig", researcher, *NS) == 1
    err = capsys.readouterr().err
    assert "422" in err and SUBMITTED_BY_ANNOTATION in err and "delete only the RayJobs they submitted" in err, err
    assert exists(lambda: _job(api))


def test_cancel_deletes_the_job_and_the_operators_cluster_goes_with_it(
    deployed: Deployment,
    api: ApiClient,
    admin: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    cluster = _job(api)["status"]["rayClusterName"]
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    assert run_cli("cancel", JOB, *admin, *NS, "--json") == 0
    assert json.loads(capsys.readouterr().out)["deleted"] is True
    objects = client.CustomObjectsApi(api)
    wait_for(lambda: not exists(lambda: _job(api)), f"RayJob {JOB} gone")
    wait_for(
        lambda: (
            not exists(lambda: objects.get_namespaced_custom_object("ray.io", "v1", NAMESPACE, "rayclusters", cluster))
        ),
        f"RayCluster {cluster} gone",
        timeout_s=90,
    )
    assert run_cli("jobs", *admin, *NS) == 0
    assert capsys.readouterr().out.strip() == f"no RayJobs in namespace {NAMESPACE}"

"""The Lambda handler of HelmChartCrds (infra/chart_crds.py): server-side apply of a Helm chart's crds/ at deploy time.

Runs with the kubectl provider's layers (aws-cdk-lib aws_eks_v2: /opt/kubectl/kubectl, /opt/helm/helm, and the AWS
CLI at /opt/awscli/aws, as its kubectl handler custom-resource-handlers/dist/aws-eks-v2/kubectl-handler uses them),
its role (cluster-admin through the access entry aws_eks_v2 gives that role) and its VPC placement. Standard library
only: this module is the Lambda asset, nothing else of the project is shipped with it.

Why not Helm: `helm upgrade` never touches a chart's crds/ (Helm installs them on the first install only; KubeRay's
upgrade guide asks for them to be applied by hand before the chart: docs.ray.io, "KubeRay upgrade guide"). Why
server-side apply: the RayCluster and RayJob CRDs are larger than the 262,144 bytes of annotations a client-side
`kubectl apply` needs for its last-applied-configuration (ray-project/kuberay#271). Helm 4.2.3, the layer's, says so
itself: `helm upgrade --help`, --skip-crds: "By default, CRDs are installed if not already present". `--force-conflicts` takes over the fields Helm
wrote at install, which is the point.

Delete leaves the CRDs in place: deleting a CRD deletes every RayCluster and RayJob of the cluster (Helm never deletes
crds/ either), and a deleted cluster takes them along anyway.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from typing import Any

__all__ = ["handler", "apply_chart_crds", "FUNCTION_TIMEOUT_S", "SERVICE_TIMEOUT_S", "COMMAND_TIMEOUT_S"]

WORK_DIR = os.environ.get("TEST_OUTDIR", "/tmp")
FIELD_MANAGER = "ray-efa-chart-crds"
_TOOL_PATHS = "/opt/kubectl:/opt/helm:/opt/awscli"
_ESTABLISHED_TIMEOUT = "120s"
# Every subprocess is bounded, and all of them together end before the function's own timeout with room left to
# answer CloudFormation (whose ResponseURL PUT has its own 60 s timeout in _respond): a hung `helm pull` is a FAILED
# answer within minutes, not the hour CloudFormation waits for a custom resource by default. SERVICE_TIMEOUT_S is the
# custom resource's ServiceTimeout (CloudFormation's, 1-3600 s, default 3600): the backstop should the function die
# before it answers.
FUNCTION_TIMEOUT_S = 600
SERVICE_TIMEOUT_S = 900
COMMAND_TIMEOUT_S = 180
RESPONSE_MARGIN_S = 75

Run = Callable[[list[str]], str]


def _tool_env() -> dict[str, str]:
    """The layers' tools first on PATH; helm's and kubectl's caches in the writable work directory (a Lambda
    function may write only /tmp)."""
    return {
        **os.environ,
        "PATH": f"{_TOOL_PATHS}:{os.environ.get('PATH', '')}",
        "HOME": WORK_DIR,
        "HELM_CACHE_HOME": os.path.join(WORK_DIR, "helm", "cache"),
        "HELM_CONFIG_HOME": os.path.join(WORK_DIR, "helm", "config"),
        "HELM_DATA_HOME": os.path.join(WORK_DIR, "helm", "data"),
    }


def runner(deadline: float) -> Run:
    """A Run that ends each command after COMMAND_TIMEOUT_S and every command by `deadline` (time.monotonic())."""

    def run(command: list[str]) -> str:
        return _run(command, deadline)

    return run


def _run(command: list[str], deadline: float) -> str:
    """Run `command` (retrying transient network errors) until `deadline`; on failure or timeout raise with its
    output (which CloudFormation shows as the failure reason)."""
    print(f"running: {' '.join(command)}", flush=True)
    for attempt in range(3):
        timeout = min(COMMAND_TIMEOUT_S, deadline - time.monotonic())
        if timeout <= 0:
            raise RuntimeError(f"{command[0]} {command[1]} not run: the function's time for commands is spent")
        try:
            result = subprocess.run(command, capture_output=True, text=True, env=_tool_env(), timeout=timeout)
        except subprocess.TimeoutExpired as expired:
            partial = (expired.stdout or b"") + (expired.stderr or b"")
            text = partial.decode(errors="replace") if isinstance(partial, bytes) else str(partial)
            raise RuntimeError(
                f"{command[0]} {command[1]} timed out after {timeout:.0f} s: {text.strip()[-1000:]}"
            ) from None
        output = result.stdout + result.stderr
        print(output, flush=True)
        if result.returncode == 0:
            return output
        transient = "i/o timeout" in output or "connection refused" in output
        if not transient or attempt == 2:
            raise RuntimeError(f"{command[0]} {command[1]} failed: {output.strip()[-1500:]}")
    raise AssertionError("unreachable")


def apply_chart_crds(props: dict[str, Any], run: Run) -> list[str]:
    """Pull chart `Chart` at `Version` from `Repository`, server-side apply every file of its crds/, wait until each
    CRD is Established, and return their file names."""
    cluster, chart, repository, version = props["ClusterName"], props["Chart"], props["Repository"], props["Version"]
    kubeconfig = os.path.join(WORK_DIR, "kubeconfig")
    run(["aws", "eks", "update-kubeconfig", "--name", cluster, "--kubeconfig", kubeconfig])
    if os.path.isfile(kubeconfig):
        os.chmod(kubeconfig, 0o600)
    untar = os.path.join(WORK_DIR, f"chart-{chart}-{version}")
    shutil.rmtree(untar, ignore_errors=True)
    run(["helm", "pull", chart, "--repo", repository, "--version", version, "--untar", "--untardir", untar])
    crds = sorted(glob.glob(os.path.join(untar, chart, "crds", "*.yaml")))
    if not crds:
        raise RuntimeError(f"chart {chart} {version} from {repository} has no crds/*.yaml")
    for path in crds:
        run(
            [
                "kubectl",
                "apply",
                "--server-side",
                "--force-conflicts",
                f"--field-manager={FIELD_MANAGER}",
                "--kubeconfig",
                kubeconfig,
                "-f",
                path,
            ]
        )
    for path in crds:
        run(
            [
                "kubectl",
                "wait",
                "--for=condition=Established",
                f"--timeout={_ESTABLISHED_TIMEOUT}",
                "--kubeconfig",
                kubeconfig,
                "-f",
                path,
            ]
        )
    return [os.path.basename(path) for path in crds]


def _respond(event: dict[str, Any], status: str, reason: str, physical_id: str, data: dict[str, str]) -> None:
    """Answer CloudFormation at the presigned ResponseURL (a Lambda-backed custom resource must, or the stack waits)."""
    body = json.dumps(
        {
            "Status": status,
            "Reason": reason[:3500],
            "PhysicalResourceId": physical_id,
            "StackId": event["StackId"],
            "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"],
            "Data": data,
        }
    ).encode()
    request = urllib.request.Request(
        event["ResponseURL"], data=body, method="PUT", headers={"Content-Type": "", "Content-Length": str(len(body))}
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - CloudFormation's https URL
        print(f"CloudFormation response: {response.status}", flush=True)


def _command_deadline(context: Any) -> float:
    """When the commands must be done: the function's remaining time (its context's, else FUNCTION_TIMEOUT_S) less the
    margin for answering CloudFormation."""
    remaining_ms = context.get_remaining_time_in_millis() if context is not None else FUNCTION_TIMEOUT_S * 1000
    return time.monotonic() + remaining_ms / 1000 - RESPONSE_MARGIN_S


def handler(event: dict[str, Any], context: Any = None, run: Run | None = None) -> None:
    run = run or runner(_command_deadline(context))
    print(json.dumps({key: value for key, value in event.items() if key != "ResponseURL"}), flush=True)
    props = event.get("ResourceProperties", {})
    # One physical id per cluster and chart: a version change is an update, never a replacement (whose clean-up
    # Delete would come after the new CRDs are in place).
    physical_id = event.get("PhysicalResourceId") or f"{props.get('ClusterName')}/{props.get('Chart')}-crds"
    status, reason, data = "SUCCESS", "", {}
    try:
        if event["RequestType"] in ("Create", "Update"):
            data = {"Crds": ",".join(apply_chart_crds(props, run)), "Version": props["Version"]}
            reason = f"applied {data['Crds']} of {props['Chart']} {props['Version']}"
        else:
            reason = "CRDs left in place (deleting them would delete every custom resource of their kinds)"
    except Exception as error:  # noqa: BLE001 - every failure must reach CloudFormation, or the stack hangs an hour
        status, reason = "FAILED", str(error)
    _respond(event, status, reason, physical_id, data)

"""The manifests against both KubeRay schemas, on the real API server: the operator's own (v1.5.0, the CRDs of its Go
module, which the control plane serves in a clone alone) and the deployed chart's (1.7.0, from ../shared; in a clone
alone its stand-in, the operator's own with the 1.7.0 fields the manifests use as recorded: tests/k8s/schemas.py).

The stack deploys kuberay-operator 1.7.0 by default; the Go module proxy serves ray-operator v1.4.0 and v1.5.0 only,
so the operator binary of the control plane is v1.5.0 (docs/testing.md, "The control plane"). The difference is
stated here as a test: a server-side dry run with fieldValidation=Strict (what `ray-efa submit` and kubectl send)
of each Ray object the default synth makes, first against the operator's CRDs, then against the deployed version's. The 1.5.0 schema refuses exactly the fields that came after it (authOptions: token
auth, 1.5.1; preRunningDeadlineSeconds, 1.7.0) and nothing else; 1.7.0's accepts everything; the kuberayVersion 1.4.0
synth (no authOptions, no deadline) is accepted by the operator's own schema.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import (
    DEPLOYED_KUBERAY,
    SharedPlane,
    ensure_built,
    module_plane,
    served_crds,
    served_kuberay,
    wait_for,
)
from tests.cluster.controlplane import ControlPlane
from tests.k8s.conftest import BASE, synthesize
from tests.k8s.schemas import crd_folder
from tools.controlplane import build

NEWER_THAN_THE_OPERATOR = {"spec.authOptions", "spec.rayClusterSpec.authOptions", "spec.preRunningDeadlineSeconds"}
"""The fields of the default synth that the operator's own CRDs (v1.5.0) do not declare."""
PLURAL = {"RayCluster": "rayclusters", "RayJob": "rayjobs"}


@pytest.fixture(scope="module")
def control_plane(shared_plane: SharedPlane) -> Iterator[ControlPlane]:
    """The process's shared plane without the operator (only the API server's schema is asked here), serving its own
    CRDs again after the module: the tests swap them, and a CRD updated in place is not something the plane's reset
    deletes. The next module meets the schema it would on a fresh plane (waited for, as the tests wait)."""
    with module_plane(shared_plane, operator=False) as plane:
        try:
            yield plane
        finally:
            _serve(plane, served_crds())
            refused_by_the_served = set() if served_kuberay() == DEPLOYED_KUBERAY else NEWER_THAN_THE_OPERATOR
            _answer(plane.api_client(), _ray_objects(), refused_by_the_served)


def _serve(plane: ControlPlane, crds: list[Path]) -> None:
    """Serve `crds`, replacing whichever RayCluster and RayJob CRDs the plane has (the API server's handler takes the
    new schema a moment later: the tests ask until its answer is the one they expect, or time out)."""
    plane.apply_files(crds)


def _refused_fields(api: ApiClient, objects: list[dict[str, Any]]) -> dict[str, set[str]]:
    """name -> the fields the API server refuses in a strict server-side dry run of each Ray object (empty: taken)."""
    custom = client.CustomObjectsApi(api)
    refused = {}
    for obj in objects:
        if obj["kind"] not in PLURAL:
            continue
        name = f"{obj['kind']} {obj['metadata']['name']}"
        try:
            custom.create_namespaced_custom_object(
                "ray.io",
                "v1",
                "default",
                PLURAL[obj["kind"]],
                {**obj, "metadata": {**obj["metadata"], "namespace": "default"}},
                dry_run="All",
                field_validation="Strict",
            )
            refused[name] = set()
        except ApiException as error:
            assert error.status == 400, error.body
            refused[name] = set(re.findall(r'unknown field \\?"([^"\\]+)\\?"', error.body or ""))
            assert refused[name], error.body
    return refused


def _ray_objects(**context: Any) -> list[dict[str, Any]]:
    return [o for o in synthesize(BASE.replace(**context)).objects() if o["kind"] in PLURAL]


def _answer(api: ApiClient, objects: list[dict[str, Any]], expected: set[str]) -> dict[str, set[str]]:
    """The refused fields once the union of them is `expected` and two answers in a row agree (the schema just served
    has taken over for every object: while it takes over, one object can still be judged by the old schema in the same
    round), within 30 s; else the test fails with the last answer."""
    last: list[dict[str, set[str]]] = []

    def settled() -> dict[str, set[str]] | None:
        refused = _refused_fields(api, objects)
        agreed = last[-1:] == [refused]
        last.append(refused)
        return refused if agreed and set().union(*refused.values()) == expected else None

    return wait_for(settled, f"the served schema refusing exactly {sorted(expected)}", timeout_s=30)


def test_the_operators_own_schema_lacks_exactly_the_fields_after_it(control_plane: ControlPlane, api: ApiClient):
    ensure_built()
    _serve(control_plane, [p for p in build.operator_crds() if p.name != "ray.io_rayservices.yaml"])
    assert build.operator_version() == "v1.5.0"
    # the default synth (kuberayVersion 1.7.0): its RayCluster and both RayJobs, each refused for the newer fields
    refused = _answer(api, _ray_objects(), NEWER_THAN_THE_OPERATOR)
    assert all(refused.values()) and len(refused) == 3, refused
    # and the kuberayVersion 1.4.0 synth, which uses none of them, is taken whole
    assert _refused_fields(api, _ray_objects(kuberayVersion="1.4.0")) == {
        "RayCluster ray-efa": set(),
        "RayJob train-efa": set(),
        "RayJob train-tcp": set(),
    }


def test_the_deployed_versions_schema_takes_the_manifests_whole(control_plane: ControlPlane, api: ApiClient):
    crds = crd_folder(DEPLOYED_KUBERAY)  # (in a clone alone: the operator's own with the recorded 1.7.0 fields)
    _serve(control_plane, sorted(crds.glob("ray.io_*.yaml")))
    refused = _answer(api, _ray_objects(), set())
    assert refused == {"RayCluster ray-efa": set(), "RayJob train-efa": set(), "RayJob train-tcp": set()}

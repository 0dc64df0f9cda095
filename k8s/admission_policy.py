"""What the API server admits into the workload namespace, as ValidatingAdmissionPolicies (plain data, no cdk8s).

RBAC says which verbs a user has on which kinds; it cannot say what a RayJob's pod templates may ask for, and the
KubeRay operator creates whatever pods they describe with its own rights. So creating a RayJob would be creating any
pod. Two policies close that (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30, no add-on or webhook:
https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/):

- `ray-efa-workload-<namespace>`: RayJobs, RayClusters, Pods and Services in the namespace, from every requester (the
  researchers, the admins, the KubeRay operator that turns a RayJob into a RayCluster and pods, the Job controller
  that makes the submitter pod), admitted only as the stack's own manifests have them: the Ray service account (or
  the namespace's default, the submitter's), no privileged container, no host namespace, no capability but IPC_LOCK,
  no privilege escalation, no service-account token mounted, hostPath only the read-only host sysfs folders of the
  EFA counters, no Secret volume, no env from a Secret but the token KubeRay injects (RAY_AUTH_TOKEN, key
  auth_token), a ClusterIP head service, no in-tree autoscaler (its own service account and RBAC), no clusterSelector
  (a job in another's RayCluster gets that cluster's token). An update that leaves `spec` as it was (the operator's
  status, finalizers and labels) is not checked again.
- `ray-efa-researchers-<namespace>`: what the researchers' group creates, changes or deletes among ConfigMaps,
  NetworkPolicies and RayJobs: a ConfigMap they create is immutable and every object they create names them in the
  annotation SUBMITTED_BY_ANNOTATION (their Kubernetes user name, which `ray-efa submit` reads with a
  SelfSubjectReview); they change only objects annotated with their own name, and only the metadata (`ray-efa submit`
  adds the RayJob as owner), and delete only RayJobs annotated so (`ray-efa cancel`; RBAC grants no other delete).
  An object of the deployment, or of another researcher, can be neither patched nor deleted by them.

Each validation's message names the field it refuses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ray_efa.core.pod_env import HOST_SYS_FOLDERS

__all__ = [
    "SUBMITTED_BY_ANNOTATION",
    "TOKEN_ENV",
    "TOKEN_SECRET_KEY",
    "workload_policy_name",
    "researcher_policy_name",
    "workload_admission",
    "researcher_admission",
]

SUBMITTED_BY_ANNOTATION = "ray-efa.io/submitted-by"
"""The Kubernetes user who created a ConfigMap, NetworkPolicy or RayJob with `ray-efa submit`."""
TOKEN_ENV, TOKEN_SECRET_KEY = "RAY_AUTH_TOKEN", "auth_token"
"""The env KubeRay (token auth) sets from the cluster's Secret in the pods it creates (common/pod.go
SetContainerTokenAuthEnvVars): the one env from a Secret a Pod may have; a RayJob or RayCluster may name none."""

_API = "admissionregistration.k8s.io/v1"
_LABELS = {"app.kubernetes.io/part-of": "ray-efa-stack", "app.kubernetes.io/component": "admission-policy"}


def workload_policy_name(namespace: str) -> str:
    return f"ray-efa-workload-{namespace}"


def researcher_policy_name(namespace: str) -> str:
    return f"ray-efa-researchers-{namespace}"


def _cel(value: Any) -> str:
    """A CEL literal of a string or a list of strings (JSON's quoting is CEL's for these)."""
    return json.dumps(value)


_KIND = "request.kind.kind"
_CLUSTER_SPECS = (
    f"{_KIND} == 'RayCluster' ? [object.spec] : "
    f"({_KIND} == 'RayJob' && has(object.spec.rayClusterSpec) ? [object.spec.rayClusterSpec] : [])"
)
_POD_SPECS = (
    f"({_KIND} == 'Pod' ? [object.spec] : []) + "
    "(variables.clusterSpecs.size() == 0 ? [] : [variables.clusterSpecs[0].headGroupSpec.template.spec] + "
    "variables.clusterSpecs[0].?workerGroupSpecs.orValue([]).map(g, g.template.spec)) + "
    f"({_KIND} == 'RayJob' && has(object.spec.submitterPodTemplate) ? [object.spec.submitterPodTemplate.spec] : [])"
)
_CONTAINERS = "s.containers + s.?initContainers.orValue([]) + s.?ephemeralContainers.orValue([])"


def _every_pod(check: str) -> str:
    return f"variables.podSpecs.all(s, {check})"


def _every_container(check: str) -> str:
    return _every_pod(f"({_CONTAINERS}).all(c, {check})")


def _pod_validations(service_accounts: Sequence[str]) -> list[dict[str, str]]:
    """(expression, message) of every check on the pod specs of a RayJob, a RayCluster or a Pod."""
    host_paths = [f"/sys/{folder}" for folder in HOST_SYS_FOLDERS]
    volume_kinds = ["emptyDir", "configMap", "projected", "persistentVolumeClaim", "downwardAPI", "hostPath"]
    has_one_kind = " || ".join(f"has(v.{kind})" for kind in volume_kinds)
    projection = (
        "has(p.configMap) || has(p.downwardAPI) || "
        # EKS Pod Identity's webhook projects the pod's own service-account token for its agent.
        "(has(p.serviceAccountToken) && p.serviceAccountToken.?audience.orValue('') == "
        "'pods.eks.amazonaws.com')"
    )
    secret_env = (
        f"!has(e.valueFrom) || !has(e.valueFrom.secretKeyRef) || ({_KIND} == 'Pod' && "
        f"e.name == {_cel(TOKEN_ENV)} && e.valueFrom.secretKeyRef.key == {_cel(TOKEN_SECRET_KEY)})"
    )
    read_only_host_mounts = _every_pod(
        f"({_CONTAINERS}).all(c, c.?volumeMounts.orValue([]).all(m, "
        "!(m.name in s.?volumes.orValue([]).filter(v, has(v.hostPath)).map(v, v.name)) || "
        "m.?readOnly.orValue(false)))"
    )
    checks = [
        (
            _every_pod(
                f"s.?serviceAccountName.orValue('default') in {_cel([*service_accounts, 'default'])} && "
                f"s.?serviceAccount.orValue('default') in {_cel([*service_accounts, 'default'])}"
            ),
            f"spec.serviceAccountName: a Ray pod runs as {' or '.join(service_accounts)} (or the namespace's default)",
        ),
        (
            _every_pod("s.?automountServiceAccountToken.orValue(true) == false"),
            "spec.automountServiceAccountToken must be false: no Ray pod calls the Kubernetes API",
        ),
        (
            _every_pod("!s.?hostNetwork.orValue(false) && !s.?hostPID.orValue(false) && !s.?hostIPC.orValue(false)"),
            "spec.hostNetwork, spec.hostPID and spec.hostIPC must be unset or false: a Ray pod shares no host namespace",
        ),
        (
            _every_pod("s.?volumes.orValue([]).all(v, !has(v.secret))"),
            "spec.volumes[].secret: a Ray pod mounts no Secret",
        ),
        (
            _every_pod(f"s.?volumes.orValue([]).all(v, {has_one_kind})"),
            f"spec.volumes[]: a Ray pod's volumes are {', '.join(volume_kinds)} only",
        ),
        (
            _every_pod(
                "s.?volumes.orValue([]).all(v, !has(v.projected) || "
                f"v.projected.?sources.orValue([]).all(p, {projection}))"
            ),
            "spec.volumes[].projected.sources[]: configMap and downwardAPI only (and EKS Pod Identity's token)",
        ),
        (
            _every_pod(f"s.?volumes.orValue([]).all(v, !has(v.hostPath) || v.hostPath.path in {_cel(host_paths)})"),
            f"spec.volumes[].hostPath.path: only {' and '.join(host_paths)} (the EFA counters), read-only",
        ),
        (read_only_host_mounts, "containers[].volumeMounts[].readOnly must be true for a hostPath volume"),
        (
            _every_container("!c.?securityContext.?privileged.orValue(false)"),
            "containers[].securityContext.privileged must be unset or false",
        ),
        (
            _every_container("c.?securityContext.?allowPrivilegeEscalation.orValue(true) == false"),
            "containers[].securityContext.allowPrivilegeEscalation must be false",
        ),
        (
            _every_container("c.?securityContext.?capabilities.?add.orValue([]).all(a, a == 'IPC_LOCK')"),
            "containers[].securityContext.capabilities.add: IPC_LOCK only (libfabric pins EFA buffers)",
        ),
        (
            _every_container(f"c.?env.orValue([]).all(e, {secret_env})"),
            f"containers[].env[].valueFrom.secretKeyRef: no env from a Secret (KubeRay injects {TOKEN_ENV} itself)",
        ),
        (
            _every_container("c.?envFrom.orValue([]).all(f, !has(f.secretRef))"),
            "containers[].envFrom[].secretRef: no env from a Secret",
        ),
    ]
    return [{"expression": expression, "message": message} for expression, message in checks]


def _cluster_validations() -> list[dict[str, str]]:
    """The checks on a RayCluster's spec (or a RayJob's rayClusterSpec), a RayJob's spec and a Service."""
    clusters = "variables.clusterSpecs.all(r, {})".format
    checks = [
        (
            clusters("r.headGroupSpec.?serviceType.orValue('ClusterIP') == 'ClusterIP'"),
            "headGroupSpec.serviceType must be ClusterIP (or unset): the Ray head is not exposed outside the cluster",
        ),
        (
            clusters("!has(r.headGroupSpec.headService)"),
            "headGroupSpec.headService: the head's Service is KubeRay's own (ClusterIP)",
        ),
        (
            clusters("!r.?enableInTreeAutoscaling.orValue(false) && !has(r.autoscalerOptions)"),
            "enableInTreeAutoscaling/autoscalerOptions: the stack's Ray clusters are fixed-size (the autoscaler gets a "
            "service account of its own, with rights on pods)",
        ),
        (
            clusters("!has(r.authOptions) || r.authOptions.all(k, k == 'mode')"),
            "authOptions: mode only (KubeRay generates the cluster's own token Secret)",
        ),
        (
            f"{_KIND} != 'RayJob' || !has(object.spec.clusterSelector)",
            "spec.clusterSelector: a RayJob brings its own RayCluster (in another's, it would run with that cluster's "
            "token)",
        ),
        (
            f"{_KIND} != 'Service' || (object.spec.?type.orValue('ClusterIP') == 'ClusterIP' && "
            "!has(object.spec.externalIPs))",
            "spec.type must be ClusterIP and spec.externalIPs unset: nothing in the namespace is exposed outside the "
            "cluster",
        ),
    ]
    return [{"expression": expression, "message": message} for expression, message in checks]


def _researcher_validations(username: str = "request.userInfo.username") -> list[dict[str, str]]:
    annotation = f"metadata.?annotations[?{_cel(SUBMITTED_BY_ANNOTATION)}]"
    # A DELETE has no `object`, only `oldObject` (the object as stored); a CREATE has no `oldObject`.
    checks = [
        (
            f"request.operation == 'DELETE' || object.{annotation}.orValue('') == {username}",
            f"metadata.annotations[{SUBMITTED_BY_ANNOTATION}] must be your Kubernetes user name (`ray-efa submit` sets "
            "it): a researcher creates and changes only objects of their own",
        ),
        (
            f"request.operation == 'CREATE' || oldObject.{annotation}.orValue('') == {username}",
            f"metadata.annotations[{SUBMITTED_BY_ANNOTATION}]: this object is not yours; a researcher changes only the "
            "ConfigMaps and NetworkPolicies they submitted, and deletes only their own RayJobs",
        ),
        (
            "request.operation == 'DELETE' || request.kind.kind != 'ConfigMap' || object.?immutable.orValue(false)",
            "immutable must be true: a job's ConfigMaps never change once submitted",
        ),
        (
            "request.operation != 'UPDATE' || ['data', 'binaryData', 'spec'].all(f, "
            "object[?f].orValue({}) == oldObject[?f].orValue({})) && "
            "object.metadata.?labels.orValue({}) == oldObject.metadata.?labels.orValue({})",
            "data, binaryData, spec and metadata.labels: a researcher's update changes only the owner references",
        ),
    ]
    return [{"expression": expression, "message": message} for expression, message in checks]


def _binding(policy: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": _API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy, "labels": dict(_LABELS)},
        "spec": {
            "policyName": policy,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
        },
    }


def _rules(*rules: tuple[str, str, Sequence[str]]) -> list[dict[str, Any]]:
    return [
        {"apiGroups": [group], "apiVersions": ["*"], "resources": [resource], "operations": list(operations)}
        for group, resource, operations in rules
    ]


def workload_admission(namespace: str, *, service_account: str) -> list[dict[str, Any]]:
    """The workload policy of `namespace` and its binding (cluster-scoped, named after the namespace, so that two
    workload namespaces have two of each). `service_account`: the Ray pods' (serviceAccount)."""
    name = workload_policy_name(namespace)
    write = ("CREATE", "UPDATE")
    policy = {
        "apiVersion": _API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(_LABELS)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": _rules(
                    ("ray.io", "rayjobs", write),
                    ("ray.io", "rayclusters", write),
                    ("", "pods", ("CREATE",)),
                    ("", "services", write),
                )
            },
            # The operator's own updates (status, finalizers, labels) of an object it did not change the spec of.
            "matchConditions": [
                {"name": "spec-written", "expression": "request.operation == 'CREATE' || object.spec != oldObject.spec"}
            ],
            "variables": [
                {"name": "clusterSpecs", "expression": _CLUSTER_SPECS},
                {"name": "podSpecs", "expression": _POD_SPECS},
            ],
            "validations": [*_pod_validations((service_account,)), *_cluster_validations()],
        },
    }
    return [policy, _binding(name, namespace)]


def researcher_admission(namespace: str, *, group: str) -> list[dict[str, Any]]:
    """The researchers' policy of `namespace` (the ConfigMaps, NetworkPolicies and RayJobs the Kubernetes group `group`
    writes or deletes) and its binding."""
    name = researcher_policy_name(namespace)
    write = ("CREATE", "UPDATE")
    policy = {
        "apiVersion": _API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(_LABELS)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": _rules(
                    ("", "configmaps", write),
                    ("networking.k8s.io", "networkpolicies", write),
                    # RBAC lets them create and delete RayJobs (update and patch: no verb); they delete only their own.
                    ("ray.io", "rayjobs", ("CREATE", "DELETE")),
                )
            },
            "matchConditions": [{"name": "researcher", "expression": f"{_cel(group)} in request.userInfo.groups"}],
            "validations": _researcher_validations(),
        },
    }
    return [policy, _binding(name, namespace)]

"""The KubeRay workload wired into the stacks: order, the training job, checkpoint storage, payloads, readable diffs."""

from __future__ import annotations

import json

import cdk8s

from ray_efa.infra.manifests import CUSTOM_RESOURCE_PAYLOAD_BYTES
from ray_efa.k8s.code_bundle import collect_code
from ray_efa.k8s.workload import build_manifests, ray_job_chart
from tests.infra.conftest import synthesize

KUBERNETES_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"
PRUNE_LABEL_PREFIX = "aws.cdk.eks/prune-"


def _piece(piece) -> str:
    if isinstance(piece, str):
        return piece
    if "Ref" in piece:
        return f"<Ref:{piece['Ref']}>"
    if "Fn::ImportValue" in piece:
        return f"<Import:{piece['Fn::ImportValue']}>"
    if "Fn::GetAtt" in piece:
        return f"<GetAtt:{'.'.join(piece['Fn::GetAtt'])}>"
    if "Fn::Sub" in piece:  # the bootstrap bucket of a file asset: s3://cdk-...-${AWS::AccountId}-<region>/<hash>.zip
        return piece["Fn::Sub"]
    raise AssertionError(f"unexpected piece {piece}")


def manifest_objects(resource: dict) -> list[dict]:
    """The Kubernetes objects of a KubernetesManifest; CloudFormation references become "<Ref:...>"/"<Import:...>"."""
    manifest = resource["Properties"]["Manifest"]
    if isinstance(manifest, dict):  # Fn::Join of literal pieces and references
        manifest = "".join(_piece(p) for p in manifest["Fn::Join"][1])
    return json.loads(manifest)


def manifests(template) -> dict[str, dict]:
    """Logical id -> resource, of every Kubernetes manifest of a stack's template."""
    return template.find_resources(KUBERNETES_RESOURCE)


def job_manifests(template) -> dict[str, dict]:
    """manifests(), less the job guard's own RBAC (the guard stays with or without a job: `submit` runs them too)."""
    return {
        logical_id: resource
        for logical_id, resource in manifests(template).items()
        if not any(
            o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "job-guard"
            for o in manifest_objects(resource)
        )
    }


def find(template, kind: str, name: str | None = None) -> tuple[str, dict, dict]:
    for logical_id, resource in manifests(template).items():
        for obj in manifest_objects(resource):
            if obj["kind"] == kind and name in (None, obj["metadata"]["name"]):
                return logical_id, resource, obj
    raise AssertionError(f"no {kind} {name or ''} among the stack's manifests")


def helm_chart_ids(synth) -> dict[str, str]:
    charts = synth.cluster.find_resources("Custom::AWSCDK-EKS-HelmChart")
    return {c["Properties"]["Chart"]: logical_id for logical_id, c in charts.items()}


def test_namespace_waits_for_the_kuberay_crds_and_both_device_plugins(default_synth):
    logical_id, resource, namespace = find(default_synth.cluster, "Namespace")
    assert namespace["metadata"]["name"] == "ray"
    assert set(helm_chart_ids(default_synth).values()) <= set(resource["DependsOn"])


def test_kuberay_operator_waits_for_the_system_node_group(default_synth):
    # GIVEN the operator's Helm release, which waits for its Deployment, which only system nodes can run
    operator = default_synth.cluster.find_resources("Custom::AWSCDK-EKS-HelmChart")[
        helm_chart_ids(default_synth)["kuberay-operator"]
    ]
    (system_nodegroup,) = [
        i
        for i, r in default_synth.cluster.find_resources("AWS::EKS::Nodegroup").items()
        if r["Properties"]["NodegroupName"] == "ray-train-system-m7i-xlarge"
    ]
    # THEN CloudFormation creates it only after the system node group
    assert system_nodegroup in operator["DependsOn"]


def test_training_job_is_applied_from_the_gpu_stack_after_the_gpu_node_group(default_synth):
    # GIVEN the GPU stack's manifests: the settings ConfigMap and the RayJob, one resource each; the code ConfigMaps
    # (one per package) are not there: the project's code is an S3 asset the pods fetch
    names = [name for name, _ in collect_code(default_synth.settings).config_maps("train-efa-code")]  # code, settings
    assert names[0] == "train-efa-code" and "train-efa-code-training" in names and names[-1] == "train-efa-settings"
    shipped = {
        o["metadata"]["name"]
        for r in manifests(default_synth.gpu).values()
        for o in manifest_objects(r)
        if o["kind"] == "ConfigMap"
    }
    assert shipped == {"train-efa-settings"}
    names = ["train-efa-settings"]
    config_maps = [find(default_synth.gpu, "ConfigMap", name)[:2] for name in names]
    job_id, job_resource, job = find(default_synth.gpu, "RayJob")
    assert [len(manifest_objects(r)) for _, r in config_maps] + [len(manifest_objects(job_resource))] == [1] * (
        len(names) + 1
    )
    # THEN they are applied in that order, the first after the GPU node group: the job's activeDeadlineSeconds starts
    # when GPU nodes exist, not while the cluster stack is still being built
    (nodegroup_id,) = default_synth.gpu.find_resources("AWS::EKS::Nodegroup")
    assert nodegroup_id in config_maps[0][1]["DependsOn"]
    for (before_id, _), (_, after) in zip(config_maps, config_maps[1:]):
        assert before_id in after["DependsOn"]
    assert config_maps[-1][0] in job_resource["DependsOn"]
    assert job["metadata"]["name"] == "train-efa" and job["metadata"]["namespace"] == "ray"
    # ...and no job in the cluster stack, which the GPU stack deploys after (namespace, service account, bucket; the
    # system nodes' job guard's ClusterRole and binding)
    kinds = {o["kind"] for r in manifests(default_synth.cluster).values() for o in manifest_objects(r)}
    assert kinds == {
        "Namespace",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "NetworkPolicy",
        "ClusterRole",
        "ClusterRoleBinding",
    }
    gpu_stack = default_synth.assembly.get_stack_by_name("ray-train-gpu")
    assert "ray-train-cluster" in [d.id for d in gpu_stack.dependencies]


def test_training_job_checkpoints_into_the_cluster_stacks_bucket(default_synth):
    (bucket_id,) = default_synth.cluster.find_resources("AWS::S3::Bucket")
    _, _, config_map = find(default_synth.gpu, "ConfigMap", "train-efa-settings")
    storage_path = json.loads(config_map["data"]["settings.json"])["storagePath"]
    # the bucket's name comes from the cluster stack through an export
    assert storage_path.startswith("s3://<Import:ray-train-cluster:") and storage_path.endswith(">/ray-efa")
    assert bucket_id in storage_path
    outputs = default_synth.cluster.to_json()["Outputs"]
    assert outputs["CheckpointStoragePath"]["Value"] == {"Fn::Join": ["", ["s3://", {"Ref": bucket_id}, "/ray-efa"]]}


def test_ray_pods_run_as_the_service_account_that_may_use_the_bucket(default_synth):
    _, _, job = find(default_synth.gpu, "RayJob")
    spec = job["spec"]["rayClusterSpec"]
    accounts = {spec["headGroupSpec"]["template"]["spec"]["serviceAccountName"]}
    accounts |= {g["template"]["spec"]["serviceAccountName"] for g in spec["workerGroupSpecs"]}
    assert accounts == {"ray-train"}
    default_synth.cluster.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation", {"Namespace": "ray", "ServiceAccount": "ray-train"}
    )
    (bucket_id,) = default_synth.cluster.find_resources("AWS::S3::Bucket")
    policies = default_synth.cluster.find_resources("AWS::IAM::Policy")
    granted = [p for p in policies.values() if bucket_id in json.dumps(p["Properties"]["PolicyDocument"])]
    assert granted and any("s3:PutObject" in json.dumps(p) for p in granted)


def test_checkpoint_bucket_is_private_encrypted_ssl_only_and_retained(default_synth):
    ((bucket_id, bucket),) = default_synth.cluster.find_resources("AWS::S3::Bucket").items()
    props = bucket["Properties"]
    assert (
        props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"][
            "SSEAlgorithm"
        ]
        == "AES256"
    )
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert bucket["DeletionPolicy"] == "Retain"
    policy = next(iter(default_synth.cluster.find_resources("AWS::S3::BucketPolicy").values()))
    assert '"aws:SecureTransport": "false"' in json.dumps(policy["Properties"]["PolicyDocument"])


def test_own_storage_path_needs_no_bucket():
    synth = synthesize(storagePath="s3://my-team-checkpoints/ray")
    synth.cluster.resource_count_is("AWS::S3::Bucket", 0)
    _, _, config_map = find(synth.gpu, "ConfigMap", "train-efa-settings")
    assert json.loads(config_map["data"]["settings.json"])["storagePath"] == "s3://my-team-checkpoints/ray"
    synth.cluster.resource_count_is("AWS::EKS::PodIdentityAssociation", 1)  # the pods still get their account


def test_training_job_can_be_left_out():
    synth = synthesize(trainingJob="false")
    # THEN only the job's settings stay (what `ray-efa submit` reads), and the guard's RBAC
    assert [o["kind"] for r in job_manifests(synth.gpu).values() for o in manifest_objects(r)] == ["ConfigMap"]
    find(synth.gpu, "ConfigMap", "train-efa-settings")
    assert job_manifests(synth.gpu) != manifests(synth.gpu)  # the guard's RBAC stays
    assert "TrainingJobWatchCommand" not in synth.gpu.to_json()["Outputs"]
    find(synth.cluster, "Namespace")


def test_tcp_network_deploys_the_tcp_job():
    _, _, job = find(synthesize(network="tcp").gpu, "RayJob")
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert job["metadata"]["name"] == "train-tcp"
    assert (env["NCCL_NET"], env["FI_PROVIDER"], env["NCCL_NET_PLUGIN"]) == ("Socket", "tcp", "none")


def test_a_training_setting_changes_the_settings_config_map_alone(default_synth):
    # GIVEN the defaults and the same with more steps
    changed = synthesize(steps=40)
    before, after = default_synth.gpu.to_json()["Resources"], changed.gpu.to_json()["Resources"]
    # WHEN the GPU stacks' resources are compared
    differing = {i for i in before.keys() | after.keys() if before.get(i) != after.get(i)}
    # THEN the settings ConfigMap is the one resource that changes, and its manifest is a few KB, not the code's 200
    settings_id, settings, _ = find(changed.gpu, "ConfigMap", "train-efa-settings")
    assert differing == {settings_id}
    assert len(json.dumps(settings["Properties"]["Manifest"])) < 8_000
    assert changed.cluster.to_json() == default_synth.cluster.to_json()


def test_every_manifest_update_fits_the_custom_resource_payload_limit(synthesized):
    # GIVEN every Kubernetes manifest of both stacks, as CloudFormation will send it
    for template in (synthesized.cluster, synthesized.gpu):
        for logical_id, resource in manifests(template).items():
            properties = json.dumps(resource["Properties"])
            # THEN an update's old and new properties together stay under the asynchronous Lambda payload limit
            assert 2 * len(properties.encode()) + 4096 <= CUSTOM_RESOURCE_PAYLOAD_BYTES, (logical_id, len(properties))


def test_the_rerun_path_applies_the_job_the_stack_applied(default_synth):
    # GIVEN the GPU stack's job objects, and what `ray-efa manifests` writes for the same settings and storagePath
    deployed = {}
    for resource in job_manifests(default_synth.gpu).values():
        (obj,) = manifest_objects(resource)
        obj["metadata"]["labels"] = {
            k: v for k, v in obj["metadata"]["labels"].items() if not k.startswith(PRUNE_LABEL_PREFIX)
        }
        deployed[(obj["kind"], obj["metadata"]["name"])] = obj
    # (the stack's PodDisruptionBudget of the job's pods is the stack's own: k8s.disruption_budget)
    assert deployed.pop(("PodDisruptionBudget", "train-efa-ray-pods"))["spec"]["maxUnavailable"] == 0
    storage_path = json.loads(deployed[("ConfigMap", "train-efa-settings")]["data"]["settings.json"])["storagePath"]
    settings = default_synth.settings.replace(storagePath=storage_path)
    written = {
        (o["kind"], o["metadata"]["name"]): o
        for chart in build_manifests(cdk8s.App(), settings)
        if chart.node.id == "rayjob-efa"
        for o in chart.to_json()
    }
    # THEN they are the same job: `kubectl delete rayjob train-efa` then `kubectl apply` of dist/'s
    # 0002-rayjob-efa.yaml (made with -c storagePath=<the stack's CheckpointStoragePath>) runs it again, with the same
    # settings and policy; its code comes from ConfigMaps instead of the stack's S3 asset (the same files)
    for key in (("ConfigMap", "train-efa-settings"), ("NetworkPolicy", "train-efa-ray-ingress")):
        assert written[key] == deployed[key], key
    assert {k for k in written if k[0] == "ConfigMap"} - {k for k in deployed if k[0] == "ConfigMap"} == {
        ("ConfigMap", name) for name, _ in collect_code(settings).config_maps("train-efa-code")[:-1]
    }
    # ...and with the asset's URI the rerun objects are exactly the deployed ones
    head = deployed[("RayJob", "train-efa")]["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    (fetch,) = [c for c in head["initContainers"] if c["name"] == "fetch-app"]
    uri = fetch["command"][-2]
    same = {
        (o["kind"], o["metadata"]["name"]): o
        for o in ray_job_chart(cdk8s.App(), settings, app_archive_uri=uri).to_json()
    }
    assert same == deployed

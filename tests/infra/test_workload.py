"""The KubeRay workload wired into the cluster stack: order, the training job, checkpoint storage and its access."""

from __future__ import annotations

import json

from tests.infra.conftest import synthesize

KUBERNETES_RESOURCE = "Custom::AWSCDK-EKS-KubernetesResource"


def manifest_objects(resource: dict) -> list[dict]:
    """The Kubernetes objects of a KubernetesManifest; CloudFormation references become "<Ref:LogicalId>"."""
    manifest = resource["Properties"]["Manifest"]
    if isinstance(manifest, dict):  # Fn::Join of literal pieces and references
        manifest = "".join(p if isinstance(p, str) else f"<Ref:{p.get('Ref') or p}>" for p in manifest["Fn::Join"][1])
    return json.loads(manifest)


def manifests(synth) -> dict[str, dict]:
    """Logical id -> resource, of every Kubernetes manifest in the cluster stack."""
    return synth.cluster.find_resources(KUBERNETES_RESOURCE)


def find_kind(synth, kind: str) -> tuple[str, dict, dict]:
    for logical_id, resource in manifests(synth).items():
        for obj in manifest_objects(resource):
            if obj["kind"] == kind:
                return logical_id, resource, obj
    raise AssertionError(f"no {kind} among the cluster stack's manifests")


def helm_chart_ids(synth) -> dict[str, str]:
    charts = synth.cluster.find_resources("Custom::AWSCDK-EKS-HelmChart")
    return {c["Properties"]["Chart"]: logical_id for logical_id, c in charts.items()}


def test_namespace_waits_for_the_kuberay_crds_and_both_device_plugins(default_synth):
    logical_id, resource, namespace = find_kind(default_synth, "Namespace")
    assert namespace["metadata"]["name"] == "ray"
    assert set(helm_chart_ids(default_synth).values()) <= set(resource["DependsOn"])


def test_training_job_follows_the_namespace_and_its_service_account(default_synth):
    namespace_id, _, _ = find_kind(default_synth, "Namespace")
    _, job_resource, job = find_kind(default_synth, "RayJob")
    depends = set(job_resource["DependsOn"])
    assert namespace_id in depends
    association = next(iter(default_synth.cluster.find_resources("AWS::EKS::PodIdentityAssociation")))
    assert association in depends
    assert job["metadata"]["name"] == "train-efa" and job["metadata"]["namespace"] == "ray"


def test_training_job_checkpoints_into_the_stack_bucket(default_synth):
    (bucket_id,) = default_synth.cluster.find_resources("AWS::S3::Bucket")
    _, _, config_map = find_kind(default_synth, "ConfigMap")
    settings = json.loads(config_map["data"]["settings.json"].replace(f"<Ref:{bucket_id}>", "BUCKET"))
    assert settings["storagePath"] == "s3://BUCKET/ray-efa"
    outputs = default_synth.cluster.to_json()["Outputs"]
    assert outputs["CheckpointStoragePath"]["Value"] == {"Fn::Join": ["", ["s3://", {"Ref": bucket_id}, "/ray-efa"]]}


def test_ray_pods_run_as_the_service_account_that_may_use_the_bucket(default_synth):
    _, _, job = find_kind(default_synth, "RayJob")
    spec = job["spec"]["rayClusterSpec"]
    accounts = {spec["headGroupSpec"]["template"]["spec"]["serviceAccountName"]}
    accounts |= {g["template"]["spec"]["serviceAccountName"] for g in spec["workerGroupSpecs"]}
    assert accounts == {"ray-train"}
    default_synth.cluster.has_resource_properties("AWS::EKS::PodIdentityAssociation", {
        "Namespace": "ray", "ServiceAccount": "ray-train"})
    (bucket_id,) = default_synth.cluster.find_resources("AWS::S3::Bucket")
    policies = default_synth.cluster.find_resources("AWS::IAM::Policy")
    granted = [p for p in policies.values() if bucket_id in json.dumps(p["Properties"]["PolicyDocument"])]
    assert granted and any("s3:PutObject" in json.dumps(p) for p in granted)


def test_checkpoint_bucket_is_private_encrypted_ssl_only_and_retained(default_synth):
    (bucket_id, bucket), = default_synth.cluster.find_resources("AWS::S3::Bucket").items()
    props = bucket["Properties"]
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True}
    assert bucket["DeletionPolicy"] == "Retain"
    policy = next(iter(default_synth.cluster.find_resources("AWS::S3::BucketPolicy").values()))
    assert '"aws:SecureTransport": "false"' in json.dumps(policy["Properties"]["PolicyDocument"])


def test_own_storage_path_needs_no_bucket():
    synth = synthesize(storagePath="s3://my-team-checkpoints/ray")
    synth.cluster.resource_count_is("AWS::S3::Bucket", 0)
    _, _, config_map = find_kind(synth, "ConfigMap")
    assert json.loads(config_map["data"]["settings.json"])["storagePath"] == "s3://my-team-checkpoints/ray"
    synth.cluster.resource_count_is("AWS::EKS::PodIdentityAssociation", 1)  # the pods still get their account


def test_training_job_can_be_left_out():
    synth = synthesize(trainingJob="false")
    kinds = {obj["kind"] for resource in manifests(synth).values() for obj in manifest_objects(resource)}
    assert "RayJob" not in kinds and "Namespace" in kinds


def test_tcp_network_deploys_the_tcp_job():
    _, _, job = find_kind(synthesize(network="tcp"), "RayJob")
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert job["metadata"]["name"] == "train-tcp"
    assert (env["NCCL_NET"], env["FI_PROVIDER"], env["NCCL_NET_PLUGIN"]) == ("Socket", "tcp", "none")

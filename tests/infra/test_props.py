"""The constructs' props: validated before any child exists, errors naming the prop, the value and what is allowed;
region and zones from the enclosing stack, never an unresolved token in a message."""

from __future__ import annotations

import ast
import inspect
import re
import typing

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ray_efa.core.settings import Settings, SettingsError
from ray_efa.infra import (
    CheckpointStorage,
    ClusterVpc,
    EfaGpuNodegroup,
    GpuDevicePlugins,
    GpuDraDrivers,
    KubeRayOperator,
    RayEksCluster,
    RayTrainingJob,
    RayWorkload,
    default_gpu_zone,
    import_cluster,
)

CKPT = "s3://ckpt-bucket/runs"  # a job on 2 GPU nodes needs shared storage (shared_storage_problem)


def _stack(region: str | None = "us-west-2") -> cdk.Stack:
    env = cdk.Environment(region=region) if region else None
    return cdk.Stack(cdk.App(), "Platform", env=env)


def _imported(stack: cdk.Stack, zones=("us-west-2a", "us-west-2b")) -> tuple[ec2.IVpc, eks.ICluster]:
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id="vpc-0123456789abcdef0",
        availability_zones=list(zones),
        private_subnet_ids=[f"subnet-0{i}aaaaaaaaaaaaaaaa" for i in range(len(zones))],
    )
    cluster = eks.Cluster.from_cluster_attributes(
        stack, "Cluster", cluster_name="platform", cluster_security_group_id="sg-0123456789abcdef0", vpc=vpc
    )
    return vpc, cluster


def _research_cluster(stack: cdk.Stack, vpc: ec2.IVpc) -> eks.ICluster:
    """The platform team's cluster "platform", imported into `stack` as a research team's app imports it."""
    return import_cluster(
        stack,
        "Research",
        cluster_name="platform",
        cluster_security_group_id="sg-1",
        vpc=vpc,
        kubectl_role=iam.Role.from_role_name(stack, "Kubectl", "platform-eks-admin"),
    )


def _children(stack: cdk.Stack, construct_id: str) -> list:
    return list(stack.node.find_child(construct_id).node.children)


def test_gpu_zone_defaults_to_the_first_private_subnets_az():
    vpc, _ = _imported(_stack(), zones=("us-west-2c", "us-west-2a"))
    assert default_gpu_zone(vpc) == "us-west-2c"


def test_a_zone_the_vpc_lacks_is_named_with_the_vpcs_zones_and_nothing_is_created():
    stack = _stack()
    vpc, cluster = _imported(stack)
    with pytest.raises(
        SettingsError,
        match=r"EfaGpuNodegroup availability_zone: must be an AZ where the VPC has a "
        r"private subnet: us-west-2a, us-west-2b, got 'us-west-2d'",
    ):
        EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, availability_zone="us-west-2d")
    assert _children(stack, "Gpu") == []


def test_a_zone_of_another_region_names_the_stacks_region():
    stack = _stack("us-west-2")
    vpc, cluster = _imported(stack)
    with pytest.raises(
        SettingsError,
        match=r"availability_zone: must be an AZ of the stack's region us-west-2: one of "
        r"us-west-2a, us-west-2b, got 'us-east-2a'",
    ):
        EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, availability_zone="us-east-2a")


def test_an_unknown_region_is_said_in_words_not_tokens():
    # GIVEN an environment-agnostic stack: its region and its created VPC's AZs are tokens at synth
    stack = _stack(region=None)
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2)
    cluster = eks.Cluster.from_cluster_attributes(stack, "Cluster", cluster_name="c", cluster_security_group_id="sg-1")
    with pytest.raises(SettingsError) as error:
        EfaGpuNodegroup(stack, "Gpu", cluster=cluster, vpc=vpc, availability_zone="us-west-2a")
    assert "'us-west-2a'" in str(error.value) and "the stack's region is not known at synth" in str(error.value)
    assert "${Token" not in str(error.value)


@pytest.mark.parametrize(
    "build, message",
    [
        (
            lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, instance_type="m7i.xlarge"),
            r"EfaGpuNodegroup instance_type .*m7i\.xlarge",
        ),
        (
            lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, node_count=65),
            r"EfaGpuNodegroup node_count must be between 0 \(scaled to zero\) and 64, got 65",
        ),
        (
            lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, node_selector={"bad key": "x"}),
            r"EfaGpuNodegroup node_selector label key 'bad key' must be",
        ),
        (
            lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, capacity_reservation_type="capacity-block"),
            r"capacity_reservation_type 'capacity-block' needs capacity_reservation_id",
        ),
        (
            lambda s, v, c: KubeRayOperator(s, "X", cluster=c, version="1.3.0"),
            r"KubeRayOperator version must be one of 1\.4\.0, 1\.7\.0, got '1\.3\.0'",
        ),
        (
            lambda s, v, c: KubeRayOperator(s, "X", cluster=c, node_selector={}),
            r"KubeRayOperator node_selector must name at least one node label",
        ),
        (
            lambda s, v, c: GpuDevicePlugins(s, "X", cluster=c, efa_version="v0.0.1"),
            r"GpuDevicePlugins efa_version must be one of .*got 'v0\.0\.1'",
        ),
        (
            lambda s, v, c: CheckpointStorage(s, "X", cluster=c, storage_path="bucket/prefix"),
            r"CheckpointStorage storage_path must be s3://bucket/prefix or an absolute path.*got 'bucket/prefix'",
        ),
        (
            lambda s, v, c: RayWorkload(s, "X", cluster=c, namespace="Ray"),
            r"RayWorkload namespace must be a DNS label.*got 'Ray'",
        ),
        (
            lambda s, v, c: CheckpointStorage(s, "X", cluster=c, namespace="ray_jobs"),
            r"CheckpointStorage namespace must be a DNS label.*got 'ray_jobs'",
        ),
        (
            lambda s, v, c: GpuDevicePlugins(s, "X", cluster=c, nvidia_version="v0.20.0"),
            r"GpuDevicePlugins nvidia_version must be a chart version like 0\.20\.0, got 'v0\.20\.0'",
        ),
        (
            lambda s, v, c: GpuDraDrivers(s, "X", cluster=c, nvidia_version="0.4"),
            r"GpuDraDrivers nvidia_version must be a chart version like 0\.4\.1, got '0\.4'",
        ),
        (
            lambda s, v, c: RayEksCluster(
                s, "X", vpc=v, endpoint_access="public", public_access_cidrs=["203.0.113.0/24"]
            ),
            r"RayEksCluster public_access_cidrs must be \('0.0.0.0/0',\) with endpoint_access 'public', got "
            r"\('203.0.113.0/24',\)",
        ),
        (
            lambda s, v, c: ClusterVpc(s, "X", availability_zones=["us-west-2a"]),
            r"ClusterVpc availability_zones must name at least two AZs.*\['us-west-2a'\]",
        ),
        (
            lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, cluster_name="research"),
            r"EfaGpuNodegroup cluster_name 'research' is not the name of its cluster, 'platform': leave cluster_name out",
        ),
        (
            lambda s, v, c: RayTrainingJob(
                s, "X", cluster=c, settings=Settings.from_context({"clusterName": "ray-train"})
            ),
            r"RayTrainingJob clusterName: the settings say 'ray-train' but the cluster Platform/Cluster says 'platform'",
        ),
        (
            lambda s, v, c: RayTrainingJob(
                s,
                "X",
                cluster=c,
                gpu_nodes=EfaGpuNodegroup(s, "Gpu", cluster=c, vpc=v),
                settings=Settings.from_context({"gpuAvailabilityZone": "us-west-2b", "region": "us-west-2"}),
            ),
            r"RayTrainingJob gpuAvailabilityZone: the settings say 'us-west-2b' but EfaGpuNodegroup Platform/Gpu says "
            r"'us-west-2a'",
        ),
    ],
)
def test_bad_props_are_refused_by_name_before_any_child_exists(build, message):
    stack = _stack()
    vpc, cluster = _imported(stack)
    with pytest.raises(ValueError, match=message):
        build(stack, vpc, cluster)
    assert _children(stack, "X") == []


# -- one declaration: the props' defaults, bounds and choices are the settings fields' ----------------------------

# (construct or function, prop, setting key): every prop that a construct's from_settings fills from a setting.
# Not here: the props whose value another construct states (KubeRayOperator and GpuDevicePlugins / GpuDraDrivers
# node_selector, from the node groups they serve; CheckpointStorage namespace, from RayWorkload). Their fallback, when
# nothing states them, is still the setting's default: tests/infra/test_seams.py.
PROP_SETTINGS = [
    (RayEksCluster, "cluster_name", "clusterName"),
    (RayEksCluster, "kubernetes_version", "kubernetesVersion"),
    (RayEksCluster, "endpoint_access", "endpointAccess"),
    (RayEksCluster, "public_access_cidrs", "publicAccessCidrs"),
    (RayEksCluster, "system_instance_type", "systemInstanceType"),
    (RayEksCluster, "system_node_count", "systemNodeCount"),
    (RayEksCluster, "system_root_volume_gib", "systemRootVolumeGib"),
    (RayEksCluster, "system_node_selector", "systemNodeSelector"),
    (RayEksCluster, "log_retention_days", "logRetentionDays"),
    (EfaGpuNodegroup, "instance_type", "gpuInstanceType"),
    (EfaGpuNodegroup, "node_count", "gpuNodeCount"),
    (EfaGpuNodegroup, "node_selector", "gpuNodeSelector"),
    (EfaGpuNodegroup, "capacity_reservation_type", "capacityReservationType"),
    (EfaGpuNodegroup, "root_volume_gib", "gpuRootVolumeGib"),
    (KubeRayOperator, "version", "kuberayVersion"),
    (GpuDevicePlugins, "nvidia_version", "nvidiaDevicePluginVersion"),
    (GpuDevicePlugins, "efa_version", "efaDevicePluginVersion"),
    (GpuDraDrivers, "kubernetes_version", "kubernetesVersion"),
    (GpuDraDrivers, "nvidia_version", "nvidiaDraDriverVersion"),
    (GpuDraDrivers, "efa_version", "efaDraDriverVersion"),
    (RayWorkload, "namespace", "namespace"),
    (CheckpointStorage, "service_account", "serviceAccount"),
    (ClusterVpc, "nat_gateways", "natGateways"),
    (ClusterVpc, "log_retention_days", "logRetentionDays"),
    (import_cluster, "kubernetes_version", "kubernetesVersion"),
]


def _field(key: str):
    """The pydantic field of setting `key`, found through the Settings model itself (not infra's reader)."""
    ((section, name),) = [
        (section, name)
        for section, field in Settings.model_fields.items()
        for name, info in _section(field).model_fields.items()
        if info.alias == key
    ]
    return _section(Settings.model_fields[section]).model_fields[name]


def _section(field: FieldInfo) -> type[BaseModel]:
    """The model class of one of Settings' sections."""
    model = field.annotation
    assert isinstance(model, type) and issubclass(model, BaseModel), field
    return model


def _documented_default(target, prop: str) -> str:
    doc = inspect.getdoc(target.__init__ if inspect.isclass(target) else target) or ""
    match = re.search(rf":param {prop}:(.*?)(?=\n\s*:param |\Z)", doc, re.S)
    assert match, f"{target.__name__} documents no :param {prop}:"
    (default,) = re.findall(r"@default (.*)", " ".join(match.group(1).split()))
    return default


@pytest.mark.parametrize("target, prop, key", PROP_SETTINGS, ids=[f"{t.__name__}.{p}" for t, p, _ in PROP_SETTINGS])
def test_a_props_default_is_its_settings_default_and_says_so(target, prop, key):
    signature = inspect.signature(target.__init__ if inspect.isclass(target) else target)
    setting_default = _field(key).default
    # THEN the prop's default is the setting's, and its docstring's @default names that value
    assert signature.parameters[prop].default == setting_default, (target.__name__, prop, key)
    documented = ast.literal_eval(_documented_default(target, prop))
    assert (tuple(documented) if isinstance(documented, list) else documented) == setting_default, (target, prop)


def _bounds(key: str) -> tuple[int, int]:
    metadata = _field(key).metadata
    return (next(m.ge for m in metadata if hasattr(m, "ge")), next(m.le for m in metadata if hasattr(m, "le")))


@pytest.mark.parametrize(
    "build, key",
    [
        (lambda s, v, c, n: RayEksCluster(s, "X", vpc=v, system_node_count=n), "systemNodeCount"),
        (lambda s, v, c, n: RayEksCluster(s, "X", vpc=v, system_root_volume_gib=n), "systemRootVolumeGib"),
        (lambda s, v, c, n: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, node_count=n), "gpuNodeCount"),
        (lambda s, v, c, n: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, root_volume_gib=n), "gpuRootVolumeGib"),
        (lambda s, v, c, n: ClusterVpc(s, "X", nat_gateways=n), "natGateways"),
    ],
    ids=["system_node_count", "system_root_volume_gib", "node_count", "root_volume_gib", "nat_gateways"],
)
def test_a_props_bounds_are_its_settings_bounds(build, key):
    low, high = _bounds(key)
    for value in (low - 1, high + 1):
        stack = _stack()
        vpc, cluster = _imported(stack)
        with pytest.raises(ValueError, match=rf"must be between {low}\b.* and {high}, got {value}"):
            build(stack, vpc, cluster, value)
        assert _children(stack, "X") == []


@pytest.mark.parametrize(
    "build, key",
    [
        (lambda s, v, c, x: RayEksCluster(s, "X", vpc=v, kubernetes_version=x), "kubernetesVersion"),
        (lambda s, v, c, x: RayEksCluster(s, "X", vpc=v, endpoint_access=x), "endpointAccess"),
        (
            lambda s, v, c, x: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, capacity_reservation_type=x),
            "capacityReservationType",
        ),
        (lambda s, v, c, x: KubeRayOperator(s, "X", cluster=c, version=x), "kuberayVersion"),
        (lambda s, v, c, x: GpuDevicePlugins(s, "X", cluster=c, efa_version=x), "efaDevicePluginVersion"),
        (lambda s, v, c, x: GpuDraDrivers(s, "X", cluster=c, efa_version=x), "efaDraDriverVersion"),
        (
            lambda s, v, c, x: import_cluster(
                s,
                "X",
                cluster_name="c",
                cluster_security_group_id="sg-1",
                vpc=v,
                kubernetes_version=x,
                kubectl_role=None,
            ),
            "kubernetesVersion",
        ),
    ],
    ids=[
        "kubernetes_version",
        "endpoint_access",
        "capacity_reservation_type",
        "kuberay_version",
        "efa_version",
        "efa_dra_version",
        "import_kubernetes_version",
    ],
)
def test_a_props_choices_are_its_settings_choices(build, key):
    stack = _stack()
    vpc, cluster = _imported(stack)
    allowed = ", ".join(re.escape(str(c)) for c in typing.get_args(_field(key).annotation))
    with pytest.raises(ValueError, match=rf"must be one of {allowed}, got 'nope'"):
        build(stack, vpc, cluster, "nope")


def test_a_job_in_a_region_without_an_az_table_takes_the_zone_from_the_clusters_vpc():
    # GIVEN a cluster imported in eu-south-1 (the settings record no AZs there) and no GPU node group in the stack
    stack = _stack("eu-south-1")
    vpc, _ = _imported(stack, zones=("eu-south-1b", "eu-south-1a"))
    cluster = _research_cluster(stack, vpc)
    # WHEN the job is built there THEN it synthesizes, with the region, the zones and the name of what it was given
    job = RayTrainingJob(stack, "Job", cluster=cluster, storage_path=CKPT)
    assert job.settings.cluster.region == "eu-south-1"
    assert job.settings.gpu_availability_zone == "eu-south-1b"  # the VPC's first private subnet's
    assert job.settings.vpc_availability_zones == ("eu-south-1b", "eu-south-1a")
    assert job.settings.cluster.cluster_name == "platform"


def test_a_job_on_two_nodes_without_shared_storage_is_refused_as_the_cli_refuses_it():
    # GIVEN an imported cluster with no CheckpointStorage in the stack
    stack = _stack()
    vpc, _ = _imported(stack)
    cluster = _research_cluster(stack, vpc)
    # WHEN a job on the default 2 GPU nodes names no storage THEN synth refuses it, naming the props that give one
    with pytest.raises(
        ValueError,
        match=r"RayTrainingJob storage_path: must be s3://\.\.\. or a shared filesystem for "
        r"a job on 2 GPU nodes .* pass storage= \(a CheckpointStorage: its bucket\), "
        r"storage_path=, or the settings' storagePath",
    ):
        RayTrainingJob(stack, "X", cluster=cluster)
    assert _children(stack, "X") == []
    # AND one node needs none (its workers share a disk); storage_path is enough on two
    RayTrainingJob(stack, "One", cluster=cluster, settings=Settings.from_context({"gpuNodeCount": 1}))
    assert (
        RayTrainingJob(stack, "Two", cluster=cluster, job_name="two", storage_path=CKPT).settings.workload.storage_path
        == CKPT
    )


# -- props checked as their settings are: one function per value, and their types at the boundary -----------------


@pytest.mark.parametrize(
    "build, error, message",
    [
        (
            lambda s, v, c: RayEksCluster(s, "X", vpc=v, public_access_cidrs=["10.0.0.0/33"]),
            ValueError,
            r"RayEksCluster public_access_cidrs must be IPv4 CIDRs like 203\.0\.113\.0/24, got '10\.0\.0\.0/33'",
        ),
        (
            lambda s, v, c: RayEksCluster(s, "X", vpc=v, public_access_cidrs=["10.0.0.1/24"]),
            ValueError,
            r"RayEksCluster public_access_cidrs must be a network address with its host bits zero: 10\.0\.0\.0/24",
        ),
        (
            lambda s, v, c: RayEksCluster(s, "X", vpc=v, admin_principal_arns=["alice"]),
            ValueError,
            r"RayEksCluster admin_principal_arns must be IAM role or user ARNs like .*, got 'alice'",
        ),
        (
            lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, capacity_reservation_id="res-123"),
            ValueError,
            r"EfaGpuNodegroup capacity_reservation_id must be 'cr-' and 17 hex digits, like cr-0123456789abcdef0, "
            r"got 'res-123'",
        ),
        (
            lambda s, v, c: RayEksCluster(s, "X", vpc=v, public_access_cidrs="10.0.0.0/16"),
            TypeError,
            r"RayEksCluster public_access_cidrs must be a list of strings, got '10\.0\.0\.0/16' \(str\)",
        ),
        (
            lambda s, v, c: RayEksCluster(s, "X", vpc=v, admin_principal_arns="arn:aws:iam::111122223333:role/Admin"),
            TypeError,
            r"RayEksCluster admin_principal_arns must be a list of strings, got 'arn:aws:iam::",
        ),
        (
            lambda s, v, c: EfaGpuNodegroup(s, "X", cluster=c, vpc=v, node_count="2"),  # pyright: ignore[reportArgumentType]
            TypeError,
            r"EfaGpuNodegroup node_count must be a whole number, got '2' \(str\)",
        ),
        (
            lambda s, v, c: RayEksCluster(s, "X", vpc=v, system_node_count=1.0),  # pyright: ignore[reportArgumentType]
            TypeError,
            r"RayEksCluster system_node_count must be a whole number, got 1\.0 \(float\)",
        ),
        (
            lambda s, v, c: RayTrainingJob(s, "X", cluster=c, train_config='{"lr": 1}'),  # pyright: ignore[reportArgumentType]
            TypeError,
            r"RayTrainingJob train_config must be a mapping \(dict\) of your parameters, got '\{\"lr\": 1\}' \(str\)",
        ),
        (
            lambda s, v, c: RayTrainingJob(s, "X", cluster=c, train_config={"lr": {1, 2}}),
            ValueError,
            r"RayTrainingJob train_config: must be a JSON object",
        ),
        (
            lambda s, v, c: RayTrainingJob(s, "X", cluster=c, job_name=7),  # pyright: ignore[reportArgumentType]
            TypeError,
            r"RayTrainingJob job_name must be a string, got 7 \(int\)",
        ),
        (
            lambda s, v, c: RayTrainingJob(s, "X", cluster=c, job_name="Exp_1"),
            ValueError,
            r"RayTrainingJob job_name: must be a DNS-1035 label \(lowercase letters, digits and '-', starting with a letter "
            r"and ending with a letter or digit\), got 'Exp_1'",
        ),
        (
            lambda s, v, c: RayTrainingJob(s, "X", cluster=c, job_name="e" * 44),
            ValueError,
            r"RayTrainingJob job_name: must be at most 43 characters, not 44",
        ),
    ],
    ids=[
        "cidr-prefix",
        "cidr-host-bits",
        "admin-arn",
        "reservation",
        "cidrs-str",
        "arns-str",
        "node-count-str",
        "system-node-count-float",
        "train-config-str",
        "train-config-not-json",
        "job-name-int",
        "job-name-characters",
        "job-name-length",
    ],
)
def test_props_are_checked_as_their_settings_are_naming_the_prop(build, error, message):
    stack = _stack()
    vpc, cluster = _imported(stack)
    with pytest.raises(error, match=message):
        build(stack, vpc, cluster)
    assert _children(stack, "X") == []


def test_the_prop_checks_are_the_settings_own():
    # the same values, as settings, are refused by the same functions' words
    for context, words in (
        ({"publicAccessCidrs": ["10.0.0.0/33"]}, "must be IPv4 CIDRs like 203.0.113.0/24"),
        ({"adminPrincipalArns": ["alice"]}, "must be IAM role or user ARNs like"),
        ({"capacityReservationId": "res-123"}, "must be 'cr-' and 17 hex digits"),
        ({"jobName": "Exp_1"}, "must be a DNS-1035 label (lowercase letters"),
    ):
        with pytest.raises(SettingsError, match=re.escape(words)):
            Settings.from_context(context)


def test_a_second_job_of_one_name_in_one_namespace_is_refused_naming_job_name():
    # GIVEN a job on the cluster
    stack = _stack()
    vpc, _ = _imported(stack)
    cluster = _research_cluster(stack, vpc)
    RayTrainingJob(stack, "First", cluster=cluster, storage_path=CKPT)
    # WHEN a second one gets the same RayJob name in the same namespace (the default jobName), THEN synth refuses it
    with pytest.raises(
        ValueError,
        match=r"RayTrainingJob job_name \(the settings' jobName\) must differ from every "
        r"other job's in namespace ray of Platform/Research/Cluster: Platform/First runs "
        r"RayJob train-efa there already, got 'train-efa'",
    ):
        RayTrainingJob(stack, "X", cluster=cluster, storage_path=CKPT)
    assert _children(stack, "X") == []
    # AND another name, or the same name in another namespace, is fine
    RayTrainingJob(stack, "Second", cluster=cluster, job_name="second", storage_path=CKPT)
    RayTrainingJob(
        stack, "Third", cluster=cluster, settings=Settings.from_context({"namespace": "research"}), storage_path=CKPT
    )

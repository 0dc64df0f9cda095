"""The EFA GPU node group: launch template with one EFA interface per network card, its security group,
a cluster placement group (or a capacity reservation or Capacity Block), all in one subnet of one AZ."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Stack, Tags, Token
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ray_efa.core import catalog, regions
from ray_efa.core.scheduling import (
    DEFAULT_GPU_NODE_SELECTOR,
    DEFAULT_GPU_TAINTS,
    Taint,
    gpu_node_labels,
    parse_taint,
)
from ray_efa.core.settings import Settings, capacity_reservation_problem
from ray_efa.infra._private import (
    check_node_selector,
    common_labels,
    follow_kubernetes_version,
    literal_cluster_name,
    literal_kubernetes_version,
    node_role_policies,
    nodegroup_name,
    on_cluster,
    selects,
)
from ray_efa.infra._settings import check_bounds, check_type, choices, default
from ray_efa.infra.nag import CNI_POLICY, NODE_ROLE_POLICIES, acknowledge_managed_policies
from ray_efa.infra.network import default_gpu_zone, gpu_subnet, is_placeholder_zone
from ray_efa.infra.node_health import enable_node_repair
from ray_efa.infra.node_storage import check_root_volume, encrypted_root_volume

__all__ = [
    "EfaGpuNodegroup",
    "launch_template_network_interfaces",
    "gpu_nodes_selector",
    "unselected_gpu_nodes",
    "settings_gpu_zone",
    "NO_EGRESS_RULE",
    "gpu_nodegroup_name",
    "gpu_update_config",
    "gpu_nodes_taints",
]

NO_EGRESS_RULE: dict[str, str | int] = {
    "CidrIp": "255.255.255.255/32",
    "Description": "Disallow all traffic",
    "IpProtocol": "icmp",
    "FromPort": 252,
    "ToPort": 86,
}
"""aws-cdk-lib's own placeholder egress rule of a SecurityGroup with allowAllOutbound false (aws-ec2 security-group:
MATCH_NO_TRAFFIC): an ICMP type no packet has, to a broadcast address. Stating any egress rule in the group's own
SecurityGroupEgress is what removes EC2's default allow-all rule."""

_CAPACITY_TYPE_SUFFIX = {"ON_DEMAND": None, "CAPACITY_BLOCK": "cb"}


def gpu_nodegroup_name(prop: str, cluster_name: str, zone: str, capacity_type: str) -> str:
    """`<cluster>-gpu-<zone letter>[-cb]`: what replaces the node group is in its name (a new subnet, so a new AZ, and
    a new CapacityType: both "Update requires: Replacement" in AWS::EKS::Nodegroup's CloudFormation reference), because
    CloudFormation replaces a custom-named resource only under a new name (it creates the new one first). On-demand and
    an ODCR are both ON_DEMAND (the reservation is in the launch template): no suffix, as before Capacity Blocks."""
    suffix = _CAPACITY_TYPE_SUFFIX[capacity_type]
    return nodegroup_name(prop, f"{cluster_name}-gpu", zone.rsplit("-", 1)[-1], *([suffix] if suffix else []))


_TAINT_EFFECTS = {
    "NoSchedule": eks.TaintEffect.NO_SCHEDULE,
    "PreferNoSchedule": eks.TaintEffect.PREFER_NO_SCHEDULE,
    "NoExecute": eks.TaintEffect.NO_EXECUTE,
}


def gpu_update_config(node_count: int) -> dict[str, int | str]:
    """The GPU node group's UpdateConfig, for every capacity type: never more GPU nodes than `node_count`.

    EKS's default update "launches the new instances first, before terminating the old instances" (a surge of GPU
    nodes the quota, a reservation sized to the node count or a full Capacity Block has no room for); MINIMAL
    "terminates the old instances before launching the new instances ... useful in scenarios where you are
    constrained to resources or costs (for example, with hardware accelerators such as GPUs)" (EKS API reference,
    NodegroupUpdateConfig.updateStrategy). All nodes at once (maxUnavailable = the node count, at most EKS's 100,
    at least its 1): a distributed job needs every node, so a partial roll buys nothing. A Capacity Block's group is
    not updated with nodes up at all ("When upgrading a managed node group with Capacity Blocks, make sure to set
    the desired size of the node group to 0", EKS User Guide, capacity-blocks-mng): the job guard refuses that roll
    (infra.job_guard)."""
    return {"max_unavailable": min(max(node_count, 1), 100), "update_strategy": "MINIMAL"}


def launch_template_network_interfaces(
    instance: catalog.InstanceType, security_group_ids: list[str]
) -> list[ec2.CfnLaunchTemplate.NetworkInterfaceProperty]:
    """The launch template's NetworkInterfaces: the catalog's EFA interfaces, each with every security group.

    Interfaces in a launch template replace the groups EKS would attach, so the cluster security group goes on
    each interface next to the EFA group. Where the row says so (catalog.InstanceType.efa_only_secondary) the
    secondary cards' interfaces are `efa-only` (no IP address), which needs the Amazon VPC CNI v1.18.4 or later on
    the cluster.
    """
    return [
        ec2.CfnLaunchTemplate.NetworkInterfaceProperty(
            network_card_index=interface["NetworkCardIndex"],
            device_index=interface["DeviceIndex"],
            interface_type=interface["InterfaceType"],
            groups=security_group_ids,
            delete_on_termination=True,
        )
        for interface in catalog.efa_network_interfaces(instance)
    ]


def _checked_instance(instance_type: str | catalog.InstanceType) -> catalog.InstanceType:
    """The catalog row of the `instance_type` prop (a name, or a row of the caller's own, checked as the catalog's)."""
    try:
        if isinstance(instance_type, catalog.InstanceType):
            return catalog.usable_gpu_instance(instance_type)
        return catalog.gpu_instance(instance_type)
    except catalog.CatalogError as error:
        raise ValueError(f"EfaGpuNodegroup instance_type {error}") from None


def _checked_props(
    node_count: int,
    root_volume_gib: int,
    capacity_reservation_id: str | None,
    capacity_reservation_type: str,
    placement_group: bool | None,
    node_selector: Mapping[str, str],
    taints: Sequence[str],
    image: str | None,
) -> list[Taint]:
    """ValueError naming the first bad prop of EfaGpuNodegroup (but instance_type); the parsed taints."""
    check_type("EfaGpuNodegroup node_count", node_count, int, "a whole number")
    check_type("EfaGpuNodegroup root_volume_gib", root_volume_gib, int, "a whole number")
    if capacity_reservation_id is not None:  # a CDK token (an imported reservation's id) is checked at deploy
        check_type("EfaGpuNodegroup capacity_reservation_id", capacity_reservation_id, str, "a reservation id")
        if (
            not Token.is_unresolved(capacity_reservation_id)
            and (why := capacity_reservation_problem(capacity_reservation_id)) is not None
        ):
            raise ValueError(f"EfaGpuNodegroup capacity_reservation_id {why}, got {capacity_reservation_id!r}")
    check_bounds("EfaGpuNodegroup node_count", node_count, "gpuNodeCount", " (scaled to zero)")
    check_bounds("EfaGpuNodegroup root_volume_gib", root_volume_gib, "gpuRootVolumeGib")
    if capacity_reservation_type not in choices("capacityReservationType"):
        raise ValueError(
            f"EfaGpuNodegroup capacity_reservation_type must be one of "
            f"{', '.join(choices('capacityReservationType'))}, got {capacity_reservation_type!r}"
        )
    if capacity_reservation_type == "capacity-block" and capacity_reservation_id is None:
        raise ValueError("EfaGpuNodegroup capacity_reservation_type 'capacity-block' needs capacity_reservation_id")
    if placement_group and capacity_reservation_id is not None:
        raise ValueError(
            "EfaGpuNodegroup placement_group must not be True with capacity_reservation_id (a forced "
            "placement group can leave reserved capacity unused)"
        )
    check_node_selector("EfaGpuNodegroup node_selector", node_selector)
    try:
        parsed_taints = [parse_taint(t) for t in taints]
    except ValueError as error:
        raise ValueError(f"EfaGpuNodegroup taints: {error}") from None
    if image is not None:
        check_root_volume("root_volume_gib", root_volume_gib, image)  # the Ray workers' image
    return parsed_taints


def _agreed_with_cluster(prop: str, given: str | None, known: str | None) -> str | None:
    """The cluster's `prop` (its name or version): the one given, which must agree with the one known at synth."""
    if given is not None and known is not None and given != known:
        raise ValueError(
            f"EfaGpuNodegroup {prop} {given!r} is not the {prop.split('_')[-1]} of its cluster, "
            f"{known!r}: leave {prop} out (it comes from the cluster)"
        )
    return given or known


class EfaGpuNodegroup(Construct):
    """A managed node group of `node_count` x `instance_type` (AL2023 NVIDIA AMI) with EFA on every network card, in
    one private subnet of one AZ.

    Nodes are labelled with `node_selector` and nvidia.com/gpu.present=true and tainted with `taints` (default
    nvidia.com/gpu=true:NoSchedule), which the Ray workers and the device plugins tolerate.
    IMDSv2 is required with a hop limit of 1 (out of pods' reach) and the gp3 root volume is encrypted.

    With `capacity_reservation_type` capacity-block the node group's capacity type is CAPACITY_BLOCK and the launch
    template targets the block with the capacity-block market type, as the EKS User Guide's "Create a managed node
    group with Capacity Blocks for ML" requires (a custom launch template with InstanceMarketOptions.MarketType
    capacity-block, the reservation id and the instance type). Instances launch only while the block is active, and
    EKS asks for desired size 0 before a node group of a Capacity Block is upgraded.

    Wiring attributes: `nodegroup` (the eks.Nodegroup: what the training job waits for), `launch_template`,
    `efa_security_group`, `placement_group` (None without one), `subnet` and `availability_zone` (the one AZ), `vpc`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: eks.ICluster,
        vpc: ec2.IVpc,
        instance_type: str | catalog.InstanceType = default("gpuInstanceType"),
        node_count: int = default("gpuNodeCount"),
        availability_zone: str | None = None,
        node_selector: Mapping[str, str] = default("gpuNodeSelector"),
        capacity_reservation_id: str | None = None,
        capacity_reservation_type: str = default("capacityReservationType"),
        placement_group: bool | None = None,
        root_volume_gib: int = default("gpuRootVolumeGib"),
        taints: Sequence[str] = default("gpuNodeTaints"),
        image: str | None = None,
        cluster_name: str | None = None,
        kubernetes_version: str | None = None,
        node_repair: bool = default("nodeRepair"),
        cni_on_node_role: bool = False,
    ) -> None:
        """
        :param cluster: the EKS cluster, created or imported (with its cluster security group id).
        :param vpc: the cluster's VPC; the nodes go into its private subnet in `availability_zone`.
        :param instance_type: an EFA-capable GPU instance type of core.catalog, by name, or a row of your own
            (catalog.describe_gpu_instance: checked as the catalog's rows are). @default "g6.12xlarge"
        :param node_count: GPU nodes, fixed (min = desired = max); 0 scales the node group to zero (min = desired =
            0, max 1, the least EKS allows) and keeps it, its launch template and placement group. @default 2
        :param availability_zone: the one AZ of all GPU nodes (EFA does not cross AZs), in the stack's region.
            @default - the AZ of the VPC's first private subnet
        :param node_selector: the nodes' labels (what the Ray workers and the device plugins select).
            @default {"role": "gpu-worker"}
        :param capacity_reservation_id: a capacity reservation (cr-...) to launch into. @default - none
        :param capacity_reservation_type: odcr, or capacity-block for a Capacity Block for ML. @default "odcr"
        :param placement_group: a cluster placement group. @default - on unless a reservation is targeted
        :param root_volume_gib: encrypted gp3 root volume, GiB (holds the image). @default 500
        :param taints: the nodes' taints, each key=value:Effect or key:Effect; the Ray workers and the device plugins
            of this app tolerate them (RayTrainingJob and GpuDevicePlugins read them here).
            @default ["nvidia.com/gpu=true:NoSchedule"]
        :param image: the image the Ray workers run, to check that the root volume holds it. @default - not checked
        :param cluster_name: the cluster's name as a literal, for the node group's name, Name tag and descriptions;
            only for a cluster whose name is not known at synth (it must agree with one that is).
            @default - the cluster's name (an imported cluster's, or the one a created cluster was given), else "ray-efa"
        :param kubernetes_version: the cluster's Kubernetes version, which the node group follows (a bump upgrades the
            nodes); only for a cluster whose version is not known at synth (it must agree with one that is).
            @default - a created cluster's version; an imported cluster's node group keeps the version it has
        :param node_repair: EKS node auto repair of unhealthy nodes (NodeRepairConfig; docs/node-health.md). @default True
        :param cni_on_node_role: keep AmazonEKS_CNI_Policy on the nodes' role (a VPC CNI without a role of its own:
            RayEksCluster(network_policy=False)). @default False
        """
        super().__init__(scope, construct_id)
        # Validate every prop before creating any resource.
        instance = _checked_instance(instance_type)
        instance_type = instance.name
        parsed_taints = _checked_props(
            node_count,
            root_volume_gib,
            capacity_reservation_id,
            capacity_reservation_type,
            placement_group,
            node_selector,
            taints,
            image,
        )
        self.taints: tuple[str, ...] = tuple(taints)
        """The nodes' taints (what the Ray workers and the device plugins tolerate)."""
        zone = availability_zone if availability_zone is not None else default_gpu_zone(vpc)
        # The subnet lookup raises for an AZ the VPC does not cover, naming the zone given.
        self.subnet: ec2.ISubnet = gpu_subnet(vpc, zone, key="EfaGpuNodegroup availability_zone")
        self.availability_zone = zone
        self.vpc: ec2.IVpc = vpc
        self.instance_type = instance_type
        self.node_count = node_count
        self.node_selector: dict[str, str] = dict(node_selector)
        """What the Ray workers select (RayTrainingJob reads instance type, count and selector from here)."""
        self.labels: dict[str, str] = gpu_node_labels(node_selector)
        """Every label of the nodes: node_selector and nvidia.com/gpu.present (what the device plugins select)."""
        self.cluster: eks.ICluster = cluster
        self.capacity_reservation_id: str | None = capacity_reservation_id
        self.capacity_reservation_type: str = capacity_reservation_type
        cluster_name = _agreed_with_cluster("cluster_name", cluster_name, literal_cluster_name(cluster)) or "ray-efa"
        self.kubernetes_version: str | None = _agreed_with_cluster(
            "kubernetes_version", kubernetes_version, literal_kubernetes_version(cluster)
        )
        """The version the node group follows (None: EKS keeps the one it was created with)."""
        self.root_volume_gib = root_volume_gib
        use_placement_group = placement_group if placement_group is not None else capacity_reservation_id is None
        self.use_placement_group: bool = use_placement_group
        """Whether the nodes launch into a cluster placement group (the job's NCCL settings depend on it)."""
        self.capacity_type = "CAPACITY_BLOCK" if capacity_reservation_type == "capacity-block" else "ON_DEMAND"

        self.efa_security_group: ec2.SecurityGroup = self._efa_security_group(cluster_name)
        # A cluster placement group packs the nodes close together; with a capacity reservation the reservation
        # decides where instances land, and a forced placement group could leave reserved capacity unused.
        self.placement_group: ec2.PlacementGroup | None = self._placement_group() if use_placement_group else None
        self.launch_template: ec2.CfnLaunchTemplate = self._launch_template(instance, f"{cluster_name}-gpu")
        self.nodegroup: eks.Nodegroup = self._nodegroup(cluster_name, parsed_taints, node_repair)
        Tags.of(self).add("ray-efa/instance-type", instance_type)
        self._node_role(cni_on_node_role)

    def _node_role(self, cni_on_node_role: bool) -> None:
        """The nodes' role's AWS managed policies, without the VPC CNI's where the vpc-cni add-on has its own role."""
        policies = (*NODE_ROLE_POLICIES, CNI_POLICY) if cni_on_node_role else NODE_ROLE_POLICIES
        node_role_policies(self.nodegroup, policies)
        acknowledge_managed_policies(
            self.nodegroup.role,
            policies,
            "EKS requires these AWS managed policies on managed node group roles (worker node, ECR pulls).",
        )

    def _efa_security_group(self, cluster_name: str) -> ec2.SecurityGroup:
        """The EFA security group: all traffic to and from itself, and no other egress."""
        group = ec2.SecurityGroup(
            self,
            "EfaSecurityGroup",
            vpc=self.vpc,
            allow_all_outbound=False,
            description=f"EFA traffic between the GPU nodes of {cluster_name}: all traffic to and from itself",
        )
        # EFA's SRD traffic is not TCP/UDP: it needs every protocol, in and out, between members of this group.
        group.add_ingress_rule(group, ec2.Port.all_traffic(), "EFA from GPU nodes")
        group.add_egress_rule(group, ec2.Port.all_traffic(), "EFA to GPU nodes")
        # A rule to the group itself cannot be inline (a circular reference): aws-cdk-lib makes it an
        # AWS::EC2::SecurityGroupEgress of its own and drops its no-traffic placeholder from the group, which is then
        # created with no SecurityGroupEgress, and so with EC2's default allow-all egress ("When you create a security
        # group, if you do not add egress rules, we add egress rules that allow all outbound IPv4 and IPv6 traffic",
        # AWS::EC2::SecurityGroup, CloudFormation reference). The placeholder stated inline removes it: the group's
        # egress is EFA to itself and nothing else (the cluster security group on the same interfaces carries the
        # nodes' other traffic).
        cfn_group = group.node.default_child
        assert isinstance(cfn_group, ec2.CfnSecurityGroup)
        cfn_group.add_property_override("SecurityGroupEgress", [NO_EGRESS_RULE])
        return group

    def _placement_group(self) -> ec2.PlacementGroup:
        """A cluster placement group, tagged with the GPU AZ."""
        group = ec2.PlacementGroup(self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
        # A cluster placement group lives in the AZ of its first instance. Its tags (a change replaces it) name
        # the AZ and the type, so that a zone move replaces it together with the node group: the new nodes
        # launch into a new group while the old ones still run in the old one (EC2 refuses a group in use in
        # another AZ: InvalidPlacementGroup.InUse).
        Tags.of(group).add("ray-efa/availability-zone", self.availability_zone)
        return group

    def _launch_template(self, instance: catalog.InstanceType, name: str) -> ec2.CfnLaunchTemplate:
        """The launch template: the instance type, its EFA interfaces, IMDSv2, the root volume, where to launch."""
        placement = None
        if self.placement_group is not None:
            placement = ec2.CfnLaunchTemplate.PlacementProperty(group_name=self.placement_group.placement_group_name)
        reservation = None
        if self.capacity_reservation_id:
            reservation = ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                    capacity_reservation_id=self.capacity_reservation_id
                )
            )
        market = None
        if self.capacity_type == "CAPACITY_BLOCK":
            market = ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")
        security_group_ids = [self.efa_security_group.security_group_id, self.cluster.cluster_security_group_id]
        return ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                instance_type=instance.name,
                network_interfaces=launch_template_network_interfaces(instance, security_group_ids),
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                    http_tokens="required",
                    # 1 hop: IMDS answers the node and host-network pods only, so no other pod can take the node
                    # role's credentials (EKS best practices). Nothing the stack runs in a pod network needs IMDS:
                    # the Ray pods get credentials from Pod Identity and the region from their env; docs/security.md.
                    http_put_response_hop_limit=1,
                    http_endpoint="enabled",
                ),
                # Above gp3's baseline: the image's layers unpack faster, so a new node is ready sooner.
                block_device_mappings=[encrypted_root_volume(self.root_volume_gib, iops=6000, throughput=500)],
                placement=placement,
                capacity_reservation_specification=reservation,
                instance_market_options=market,
                tag_specifications=[
                    ec2.CfnLaunchTemplate.TagSpecificationProperty(
                        resource_type="instance", tags=[{"key": "Name", "value": name}]
                    )
                ],
            ),
        )

    def _nodegroup(self, cluster_name: str, taints: Sequence[Taint], node_repair: bool) -> eks.Nodegroup:
        """The managed node group on the launch template: fixed size, labelled, tainted, following the cluster."""
        node_count = self.node_count
        nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=self.cluster,
            # The AZ and the capacity type in the name: moving the GPU AZ (its Subnets) or switching to or from a
            # Capacity Block (its CapacityType) replaces the node group, and CloudFormation cannot replace a resource
            # whose custom name stays the same.
            nodegroup_name=gpu_nodegroup_name(
                "EfaGpuNodegroup cluster_name", cluster_name, self.availability_zone, self.capacity_type
            ),
            # The instance type is in the launch template: aws-cdk-lib's own GPU-family table does not know every
            # EFA GPU type (p5 is missing), and would reject the NVIDIA AMI for it.
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            capacity_type=eks.CapacityType(self.capacity_type),
            min_size=node_count,
            desired_size=node_count,
            # EKS requires maxSize >= 1 (NodegroupScalingConfig, EKS API reference); with nothing that scales the
            # group (no Cluster Autoscaler or Karpenter here) desired 0 keeps it at zero nodes.
            max_size=max(node_count, 1),
            subnets=ec2.SubnetSelection(subnets=[self.subnet]),
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref, version=self.launch_template.attr_latest_version_number
            ),
            labels=self.labels,
            # A drain that a PodDisruptionBudget blocks (the job's pods have one: k8s.workload) fails the update
            # instead of terminating the node under the job: "Force the update if any Pod on the existing node group
            # can't be drained due to a Pod disruption budget issue" is what this would turn on
            # (UpdateNodegroupVersion, EKS API reference; ForceUpdateEnabled, AWS::EKS::Nodegroup).
            force_update=False,
            taints=[eks.TaintSpec(key=t.key, value=t.value or None, effect=_TAINT_EFFECTS[t.effect]) for t in taints],
        )
        follow_kubernetes_version(nodegroup, self.kubernetes_version)
        enable_node_repair(nodegroup, node_repair)
        cfn_nodegroup = nodegroup.node.default_child
        assert isinstance(cfn_nodegroup, eks.CfnNodegroup)
        update = gpu_update_config(node_count)
        cfn_nodegroup.update_config = eks.CfnNodegroup.UpdateConfigProperty(
            max_unavailable=int(update["max_unavailable"]), update_strategy=str(update["update_strategy"])
        )
        return nodegroup

    @classmethod
    def from_settings(
        cls, scope: Construct, construct_id: str, settings: Settings, *, cluster: eks.ICluster, vpc: ec2.IVpc
    ) -> EfaGpuNodegroup:
        """The GPU nodes of the project's own app, from the node settings (in gpuAvailabilityZone; when the settings
        were not given it nor the region, in the stack's region: its recorded first AZ where `vpc` has it, else the
        AZ of `vpc`'s first private subnet)."""
        nodes = settings.nodes
        # Checked here first, so that the errors name the settings rather than the props.
        check_root_volume("gpuRootVolumeGib", nodes.gpu_root_volume_gib, settings.workload.dlc_image)
        zone = settings_gpu_zone(settings, Stack.of(scope).region, vpc)
        gpu_subnet(vpc, zone)
        return cls(
            scope,
            construct_id,
            cluster=cluster,
            vpc=vpc,
            instance_type=nodes.gpu_instance,
            node_count=nodes.gpu_node_count,
            availability_zone=zone,
            node_selector=nodes.gpu_node_selector,
            capacity_reservation_id=nodes.capacity_reservation_id,
            capacity_reservation_type=nodes.capacity_reservation_type,
            placement_group=nodes.use_placement_group,
            root_volume_gib=nodes.gpu_root_volume_gib,
            taints=nodes.gpu_node_taints,
            image=settings.workload.dlc_image,
            cluster_name=settings.cluster.cluster_name,
            node_repair=nodes.node_repair,
        )


def gpu_nodes_selector(
    construct: str,
    scope: Construct,
    cluster: eks.ICluster,
    gpu_nodes: EfaGpuNodegroup | Sequence[EfaGpuNodegroup] | None,
    node_selector: Mapping[str, str] | None,
) -> dict[str, str]:
    """The node selector of `construct` (a DaemonSet's construct that serves GPU nodes): the labels `gpu_nodes` share,
    else `node_selector`, else those of the EfaGpuNodegroups of `cluster` built so far, else the default. ValueError
    naming the props when `gpu_nodes` and `node_selector` disagree."""
    groups = [gpu_nodes] if isinstance(gpu_nodes, EfaGpuNodegroup) else list(gpu_nodes or ())
    if groups:
        derived = common_labels(f"{construct} gpu_nodes", (g.node_selector for g in groups))
        if node_selector is not None and dict(node_selector) != derived:
            raise ValueError(
                f"{construct} node_selector {dict(node_selector)!r} disagrees with gpu_nodes' labels "
                f"{derived!r}: leave node_selector out (it comes from gpu_nodes)"
            )
        return derived
    if node_selector is not None:
        check_node_selector(f"{construct} node_selector", node_selector)
        return dict(node_selector)
    built = on_cluster(scope, EfaGpuNodegroup, cluster)
    return (
        common_labels(f"{construct} gpu_nodes", (g.node_selector for g in built))
        if built
        else dict(DEFAULT_GPU_NODE_SELECTOR)
    )


def gpu_nodes_taints(
    construct: str, gpu_nodes: EfaGpuNodegroup | Sequence[EfaGpuNodegroup] | None, taints: Sequence[str] | None
) -> tuple[str, ...]:
    """The taints `construct` (a DaemonSet's construct that serves GPU nodes) tolerates: those of `gpu_nodes` (all of
    them, when several groups), else `taints`, else the default GPU taint. ValueError naming the props when `gpu_nodes`
    and `taints` disagree."""
    groups = [gpu_nodes] if isinstance(gpu_nodes, EfaGpuNodegroup) else list(gpu_nodes or ())
    if groups:
        derived = tuple(dict.fromkeys(t for g in groups for t in g.taints))
        if taints is not None and tuple(taints) != derived:
            raise ValueError(
                f"{construct} taints {list(taints)!r} disagree with gpu_nodes' taints {list(derived)!r}: "
                "leave taints out (they come from gpu_nodes)"
            )
        return derived
    if taints is not None:
        for text in taints:
            parse_taint(text)
        return tuple(taints)
    return DEFAULT_GPU_TAINTS


def unselected_gpu_nodes(
    construct: str, scope: Construct, cluster: eks.ICluster, selector: Mapping[str, str]
) -> list[str]:
    """At synth: an error for each EfaGpuNodegroup of `cluster` in the app whose nodes `selector` does not select."""
    return [
        f"{construct} selects the nodes labelled {dict(selector)!r}, but EfaGpuNodegroup {g.node.path} labels its "
        f"nodes {g.labels!r}: the DaemonSets would never run on them. Pass gpu_nodes=<that EfaGpuNodegroup> "
        "(its labels become the node selector)"
        for g in on_cluster(scope, EfaGpuNodegroup, cluster)
        if not selects(selector, g.labels)
    ]


def settings_gpu_zone(settings: Settings, stack_region: str, vpc: ec2.IVpc) -> str:
    """The GPU AZ of `settings` in a stack of `stack_region` on `vpc`. gpuAvailabilityZone when the settings were
    given it; else a default, which is no choice: what the settings resolve to (the region's first recorded AZ) when
    they were given the region or it is the stack's, else the stack region's first recorded AZ, as long as the VPC has
    a private subnet there (or its zones are not known at synth); else the AZ of the VPC's first private subnet."""
    if "gpuAvailabilityZone" in settings.given_keys:
        return settings.gpu_availability_zone
    region = stack_region
    if "region" in settings.given_keys or Token.is_unresolved(stack_region):
        region = settings.cluster.region
    recorded = regions.AVAILABILITY_ZONES.get(region, ())
    candidate = (
        settings.gpu_availability_zone if region == settings.cluster.region else (recorded[0] if recorded else None)
    )
    known = [
        z
        for z in (s.availability_zone for s in vpc.private_subnets)
        if not Token.is_unresolved(z) and not is_placeholder_zone(z)
    ]
    if candidate is not None and (candidate in known or not known):
        return candidate
    return default_gpu_zone(vpc) if vpc.private_subnets or candidate is None else candidate

"""The EFA GPU node group: launch template with one EFA interface per network card, its security group,
a cluster placement group (or a capacity reservation or Capacity Block), all in one subnet of one AZ."""

from __future__ import annotations

from aws_cdk import Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from ray_efa.core import catalog
from ray_efa.core.scheduling import GPU_NODE_LABELS, GPU_TAINT
from ray_efa.core.settings import Settings
from ray_efa.infra.nag import NODE_ROLE_POLICIES, acknowledge_managed_policies
from ray_efa.infra.network import gpu_subnet
from ray_efa.infra.node_storage import check_root_volume, encrypted_root_volume

__all__ = ["EfaGpuNodegroup", "launch_template_network_interfaces"]

_TAINT_EFFECTS = {
    "NoSchedule": eks.TaintEffect.NO_SCHEDULE,
    "PreferNoSchedule": eks.TaintEffect.PREFER_NO_SCHEDULE,
    "NoExecute": eks.TaintEffect.NO_EXECUTE,
}


def launch_template_network_interfaces(
    instance: catalog.InstanceType, security_group_ids: list[str]
) -> list[ec2.CfnLaunchTemplate.NetworkInterfaceProperty]:
    """The launch template's NetworkInterfaces: the catalog's EFA interfaces, each with every security group.

    Interfaces in a launch template replace the groups EKS would attach, so the cluster security group goes on
    each interface next to the EFA group. On p5/p5e/p5en the secondary cards' interfaces are `efa-only` (no IP
    address), which needs the Amazon VPC CNI v1.18.4 or later on the cluster (see catalog.EFA_ONLY_FAMILIES).
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


class EfaGpuNodegroup(Construct):
    """A managed node group of `gpuNodeCount` x `gpuInstanceType` (AL2023 NVIDIA AMI) with EFA on every network card.

    Nodes are labelled role=gpu-worker and nvidia.com/gpu.present=true and tainted nvidia.com/gpu=true:NoSchedule.
    IMDSv2 is required with a hop limit of 1 (out of pods' reach) and the gp3 root volume is encrypted.

    With `capacityReservationType` capacity-block the node group's capacity type is CAPACITY_BLOCK and the launch
    template targets the block with the capacity-block market type, as the EKS User Guide's "Create a managed node
    group with Capacity Blocks for ML" requires (a custom launch template with InstanceMarketOptions.MarketType
    capacity-block, the reservation id and the instance type). Instances launch only while the block is active, and
    EKS asks for desired size 0 before a node group of a Capacity Block is upgraded.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, settings: Settings, cluster: eks.ICluster, vpc: ec2.IVpc
    ) -> None:
        super().__init__(scope, construct_id)
        nodes = settings.nodes
        instance = nodes.gpu_instance
        name = f"{settings.cluster.cluster_name}-gpu"
        # Validate before creating any resource: the subnet lookup raises for an AZ the VPC does not cover.
        self.subnet = gpu_subnet(vpc, settings.gpu_availability_zone)
        check_root_volume("gpuRootVolumeGib", nodes.gpu_root_volume_gib, settings.workload.dlc_image)  # Ray workers

        self.efa_security_group = ec2.SecurityGroup(
            self, "EfaSecurityGroup", vpc=vpc, allow_all_outbound=False,
            description=f"EFA traffic between the GPU nodes of {settings.cluster.cluster_name}: all traffic to and from itself",
        )
        # EFA's SRD traffic is not TCP/UDP: it needs every protocol, in and out, between members of this group.
        self.efa_security_group.add_ingress_rule(self.efa_security_group, ec2.Port.all_traffic(), "EFA from GPU nodes")
        self.efa_security_group.add_egress_rule(self.efa_security_group, ec2.Port.all_traffic(), "EFA to GPU nodes")

        # A cluster placement group packs the nodes close together; with a capacity reservation the reservation
        # decides where instances land, and a forced placement group could leave reserved capacity unused.
        self.placement_group: ec2.PlacementGroup | None = None
        placement = None
        if nodes.use_placement_group:
            self.placement_group = ec2.PlacementGroup(self, "PlacementGroup", strategy=ec2.PlacementGroupStrategy.CLUSTER)
            placement = ec2.CfnLaunchTemplate.PlacementProperty(group_name=self.placement_group.placement_group_name)
        reservation = None
        if nodes.capacity_reservation_id:
            reservation = ec2.CfnLaunchTemplate.CapacityReservationSpecificationProperty(
                capacity_reservation_target=ec2.CfnLaunchTemplate.CapacityReservationTargetProperty(
                    capacity_reservation_id=nodes.capacity_reservation_id
                )
            )
        market = None
        if nodes.capacity_block:
            market = ec2.CfnLaunchTemplate.InstanceMarketOptionsProperty(market_type="capacity-block")

        security_group_ids = [self.efa_security_group.security_group_id, cluster.cluster_security_group_id]
        self.launch_template = ec2.CfnLaunchTemplate(
            self,
            "LaunchTemplate",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                instance_type=nodes.gpu_instance_type,
                network_interfaces=launch_template_network_interfaces(instance, security_group_ids),
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                    http_tokens="required",
                    # 1 hop: IMDS answers the node and host-network pods only, so no other pod can take the node
                    # role's credentials (EKS best practices). Nothing the stack runs in a pod network needs IMDS:
                    # the Ray pods get credentials from Pod Identity and the region from their env; see the README.
                    http_put_response_hop_limit=1,
                    http_endpoint="enabled",
                ),
                # Above gp3's baseline: the image's layers unpack faster, so a new node is ready sooner.
                block_device_mappings=[encrypted_root_volume(nodes.gpu_root_volume_gib, iops=6000, throughput=500)],
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

        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster,
            # The AZ in the name: moving the GPU AZ replaces the node group (its Subnets need a new one), and
            # CloudFormation cannot replace a resource whose custom name stays the same.
            nodegroup_name=f"{name}-{settings.gpu_availability_zone.rsplit('-', 1)[-1]}",
            # The instance type is in the launch template: aws-cdk-lib's own GPU-family table does not know every
            # EFA GPU type (p5 is missing), and would reject the NVIDIA AMI for it.
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_NVIDIA,
            capacity_type=eks.CapacityType.CAPACITY_BLOCK if nodes.capacity_block else eks.CapacityType.ON_DEMAND,
            min_size=nodes.gpu_node_count,
            desired_size=nodes.gpu_node_count,
            max_size=nodes.gpu_node_count,
            subnets=ec2.SubnetSelection(subnets=[self.subnet]),
            launch_template_spec=eks.LaunchTemplateSpec(
                id=self.launch_template.ref, version=self.launch_template.attr_latest_version_number
            ),
            labels=dict(GPU_NODE_LABELS),
            taints=[eks.TaintSpec(key=GPU_TAINT.key, value=GPU_TAINT.value, effect=_TAINT_EFFECTS[GPU_TAINT.effect])],
        )
        Tags.of(self).add("ray-efa/instance-type", nodes.gpu_instance_type)
        acknowledge_managed_policies(
            self.nodegroup.role, NODE_ROLE_POLICIES,
            "EKS requires these AWS managed policies on managed node group roles (worker node, VPC CNI, ECR pulls).",
        )


"""Root volumes of the node groups that run the training image, and the system node group's launch template."""

from __future__ import annotations

import math
from dataclasses import dataclass

from aws_cdk import aws_ec2 as ec2
from constructs import Construct

from ray_efa.core.image import KNOWN_IMAGES, image_without_digest
from ray_efa.core.settings import Problem, SettingsError

__all__ = [
    "SystemNodeLaunchTemplate",
    "encrypted_root_volume",
    "check_root_volume",
    "ContainerImage",
    "CONTAINER_IMAGES",
    "min_root_volume_gib",
    "root_volume_problem",
]


# Kept here, not in core/catalog/__init__.py: the training job ships core/ in a ConfigMap with a size limit, and never needs this.
@dataclass(frozen=True, kw_only=True, slots=True)
class ContainerImage:
    """What a node's root volume must hold for one container image."""

    unpacked_gib: float
    """Size of the image's layers once unpacked on the node (what `crictl images` / `docker images` show)."""
    source: str
    """Where the number comes from."""


_DLC_SIZE_SOURCE = (
    "estimate: AWS publishes no size for ray:train-ml-cuda-v1.1; the PyTorch 2.0 training GPU DLC, the same "
    "CUDA/NCCL/EFA stack without Ray, flash-attn, Transformer Engine and DeepSpeed, measured 20,575 MB in the DLC "
    "build's image-size check (aws/deep-learning-containers PR #3270, 2023-08); this image carries more on CUDA 13. "
    "Replace it with `crictl images` on a node once measured."
)
CONTAINER_IMAGES: dict[str, ContainerImage] = {
    image: ContainerImage(unpacked_gib=30.0, source=_DLC_SIZE_SOURCE) for image in KNOWN_IMAGES
}
"""Images whose size we know (the AWS Ray Train Deep Learning Container tags); others are not checked."""

# What a node's root volume holds besides the image: the AL2023 EKS AMI (OS, kubelet, containerd, the pause and
# add-on images, logs). During a pull containerd keeps the compressed layers next to the unpacked ones; compressed
# layers of these CUDA images are about half their unpacked size. The kubelet's default hard eviction threshold
# imagefs.available<15% must not trigger once the image is in place.
_NODE_BASE_GIB = 10
_PULL_OVERHEAD = 0.5
_EVICTION_FREE_FRACTION = 0.15


def min_root_volume_gib(image: str) -> int | None:
    """Smallest root volume (GiB) on which a node can pull and run `image`, or None for an image of unknown size."""
    known = CONTAINER_IMAGES.get(image_without_digest(image))  # a pinned digest of a known tag: that tag's size
    if known is None:
        return None
    needed = _NODE_BASE_GIB + known.unpacked_gib * (1 + _PULL_OVERHEAD)
    return math.ceil(needed / (1 - _EVICTION_FREE_FRACTION))


def root_volume_problem(image: str, volume_gib: int) -> str | None:
    """Why a root volume of `volume_gib` cannot hold `image` on a node (naming the minimum), or None when it can."""
    minimum = min_root_volume_gib(image)
    if minimum is None or volume_gib >= minimum:
        return None
    return (
        f"must be at least {minimum} GiB to pull and run {image} (about {CONTAINER_IMAGES[image_without_digest(image)].unpacked_gib:g} GiB "
        f"unpacked, its compressed layers during the pull, the OS, and the kubelet's 15% image-disk eviction margin)"
    )


def encrypted_root_volume(
    size_gib: int, *, iops: int | None = None, throughput: int | None = None
) -> ec2.CfnLaunchTemplate.BlockDeviceMappingProperty:
    """The AL2023 EKS AMIs' root device (/dev/xvda) as an encrypted gp3 volume of `size_gib` GiB.

    gp3 without iops/throughput gets its baseline, 3,000 IOPS and 125 MiB/s; encryption uses the account's default
    EBS key (aws/ebs) unless the account set another default.
    """
    return ec2.CfnLaunchTemplate.BlockDeviceMappingProperty(
        device_name="/dev/xvda",
        ebs=ec2.CfnLaunchTemplate.EbsProperty(
            volume_size=size_gib,
            volume_type="gp3",
            encrypted=True,
            delete_on_termination=True,
            iops=iops,
            throughput=throughput,
        ),
    )


def check_root_volume(key: str, size_gib: int, image: str) -> None:
    """Raise SettingsError (naming `key`, the size and the minimum) when a node's root volume cannot hold `image`.

    Node groups call this for the image their pods run: the system nodes (Ray head and job submitter) and the GPU
    nodes (Ray workers). Images not in CONTAINER_IMAGES pass unchecked.
    """
    problem = root_volume_problem(image, size_gib)
    if problem:
        raise SettingsError([Problem(key, size_gib, problem)])


class SystemNodeLaunchTemplate(Construct):
    """The launch template of the system node group: an encrypted gp3 root volume of `systemRootVolumeGib` and
    IMDSv2 with a hop limit of 1.

    Why hop limit 1 is safe here: nothing on the system nodes reads instance metadata from a pod network namespace.
    The KubeRay operator talks only to the Kubernetes API; the Ray head and the job submitter get AWS access (the
    checkpoint bucket) from EKS Pod Identity, whose agent answers on a link-local address of the node, not from the
    node role; the Pod Identity agent and the VPC CNI (aws-node) run with hostNetwork, where IMDS is one hop away,
    and kube-proxy needs no AWS access. A pod that tried to use the node role would get no answer: that is the point.
    With the default (EKS's own launch template, hop limit 2) any pod could take the node role's credentials.
    """

    def __init__(self, scope: Construct, construct_id: str, *, root_volume_gib: int, name: str) -> None:
        super().__init__(scope, construct_id)
        self.launch_template: ec2.CfnLaunchTemplate = ec2.CfnLaunchTemplate(
            self,
            "Resource",
            launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
                # No instance type, AMI or user data: the node group sets the type, EKS picks and bootstraps the AMI.
                block_device_mappings=[encrypted_root_volume(root_volume_gib)],
                metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                    http_endpoint="enabled",
                    http_tokens="required",
                    http_put_response_hop_limit=1,
                ),
                tag_specifications=[
                    ec2.CfnLaunchTemplate.TagSpecificationProperty(
                        resource_type="instance", tags=[{"key": "Name", "value": name}]
                    )
                ],
            ),
        )

    @property
    def launch_template_id(self) -> str:
        return self.launch_template.ref

    @property
    def latest_version(self) -> str:
        """The latest version: a changed volume size makes a new version, which EKS rolls out node by node."""
        return self.launch_template.attr_latest_version_number

"""Availability Zone names of the regions that offer EFA GPU instances.

The stack names its AZs explicitly (instead of asking AWS at synth time), so that `cdk synth` needs no
credentials and gives real AZ names. AZ *names* map to different physical zones in different accounts, but the
set of names per region is the same; `ray-efa capacity` tells which of them offer the GPU type in your account.
Source: `aws ec2 describe-availability-zones` per region (zone type availability-zone, opt-in not required).
"""

from __future__ import annotations

import re

__all__ = ["REGION_PATTERN", "AVAILABILITY_ZONES", "availability_zones", "is_valid_region"]

REGION_PATTERN = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")

AVAILABILITY_ZONES: dict[str, tuple[str, ...]] = {
    "us-east-1": ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d", "us-east-1e", "us-east-1f"),
    "us-east-2": ("us-east-2a", "us-east-2b", "us-east-2c"),
    "us-west-1": ("us-west-1a", "us-west-1c"),
    "us-west-2": ("us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d"),
    "ca-central-1": ("ca-central-1a", "ca-central-1b", "ca-central-1d"),
    "eu-central-1": ("eu-central-1a", "eu-central-1b", "eu-central-1c"),
    "eu-west-1": ("eu-west-1a", "eu-west-1b", "eu-west-1c"),
    "eu-west-2": ("eu-west-2a", "eu-west-2b", "eu-west-2c"),
    "eu-north-1": ("eu-north-1a", "eu-north-1b", "eu-north-1c"),
    "ap-northeast-1": ("ap-northeast-1a", "ap-northeast-1c", "ap-northeast-1d"),
    "ap-northeast-2": ("ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c", "ap-northeast-2d"),
    "ap-south-1": ("ap-south-1a", "ap-south-1b", "ap-south-1c"),
    "ap-southeast-1": ("ap-southeast-1a", "ap-southeast-1b", "ap-southeast-1c"),
    "ap-southeast-2": ("ap-southeast-2a", "ap-southeast-2b", "ap-southeast-2c"),
    "sa-east-1": ("sa-east-1a", "sa-east-1b", "sa-east-1c"),
}


def is_valid_region(region: str) -> bool:
    return bool(REGION_PATTERN.match(region))


def availability_zones(region: str) -> tuple[str, ...]:
    """The AZ names of a region; raises KeyError for a region this table does not list."""
    return AVAILABILITY_ZONES[region]

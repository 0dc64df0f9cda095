"""The container image the Ray head and workers run: the one place the project names it.

AWS's Ray Train Deep Learning Container. Its tags move: AWS re-publishes `train-ml-cuda-v1.1` (and the floating
`train-ml-cuda`, `-v1`, `-v1.1.0`) with patched builds, so a node that pulls later may run other bits than the one
that pulled first (the maintainers' reference notes, outside the repository). Only a digest is immutable: `dlcImage` takes
`<repository>:<tag>@sha256:<digest>` (the tag then only documents; containerd pulls by digest), and docs/changes.md says
how to read the digest of the tag you tested and how to move it. No digest of this release is recorded here (none was
read from the registry on this machine): DLC_IMAGE.digest is None until one is, and synth says the image floats.

What runs inside matters beyond Ray: rayVersion must equal the image's Ray (core.settings), and code that depends on
the exact PyTorch (a communication hook proven on specific torch versions) reads DLC_IMAGE.torch_version.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DlcImage", "DLC_IMAGE", "KNOWN_IMAGES", "image_without_digest", "image_digest"]

_DIGEST = "@sha256:"


@dataclass(frozen=True, kw_only=True, slots=True)
class DlcImage:
    """A Deep Learning Container release: where it is, the tags that name it, what it holds."""

    repository: str
    tag: str
    """The release's tag (the default's)."""
    same_release_tags: tuple[str, ...] = ()
    """Other tags AWS publishes for the same release (they float as the release's own tag does)."""
    digest: str | None = None
    """sha256:... of the release as tested; None where none is recorded."""
    ray_version: str
    torch_version: str
    cuda_version: str
    nccl_version: str

    @property
    def reference(self) -> str:
        """repository:tag, with @digest when one is recorded: the dlcImage default."""
        return f"{self.repository}:{self.tag}" + (f"@{self.digest}" if self.digest else "")

    @property
    def names(self) -> tuple[str, ...]:
        """repository:tag for every tag of the release."""
        return tuple(f"{self.repository}:{tag}" for tag in (self.tag, *self.same_release_tags))


DLC_IMAGE = DlcImage(
    repository="public.ecr.aws/deep-learning-containers/ray",
    tag="train-ml-cuda-v1.1",
    same_release_tags=("train-ml-cuda-v1.1.0",),
    digest=None,
    # the release of 2026-09-01 (its versions as the image reports them; the maintainers' reference notes)
    ray_version="2.58.0",
    torch_version="2.13.0",
    cuda_version="13.0.2",
    nccl_version="2.29.7",
)
"""The image of the project's default settings (dlcImage)."""

KNOWN_IMAGES: dict[str, DlcImage] = dict.fromkeys(DLC_IMAGE.names, DLC_IMAGE)
"""repository:tag -> the release it names, for every image whose contents the project knows."""


def image_without_digest(reference: str) -> str:
    """`reference` without its @sha256:... (what the image's tag names)."""
    return reference.split(_DIGEST, 1)[0]


def image_digest(reference: str) -> str | None:
    """The sha256:... a reference pins, or None for one that names a tag alone (and so floats)."""
    _, found, digest = reference.partition(_DIGEST)
    return f"sha256:{digest}" if found else None

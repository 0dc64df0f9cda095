"""core.image: the one place the image is named, and a digest pin that keeps every check of its tag."""

from __future__ import annotations

import pytest

from ray_efa.core.image import DLC_IMAGE, image_digest, image_without_digest
from ray_efa.core.settings import Settings, SettingsError

DIGEST = "sha256:" + "0123456789abcdef" * 4
PINNED = f"{DLC_IMAGE.repository}:{DLC_IMAGE.tag}@{DIGEST}"


def test_the_settings_default_is_the_image_of_core_image():
    settings = Settings()
    assert settings.workload.dlc_image == DLC_IMAGE.reference
    assert settings.workload.ray_version == DLC_IMAGE.ray_version


def test_a_reference_splits_into_what_the_tag_names_and_the_digest_that_pins_it():
    assert image_without_digest(PINNED) == f"{DLC_IMAGE.repository}:{DLC_IMAGE.tag}"
    assert image_digest(PINNED) == DIGEST
    assert image_digest(f"{DLC_IMAGE.repository}:{DLC_IMAGE.tag}") is None


def test_a_pinned_digest_of_a_known_tag_keeps_the_tags_ray_check():
    # GIVEN dlcImage pinned by digest WHEN rayVersion is not the image's Ray THEN the settings say so, as for the tag
    with pytest.raises(SettingsError) as error:
        Settings.from_context({"dlcImage": PINNED, "rayVersion": "2.57.0"})
    assert error.value.problems[0].key == "rayVersion"
    assert Settings.from_context({"dlcImage": PINNED}).workload.dlc_image == PINNED


def test_a_pinned_digest_of_a_known_tag_keeps_the_root_volume_check():
    from ray_efa.infra.node_storage import min_root_volume_gib

    assert min_root_volume_gib(PINNED) == min_root_volume_gib(DLC_IMAGE.reference) is not None

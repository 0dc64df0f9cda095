"""The ConfigMaps that ship the training code and settings.json to the Ray pods of one RayCluster or RayJob."""

from __future__ import annotations

from typing import Any

from ray_efa.k8s._private import api_object, labels
from ray_efa.k8s.code_bundle import CodeBundle
from ray_efa.k8s.names import settings_config_map_name

__all__ = ["CodeConfigMap"]


class CodeConfigMap:
    """The ConfigMaps holding a CodeBundle (CodeBundle.config_maps): one per shipped package, the first named `name`,
    then one with settings.json alone. The pods mount them all as one projected volume (see k8s.cluster_spec).

    With `archive_uri` (the code zipped in S3, CodeBundle.write_tree's folder) only the settings ConfigMap is made: the
    pods' init container unpacks the zip into k8s.names.APP_CODE_PATH.

    Raises ManifestError when any of them would not fit a ConfigMap or a kubectl apply.
    """

    def __init__(self, *, name: str, namespace: str, bundle: CodeBundle, archive_uri: str | None = None):
        """
        :param name: the first code ConfigMap's name (k8s.names.code_config_map_name of its owner); the settings one is
            k8s.names.settings_config_map_name of it.
        :param namespace: where the pods that mount it run.
        :param bundle: the files, settings.json included.
        :param archive_uri: s3://bucket/key.zip of the bundle's code without settings.json (a token is fine).
            @default - the code ships in ConfigMaps too
        """
        self.archive_uri: str | None = archive_uri
        self.mounted: CodeBundle = bundle.settings_only() if archive_uri is not None else bundle
        """What the ConfigMaps hold, and the pods mount at k8s.names.CODE_MOUNT_PATH."""
        parts = self.mounted.config_maps(name)
        for part_name, part in parts:
            part.check_fits(part_name)
        self.name = name
        self.settings_name: str = settings_config_map_name(name)
        self.bundle = bundle
        self.objects: list[dict[str, Any]] = [
            api_object(
                api_version="v1",
                kind="ConfigMap",
                name=part_name,
                namespace=namespace,
                object_labels=labels(part_name, "settings" if part_name == self.settings_name else "code"),
                body={"data": part.data},
            )
            for part_name, part in parts
        ]
        """The v1 ConfigMaps, the settings one last."""

"""The bottom layer: settings, the instance catalog, model presets and region facts.

Pure Python with no aws_cdk, cdk8s or torch imports: infra/, k8s/ and training/ all build on it, and the training
job imports it inside the Ray Train container.
"""

if __name__ != "ray_efa.core":  # one name per module (ray_efa/__init__.py): never also `core`
    raise ImportError(f"{__name__}: this folder is the package ray_efa.core; import it as ray_efa.core")

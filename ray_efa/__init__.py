"""ray-efa-stack: distributed PyTorch training from one machine to a multi-node EFA GPU cluster on AWS.

Everything the project installs lives under this one namespace, so that it sits beside a platform repository's own
`infra` or `core` packages without a clash:

    ray_efa.core       settings, instance catalog, model presets, memory planner     (pure Python)
    ray_efa.infra      AWS CDK constructs and stacks
    ray_efa.k8s        cdk8s charts of the KubeRay workload
    ray_efa.training   the Ray Train function, driver and transport gate            (runs in the container)
    ray_efa.ops        plan, capacity, verify, compare
    ray_efa.cli        the `ray-efa` command

In the repository the subpackages are its top-level folders (core/, infra/, ...): this folder holds a relative link to
each (ray_efa/core -> ../core), which Python, setuptools (the wheel), pyright and import-linter all follow
(docs/development.md, "Layout"). This module imports nothing, so that `import ray_efa.training` in the container stays
light.
"""

__version__ = "0.1.0"

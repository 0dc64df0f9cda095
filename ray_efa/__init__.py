"""ray-efa-stack: distributed PyTorch training from one machine to a multi-node EFA GPU cluster on AWS.

Everything the project installs lives under this one namespace, so that it sits beside a platform repository's own
`infra` or `core` packages without a clash:

    ray_efa.core       settings, instance catalog, model presets, memory planner     (pure Python)
    ray_efa.infra      AWS CDK constructs and stacks
    ray_efa.k8s        cdk8s charts of the KubeRay workload
    ray_efa.training   the Ray Train function, driver and transport gate            (runs in the container)
    ray_efa.ops        plan, capacity, verify, compare
    ray_efa.cli        the `ray-efa` command

In the repository the subpackages are its top-level folders (core/, infra/, ...), mapped into ray_efa by pyproject's
[tool.setuptools.package-dir]: the wheel holds them under ray_efa/. In a checkout this folder holds only this file, and
the lines below make the repository's folders the subpackages, so that a checkout imports as itself with no install
(`PYTHONPATH=<checkout>`, or any command run from its root) and a new module is importable at once. Each folder's
__init__ refuses any other name (`import core` from the root), so no module ever loads twice under two names.
This module imports nothing else, so that `import ray_efa.training` in the container stays light.
"""

import os as _os

__version__ = "0.1.0"

# A checkout (this file's real folder has no subpackage beside it, the folder above holds core/): the subpackages are
# the folders above. An install (the wheel, a pod's code bundle) has them beside this file and changes nothing.
_here = _os.path.dirname(_os.path.realpath(__file__))
if not _os.path.isdir(_os.path.join(_here, "core")) and _os.path.isfile(
        _os.path.join(_here, _os.pardir, "core", "__init__.py")):
    __path__.insert(0, _os.path.dirname(_here))

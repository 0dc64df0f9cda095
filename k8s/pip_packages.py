"""Extra Python packages on the Ray pods (pipPackages, and torchao when the job trains in fp8): installed by an init
container of every Ray pod into an emptyDir on PYTHONPATH, never through Ray's runtime_env pip.

Why not runtime_env pip: Ray builds a virtualenv for it, and when the interpreter already runs inside one (the Deep
Learning Container's /opt/venv) it clones that whole environment with shutil.copytree (Ray 2.58:
ray/_private/runtime_env/virtualenv_utils.py, _clonevirtualenv.py), torch with its CUDA wheels, Transformer Engine,
flash-attn and DeepSpeed included: gigabytes copied on every node for every job, against Ray's runtime_env setup
timeout and the job's deadline, on the head's disk too. Measured here (docs/BENCHMARKS.md): Ray's clone of a 2.8 GB
venv took 68 s and wrote 2.2 GB; the route below installed torchao 0.18.0 in 6.5 s and 28 MB.

The route: the image's own pip with `--prefix` into the emptyDir. Unlike `--target` (which sets pip's
ignore_installed and would put a second torch or numpy in front of the image's), `--prefix` skips every requirement
the image already satisfies, so only what is missing lands there; a constraints file of the image's own `pip freeze`
makes a package that needs another version of something the image has fail the init container with pip's resolver
message, instead of shadowing the image's copy. Then the prefix's site-packages is moved to PACKAGES_SITE_PATH, a
fixed path on PYTHONPATH whatever the image's Python version.
"""

from __future__ import annotations

from ray_efa.core.pod_env import TORCHAO_VERSION  # precision fp8's torchao (float8 training); the image has none
from ray_efa.core.settings import Settings

__all__ = ["PACKAGES_PATH", "PACKAGES_SITE_PATH", "INSTALL_SCRIPT", "TORCHAO_VERSION", "pod_packages", "runs_fp8"]

PACKAGES_PATH = "/opt/ray-efa/packages"
"""The emptyDir the init container installs into."""
PACKAGES_SITE_PATH = f"{PACKAGES_PATH}/site"
"""The installed packages' import root, on every Ray container's PYTHONPATH when there are any."""

INSTALL_SCRIPT = (
    "import os, shutil, subprocess, sys, sysconfig, tempfile\n"
    "dest, packages = sys.argv[1], sys.argv[2:]\n"
    "prefix = tempfile.mkdtemp(prefix='prefix-', dir=dest)\n"
    "frozen = subprocess.run([sys.executable, '-m', 'pip', 'freeze', '--all'], check=True, capture_output=True,\n"
    "                        text=True).stdout\n"
    "constraints = os.path.join(dest, 'image-constraints.txt')\n"
    "with open(constraints, 'w') as f:\n"
    "    f.write(''.join(line + '\\n' for line in frozen.splitlines() if '==' in line))\n"
    "pip = [sys.executable, '-m', 'pip', 'install', '--no-cache-dir', '--disable-pip-version-check',\n"
    "       '--no-warn-script-location', '--prefix', prefix, '--constraint', constraints, *packages]\n"
    "if subprocess.run(pip).returncode:\n"
    "    sys.exit('ray-efa: pip could not install ' + ' '.join(packages) + ' beside the image (its packages are '\n"
    "             'pinned by ' + constraints + '): see pip above; fix the pipPackages setting')\n"
    "site = os.path.join(dest, 'site')\n"
    "os.makedirs(site, exist_ok=True)\n"
    "for key in ('purelib', 'platlib'):\n"
    "    path = sysconfig.get_path(key, vars={'base': prefix, 'platbase': prefix})\n"
    "    for name in os.listdir(path) if os.path.isdir(path) else ():\n"
    "        shutil.move(os.path.join(path, name), os.path.join(site, name))\n"
    "shutil.rmtree(prefix)\n"
    "print('ray-efa: installed', ' '.join(packages), 'into', site, '(what the image lacked):',\n"
    "      ', '.join(sorted(n for n in os.listdir(site) if n.endswith('.dist-info'))) or 'nothing', flush=True)\n"
)
"""What the init container runs: `python -c INSTALL_SCRIPT PACKAGES_PATH PACKAGE...` (see the module docstring)."""


def runs_fp8(settings: Settings) -> bool:
    """Whether the job trains in fp8: precision as set, or as core.strategy decides auto (the job decides the same)."""
    if settings.training.precision != "auto" or settings.nodes.scaled_to_zero:
        return settings.training.precision == "fp8"
    from ray_efa.core.strategy import resolve

    return resolve(settings).training.precision == "fp8"


def pod_packages(settings: Settings) -> tuple[str, ...]:
    """The pip requirements the Ray pods install: pipPackages, and torchao at TORCHAO_VERSION when the built-in train
    function trains in fp8 (unless pipPackages names a torchao of its own)."""
    packages = list(settings.workload.pip_packages)
    # the built-in train function converts its linears with torchao; a function of your own brings what it uses
    if settings.training.builtin and runs_fp8(settings) and not any(_project_name(p) == "torchao" for p in packages):
        packages.append(f"torchao=={TORCHAO_VERSION}")
    return tuple(packages)


def _project_name(requirement: str) -> str:
    """A requirement's project name, normalized: "TorchAO[x]>=0.1" -> "torchao"."""
    name = requirement.strip()
    for stop in "[<>=!~; @":
        name = name.split(stop, 1)[0]
    return name.lower().replace("_", "-").replace(".", "-")

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
the image already satisfies, so only what is missing lands there; a constraints file that pins every distribution the
image's Python sees (importlib.metadata, so those installed from local wheel files too, which `pip freeze` prints as
`name @ file://...`, not `==`: the DLC's flash-attn and Transformer Engine) makes a package that needs another version
of something the image has fail the init container with pip's resolver message, instead of shadowing the image's copy.
Only wheels (`--only-binary=:all:`): no sdist is compiled inside the init container (flash-attn's would try, for an
hour, with no CUDA toolkit). A package whose top-level names are standard library modules is refused, nothing installed: PYTHONPATH comes before the standard library; a stray top-level
`test` suite is left out instead (STRAY_TEST_PACKAGES). Then the prefix's
site-packages is moved to PACKAGES_SITE_PATH, a fixed path on PYTHONPATH whatever the image's Python version.
"""

from __future__ import annotations

from ray_efa.core.pod_env import TORCHAO_VERSION  # precision fp8's torchao (float8 training); the image has none
from ray_efa.core.settings import Settings

__all__ = ["PACKAGES_PATH", "PACKAGES_SITE_PATH", "INSTALL_SCRIPT", "TORCHAO_VERSION", "pod_packages", "runs_fp8"]

PACKAGES_PATH = "/opt/ray-efa/packages"
"""The emptyDir the init container installs into."""
PACKAGES_SITE_PATH = f"{PACKAGES_PATH}/site"
"""The installed packages' import root, on every Ray container's PYTHONPATH when there are any."""

STRAY_TEST_PACKAGES = ("test",)
"""Top-level packages a wheel ships by mistake (torchao 0.18.0's `test`: its own test suite) under the name of a
standard library module (CPython's regression tests): the install leaves them out, saying so, rather than refusing
the package; any other standard library name refuses it."""

INSTALL_SCRIPT = (
    "import importlib.metadata, os, shutil, subprocess, sys, sysconfig, tempfile\n"
    f"STRAY_TESTS = {STRAY_TEST_PACKAGES!r}\n"
    "dest, packages = sys.argv[1], sys.argv[2:]\n"
    "prefix = tempfile.mkdtemp(prefix='prefix-', dir=dest)\n"
    "pins = {}\n"
    "for dist in importlib.metadata.distributions():  # sys.path order: the copy Python imports comes first\n"
    "    name = dist.metadata['Name']\n"
    "    if name and dist.version:\n"
    "        pins.setdefault(name.lower().replace('_', '-').replace('.', '-'), name + '==' + dist.version)\n"
    "constraints = os.path.join(dest, 'image-constraints.txt')\n"
    "with open(constraints, 'w') as f:\n"
    "    f.write(''.join(pin + '\\n' for pin in sorted(pins.values())))\n"
    "pip = [sys.executable, '-m', 'pip', 'install', '--no-cache-dir', '--disable-pip-version-check',\n"
    "       '--no-warn-script-location', '--only-binary=:all:', '--prefix', prefix, '--constraint', constraints,\n"
    "       *packages]\n"
    "if subprocess.run(pip).returncode:\n"
    "    sys.exit('ray-efa: pip could not install ' + ' '.join(packages) + ' beside the image (its packages are '\n"
    "             'pinned by ' + constraints + ', and only wheels are installed): see pip above; fix the pipPackages '\n"
    "             'setting')\n"
    "paths = {sysconfig.get_path(k, vars={'base': prefix, 'platbase': prefix}) for k in ('purelib', 'platlib')}\n"
    "names = [(path, name) for path in sorted(paths) if os.path.isdir(path) for name in os.listdir(path)]\n"
    "stray = [(path, n) for path, n in names if n in STRAY_TESTS]\n"
    "for path, name in stray:  # a wheel's own test suite: nothing imports it from here\n"
    "    print('ray-efa: left out top-level', name, '(a test suite that would shadow the standard library module)')\n"
    "    shutil.rmtree(os.path.join(path, name), ignore_errors=True)\n"
    "names = [entry for entry in names if entry not in stray]\n"
    "shadow = sorted({n.split('.')[0] for _, n in names if not n.endswith(('.dist-info', '.pth'))}\n"
    "                & set(sys.stdlib_module_names))\n"
    "if shadow:\n"
    "    shutil.rmtree(prefix)\n"
    "    sys.exit('ray-efa: ' + ' '.join(packages) + ' would install top-level ' + ', '.join(shadow) + ', which '\n"
    "             'shadows the standard library module of that name on PYTHONPATH; nothing was installed: fix the '\n"
    "             'pipPackages setting')\n"
    "site = os.path.join(dest, 'site')\n"
    "os.makedirs(site, exist_ok=True)\n"
    "for path, name in names:\n"
    "    shutil.move(os.path.join(path, name), os.path.join(site, name))\n"
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

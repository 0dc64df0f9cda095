"""Extra packages reach the Ray pods through an init container, never Ray's runtime_env pip (k8s.pip_packages).

The manifests: which pods install what, where, and that PYTHONPATH finds it. The install script itself runs for real
here, with this venv's Python and pip standing in for the image's, against a local wheelhouse (PIP_NO_INDEX,
PIP_FIND_LINKS: pip's own environment options, so no index is reached): what the "image" already has is not
installed again, what it lacks is, and a package that needs another version of an image package fails the init
container with a message naming the setting instead of shadowing the image's copy.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ray_efa.core.pod_env import TORCHAO_VERSION
from ray_efa.k8s.pip_packages import INSTALL_SCRIPT, PACKAGES_PATH, PACKAGES_SITE_PATH, pod_packages
from tests.k8s.conftest import BASE, container, env, synthesize
from tests.k8s.test_user_code import OWN

_INIT = "install-packages"


def _ray_pods(synth):
    """(where, pod template) of every Ray pod (heads and workers; the submitter runs no Python of ours)."""
    return [(where, t) for where, t in synth.pod_templates() if "submitter" not in where]


def _installs(template) -> list[str] | None:
    """The packages the pod's init container installs, or None without one."""
    inits = [c for c in template["spec"].get("initContainers", []) if c["name"] == _INIT]
    if not inits:
        return None
    (init,) = inits
    assert init["command"][:4] == ["python", "-c", INSTALL_SCRIPT, PACKAGES_PATH]
    assert {"name": "packages", "mountPath": PACKAGES_PATH} in init["volumeMounts"]
    assert init["securityContext"]["capabilities"]["drop"] == ["ALL"]
    return init["command"][4:]


def test_every_ray_pod_installs_pip_packages_and_imports_them_after_the_code(default_synth):
    pods = _ray_pods(default_synth)
    assert len(pods) == 6  # head and worker of the RayCluster and of each RayJob's own cluster
    for where, template in pods:
        installs = _installs(template)
        assert installs is not None and installs[:2] == ["einops==0.8.1", "tabulate==0.9.0"], where
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["packages"] == {"name": "packages", "emptyDir": {}}
        assert {"name": "packages", "mountPath": PACKAGES_PATH, "readOnly": True} in container(template)["volumeMounts"]
        # last on the path: only what the image lacks is there, and the project's code comes first
        assert env(template)["PYTHONPATH"].split(":")[-1] == PACKAGES_SITE_PATH, where


def test_fp8_adds_the_pinned_torchao_unless_pip_packages_names_one():
    synth = synthesize(BASE.replace(precision="fp8"))
    for where, template in _ray_pods(synth):
        assert _installs(template) == ["einops==0.8.1", "tabulate==0.9.0", f"torchao=={TORCHAO_VERSION}"], where
    own = BASE.replace(precision="fp8", pipPackages="TorchAO[extra]>=0.17")
    assert pod_packages(own) == ("TorchAO[extra]>=0.17",)
    assert pod_packages(BASE.replace(precision="bf16")) == ("einops==0.8.1", "tabulate==0.9.0")
    # a train function of your own brings what it imports (pipPackages): torchao is the built-in's
    assert pod_packages(OWN.replace(precision="fp8")) == ("einops==0.8.1", "tabulate==0.9.0")


def test_without_packages_no_pod_gets_an_init_container_or_the_path():
    synth = synthesize(BASE.replace(pipPackages="", precision="bf16"))
    for where, template in _ray_pods(synth):
        assert _installs(template) is None, where
        assert "packages" not in {v["name"] for v in template["spec"]["volumes"]}
        assert PACKAGES_SITE_PATH not in env(template)["PYTHONPATH"]


# --- the install script, run for real ---


def _wheel(
    folder: Path, name: str, requires: tuple[str, ...] = (), version: str = "1.0", modules: dict[str, str] | None = None
) -> Path:
    """A minimal pure-Python wheel of `name` `version`: `modules` (path -> text), by default one module, `name`, whose
    VALUE is "<name> <version>"."""
    dist = f"{name}-{version}.dist-info"
    files = {
        **(modules if modules is not None else {f"{name}.py": f"VALUE = '{name} {version}'\n"}),
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: {}\nVersion: {}\n{}".format(
            name, version, "".join(f"Requires-Dist: {r}\n" for r in requires)
        ),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for file, text in files.items():
            whl.writestr(file, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{file},sha256={digest},{len(text.encode())}")
        whl.writestr(f"{dist}/RECORD", "\n".join([*record, f"{dist}/RECORD,,"]) + "\n")
    return path


def _install(tmp_path: Path, *packages: str, image_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The install script with this venv as the image (and `image_path` on its PYTHONPATH: more of the image)."""
    dest = tmp_path / "packages"
    dest.mkdir()
    env = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(tmp_path / "wheels"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        **({"PYTHONPATH": str(image_path)} if image_path else {}),
    }
    return subprocess.run(
        [sys.executable, "-c", INSTALL_SCRIPT, str(dest), *packages],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def wheelhouse(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    # "probe" needs a package this venv (the stand-in image) has, and one it lacks
    _wheel(wheels, "probe", ("pyyaml", "probe_dep"))
    _wheel(wheels, "probe_dep")
    _wheel(wheels, "greedy", ("pyyaml>=999",))  # needs another version of an image package
    return tmp_path


def test_the_install_script_adds_only_what_the_image_lacks(wheelhouse):
    result = _install(wheelhouse, "probe")
    assert result.returncode == 0, result.stdout + result.stderr
    site = wheelhouse / "packages" / "site"
    installed = sorted(p.name for p in site.iterdir() if p.name != "__pycache__")  # pip compiled the modules
    assert installed == ["probe-1.0.dist-info", "probe.py", "probe_dep-1.0.dist-info", "probe_dep.py"]
    assert "ray-efa: installed probe into" in result.stdout
    assert not [p for p in (wheelhouse / "packages").iterdir() if p.name.startswith("prefix-")]  # cleaned up
    # what the Ray container then imports, with the site on PYTHONPATH
    probe = subprocess.run(
        [sys.executable, "-c", "import probe, probe_dep, yaml; print(probe.VALUE, yaml.__file__)"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.startswith("probe 1.0 ") and str(site) not in probe.stdout  # yaml is still the image's


def test_a_package_that_would_replace_an_image_package_fails_naming_the_setting(wheelhouse):
    result = _install(wheelhouse, "greedy")
    assert result.returncode != 0
    assert "fix the pipPackages setting" in result.stderr
    assert not (wheelhouse / "packages" / "site").exists()


def test_a_package_installed_from_a_local_wheel_file_is_pinned_too(tmp_path, wheelhouse):
    # GIVEN an image package installed from a local wheel file, as the DLC installs flash-attn: `pip freeze` prints it
    # `pinned @ file://...`, with no "=="
    local = tmp_path / "local-wheels"
    local.mkdir()
    image = tmp_path / "image"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-deps",
            "--target",
            str(image),
            str(_wheel(local, "pinned")),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--path", str(image)], capture_output=True, text=True, check=True
    ).stdout
    assert frozen.startswith("pinned @ file://"), frozen
    # ... and pipPackages wants a package that needs a newer one, which the index has
    _wheel(wheelhouse / "wheels", "pinned", version="2.0")
    _wheel(wheelhouse / "wheels", "wants_new_pinned", ("pinned>=2",))
    result = _install(wheelhouse, "wants_new_pinned", image_path=image)
    # THEN the image's copy is pinned like any other: pip's resolver refuses, and no second copy shadows it
    assert "pinned==1.0" in (wheelhouse / "packages" / "image-constraints.txt").read_text().splitlines()
    assert result.returncode != 0 and "fix the pipPackages setting" in result.stderr, result.stdout + result.stderr
    assert not (wheelhouse / "packages" / "site").exists()


def test_a_package_that_shadows_the_standard_library_is_refused(wheelhouse):
    # GIVEN a package whose wheel has a top-level `json` package
    _wheel(wheelhouse / "wheels", "shadowy", modules={"shadowy.py": "", "json/__init__.py": "HIJACKED = True\n"})
    result = _install(wheelhouse, "shadowy")
    # THEN nothing is installed, and the message names the module and the setting
    assert result.returncode != 0
    assert "would install top-level json, which shadows the standard library" in result.stderr
    assert "fix the pipPackages setting" in result.stderr
    assert not (wheelhouse / "packages" / "site").exists()


def test_a_stray_test_suite_is_left_out_and_the_package_installed(wheelhouse):
    # GIVEN a wheel that ships its own tests as a top-level `test` package (torchao 0.18.0 does)
    _wheel(wheelhouse / "wheels", "with_tests", modules={"with_tests.py": "VALUE = 1\n", "test/__init__.py": ""})
    result = _install(wheelhouse, "with_tests")
    # THEN the package is installed without it: `import test` stays the standard library's
    assert result.returncode == 0, result.stdout + result.stderr
    site = wheelhouse / "packages" / "site"
    assert (site / "with_tests.py").is_file() and not (site / "test").exists()
    assert "left out top-level test" in result.stdout


def test_only_wheels_are_installed():
    # pip never builds an sdist in the init container (flash-attn's would compile for an hour): the flag is pip's own
    assert "'--only-binary=:all:'" in INSTALL_SCRIPT

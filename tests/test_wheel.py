"""The wheel as a platform repository installs it: base dependencies only (no torch, Ray or transformers), one
top-level package (`ray_efa`), and the README's embedding snippet synthesizing next to the platform's own top-level
`infra` and `core` packages.

Offline, so the base dependencies do not come from an index. What is real: the wheel is built from a copy of this
repository by setuptools (`pip wheel --no-build-isolation`); a fresh venv (no system site-packages) sees exactly the
base closure of the wheel's own Requires-Dist, resolved here over the distributions installed in this venv (each
locked version must satisfy the declared range) and linked file by file into one folder that a .pth file adds to
the venv's path; then that venv's pip installs the wheel with `--no-index`, so pip itself checks that the closure
satisfies the metadata. What is not: the dependencies are the locked versions already installed, not downloads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "ray_efa", "core", "infra", "k8s", "training", "ops", "cli")
GENERIC_NAMES = ("core", "infra", "k8s", "training", "ops", "cli")
TRAIN_EXTRA = ("torch", "ray", "transformers")

pytestmark = [pytest.mark.wheel, pytest.mark.xdist_group("wheel")]


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_EC2_METADATA_DISABLED="true",
               JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20", PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=240, **kwargs)


def _base_closure(wheel: Path) -> dict[str, metadata.Distribution]:
    """The installed distributions that the wheel's base requirements need, transitively (extras and markers honored).

    Fails when a requirement is not installed here or the installed (locked) version is outside the declared range.
    """
    installed = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        requires = Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []
    todo = [(Requirement(r), "") for r in requires]
    chosen: dict[str, set[str]] = {}
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        assert name in installed, f"{req} is required but not installed in the test venv"
        dist = installed[name]
        assert req.specifier.contains(dist.version, prereleases=True), (
            f"the locked {name}=={dist.version} is outside the declared {req}")
        first_time = name not in chosen
        new_extras = set(req.extras) - chosen.get(name, set())
        if not first_time and not new_extras:
            continue
        chosen.setdefault(name, set()).update(new_extras)
        for sub in dist.requires or []:  # its base requirements once, and those of each extra asked for
            for wanted in ({""} if first_time else set()) | new_extras:
                todo.append((Requirement(sub), wanted))
    return {name: installed[name] for name in chosen}


def _link(dists: dict[str, metadata.Distribution], into: Path) -> None:
    """Symlink every file of these distributions (as their RECORD lists them) into one site folder."""
    for dist in dists.values():
        site = Path(dist.locate_file(""))
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue  # console scripts live outside site-packages; bytecode is rebuilt
            target = into / file
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(site / file)


PLATFORM_INFRA = '''
"""The platform's OWN `infra` package: the name that collided with the project's before the ray_efa namespace."""
from aws_cdk import aws_ec2 as ec2


def platform_vpc(scope, zones):
    return ec2.Vpc(scope, "PlatformVpc", availability_zones=list(zones), nat_gateways=1)
'''

PLATFORM_CORE = '''
"""The platform's OWN `core` package."""
TEAM = "research"
'''

PLATFORM_APP = '''
import json
import sys

import aws_cdk as cdk

import core.naming
import infra.network
from ray_efa.core.settings import Settings
from ray_efa.infra.cluster import RayEksCluster
from ray_efa.infra.gpu_nodegroup import EfaGpuNodegroup

app = cdk.App(outdir=sys.argv[1])
platform = cdk.Stack(app, "PlatformStack", env=cdk.Environment(region="us-east-2"))
vpc = infra.network.platform_vpc(platform, ["us-east-2a", "us-east-2b"])
settings = Settings.from_context({"clusterName": core.naming.TEAM, "gpuInstanceType": "p5.48xlarge"})
ray = RayEksCluster(platform, "Ray", settings=settings, vpc=vpc)
EfaGpuNodegroup(platform, "Gpu", settings=settings, cluster=ray.cluster, vpc=vpc)
template = app.synth().get_stack_by_name("PlatformStack").template
types = [r["Type"] for r in template["Resources"].values()]
print(json.dumps({
    "platform_infra": infra.network.__file__, "platform_core": core.naming.__file__,
    "ray_efa_infra": sys.modules["ray_efa.infra.network"].__file__ if "ray_efa.infra.network" in sys.modules else None,
    "ray_efa": sys.modules["ray_efa"].__file__,
    "vpcs": types.count("AWS::EC2::VPC"), "nodegroups": types.count("AWS::EKS::Nodegroup"),
    "clusters": [r["Properties"].get("Name") for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Cluster"],
}))
'''


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """The wheel, built from a copy of the repository and installed into a fresh venv with its base closure only."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    for name in SOURCES:  # a copy, so that the build's own build/ and .egg-info never land in the repository
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            source.mkdir(exist_ok=True)
            (source / name).write_bytes(path.read_bytes())
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work / "dist"), str(source)])
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (work / "dist").glob("ray_efa_stack-*.whl")

    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr[-3000:]
    python = venv / "bin" / "python"
    # Python 3.11's venv seeds setuptools too: remove it, so the venv holds pip and the wheel's closure alone.
    _run([str(python), "-m", "pip", "uninstall", "-q", "-y", "setuptools"])
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    base_site = work / "base-site"
    _link(_base_closure(wheel), base_site)
    (site / "ray-efa-base-deps.pth").write_text(f"{base_site}\n")
    before = set(os.listdir(site))
    install = _run([str(python), "-m", "pip", "install", "--no-index", "--no-cache-dir", str(wheel)])
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    return {"wheel": wheel, "venv": venv, "python": python, "site": site, "base_site": base_site,
            "added": set(os.listdir(site)) - before, "work": work}


def test_wheel_holds_one_top_level_package(installed):
    with zipfile.ZipFile(installed["wheel"]) as z:
        tops = {name.split("/")[0] for name in z.namelist()}
    assert tops == {"ray_efa", installed["wheel"].name.split("-py3")[0] + ".dist-info"}
    # THEN installing it adds ray_efa and its metadata to site-packages, and nothing with a generic name
    assert installed["added"] == {"ray_efa", "ray_efa_stack-0.1.0.dist-info"}
    for generic in GENERIC_NAMES:
        assert not (installed["site"] / generic).exists() and not (installed["base_site"] / generic).exists(), generic


def test_base_install_has_no_training_dependencies(installed):
    probe = _run([str(installed["python"]), "-c",
                  f"import importlib.util, json; print(json.dumps({{m: importlib.util.find_spec(m) is not None for m in {TRAIN_EXTRA!r}}}))"])
    assert json.loads(probe.stdout) == {m: False for m in TRAIN_EXTRA}, probe.stderr


def test_base_cli_plans_and_train_names_the_extra(installed):
    ray_efa = installed["venv"] / "bin" / "ray-efa"
    plan = _run([str(ray_efa), "plan", "--json", "-c", "clusterName=research"], cwd=installed["work"])
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert json.loads(plan.stdout)["settings"]["clusterName"]["value"] == "research"
    for command in (["train", "--local"], ["demo", "--cdk-out", "demo-cdk.out", "--dist", "demo-dist"]):
        result = _run([str(ray_efa), *command], cwd=installed["work"])
        assert result.returncode == 4, result.stderr[-3000:]
        assert "pip install 'ray-efa-stack[train]'" in result.stderr and "Traceback" not in result.stderr
    # the demo says so before its first step writes anything
    assert not (installed["work"] / "demo-cdk.out").exists() and not (installed["work"] / "demo-dist").exists()


def test_embedding_snippet_synthesizes_beside_the_platforms_own_infra_and_core(installed, tmp_path):
    # GIVEN a platform repository with its own top-level `infra` and `core` packages
    platform = tmp_path / "platform"
    for package, module, text in (("infra", "network", PLATFORM_INFRA), ("core", "naming", PLATFORM_CORE)):
        (platform / package).mkdir(parents=True)
        (platform / package / "__init__.py").write_text("")
        (platform / package / f"{module}.py").write_text(textwrap.dedent(text))
    (platform / "app.py").write_text(textwrap.dedent(PLATFORM_APP))
    # WHEN its app puts RayEksCluster and EfaGpuNodegroup into its own stack, with the installed wheel
    result = _run([str(installed["python"]), "app.py", str(tmp_path / "cdk.out")], cwd=platform)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    # THEN both `infra` packages import side by side, and one stack holds the VPC, the cluster and both node groups
    assert Path(out["platform_infra"]).parent.parent == platform and Path(out["platform_core"]).parent.parent == platform
    assert Path(out["ray_efa"]).is_relative_to(installed["site"])
    assert (out["vpcs"], out["nodegroups"], out["clusters"]) == (1, 2, ["research"])

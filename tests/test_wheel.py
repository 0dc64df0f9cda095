"""The wheel as a platform repository installs it: base dependencies only (no torch, Ray or transformers), one
top-level package (`ray_efa`), and the README's embedding snippet synthesizing next to the platform's own top-level
`infra` and `core` packages.

Offline, so the base dependencies do not come from an index. What is real: the wheel is built from a copy of this
repository by setuptools (`pip wheel --no-build-isolation`); a fresh venv (no system site-packages) sees exactly the
base closure of the wheel's own Requires-Dist, resolved over the distributions installed in this venv (each locked
version must satisfy the declared range) and linked into it (tests/venvs.py); then that venv's pip installs the
wheel with `--no-index`, so pip itself checks that the closure satisfies the metadata. What is not: the dependencies
are the locked versions already installed, not downloads.

The checkout as `make install` installs it (the Makefile's own recipe, into a fresh venv of the same closure) gives a
platform's type checker the same as the wheel: the pinned pyright on a small platform app outside the checkout finds
its `ray_efa` imports, their types, and 0 errors, from either install.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import TypedDict

import pytest

from tests.venvs import fresh_venv, run

ROOT = Path(__file__).resolve().parents[1]
GENERIC_NAMES = tuple(sorted(path.name for path in (ROOT / "ray_efa").iterdir() if path.is_symlink()))
"""The package folders (ray_efa/'s links: ray_efa/core -> ../core)."""
SOURCES = ("pyproject.toml", "README.md", "ray_efa", *GENERIC_NAMES)
BASE_REQUIREMENTS = tuple(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
PYRIGHT = ROOT / "node_modules" / ".bin" / "pyright"
"""The pinned pyright (package.json), as `make lint` runs it."""
TRAIN_EXTRA = ("torch", "ray", "transformers")

pytestmark = [pytest.mark.wheel, pytest.mark.xdist_group("wheel")]


def _requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []


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

PLATFORM_APP = """
import json
import sys

import aws_cdk as cdk

import core.naming
import infra.network
from ray_efa.infra import EfaGpuNodegroup, RayEksCluster

app = cdk.App(outdir=sys.argv[1])
platform = cdk.Stack(app, "PlatformStack", env=cdk.Environment(region="us-east-2"))
vpc = infra.network.platform_vpc(platform, ["us-east-2a", "us-east-2b"])
ray = RayEksCluster(platform, "Ray", vpc=vpc, cluster_name=core.naming.TEAM)
EfaGpuNodegroup(platform, "Gpu", cluster=ray.cluster, vpc=vpc, instance_type="p5.48xlarge")
template = app.synth().get_stack_by_name("PlatformStack").template
types = [r["Type"] for r in template["Resources"].values()]
print(json.dumps({
    "platform_infra": infra.network.__file__, "platform_core": core.naming.__file__,
    "ray_efa_infra": sys.modules["ray_efa.infra.network"].__file__ if "ray_efa.infra.network" in sys.modules else None,
    "ray_efa": sys.modules["ray_efa"].__file__,
    "vpcs": types.count("AWS::EC2::VPC"), "nodegroups": types.count("AWS::EKS::Nodegroup"),
    "clusters": [r["Properties"].get("Name") for r in template["Resources"].values() if r["Type"] == "AWS::EKS::Cluster"],
}))
"""


def _copy(names: tuple[str, ...], into: Path) -> Path:
    """A copy of these files and folders of the repository, so that a build's own build/ and .egg-info never land in
    it; the links as links, as a clone holds them."""
    into.mkdir(parents=True)
    for name in names:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, into / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (into / name).write_bytes(path.read_bytes())
    return into


class Installed(TypedDict):
    wheel: Path
    venv: Path
    python: Path
    site: Path
    base_site: Path
    added: set[str]
    """what installing the wheel added to the venv's site folder"""
    work: Path


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """The wheel, built from a copy of the repository and installed into a fresh venv with its base closure only."""
    work = tmp_path_factory.mktemp("wheel")
    source = _copy(SOURCES, work / "source")
    built = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(work / "dist"),
            str(source),
        ]
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (work / "dist").glob("ray_efa_stack-*.whl")

    venv = work / "venv"
    python, site = fresh_venv(venv, _requires_dist(wheel), pip=True)
    before = set(os.listdir(site))
    install = run([str(python), "-m", "pip", "install", "--no-index", "--no-cache-dir", str(wheel)])
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    return Installed(
        wheel=wheel,
        venv=venv,
        python=python,
        site=site,
        base_site=work / "venv-deps",
        added=set(os.listdir(site)) - before,
        work=work,
    )


def test_wheel_holds_one_top_level_package(installed):
    with zipfile.ZipFile(installed["wheel"]) as z:
        tops = {name.split("/")[0] for name in z.namelist()}
    assert tops == {"ray_efa", installed["wheel"].name.split("-py3")[0] + ".dist-info"}
    # THEN installing it adds ray_efa and its metadata to site-packages, and nothing with a generic name
    assert installed["added"] == {"ray_efa", "ray_efa_stack-0.1.0.dist-info"}
    for generic in GENERIC_NAMES:
        assert not (installed["site"] / generic).exists() and not (installed["base_site"] / generic).exists(), generic


def test_wheel_ships_py_typed_so_importers_type_check_against_it(installed):
    # PEP 561: without the marker a platform repository's type checker treats every ray_efa import as untyped
    with zipfile.ZipFile(installed["wheel"]) as z:
        assert "ray_efa/py.typed" in z.namelist()
    assert (installed["site"] / "ray_efa" / "py.typed").is_file()


def test_base_install_has_no_training_dependencies(installed):
    probe = run(
        [
            str(installed["python"]),
            "-c",
            f"import importlib.util, json; print(json.dumps({{m: importlib.util.find_spec(m) is not None for m in {TRAIN_EXTRA!r}}}))",
        ]
    )
    assert json.loads(probe.stdout) == dict.fromkeys(TRAIN_EXTRA, False), probe.stderr


def test_base_cli_plans_and_train_names_the_extra(installed):
    ray_efa = installed["venv"] / "bin" / "ray-efa"
    plan = run([str(ray_efa), "plan", "--json", "-c", "clusterName=research"], cwd=installed["work"])
    assert plan.returncode == 0, plan.stderr[-3000:]
    assert json.loads(plan.stdout)["settings"]["clusterName"]["value"] == "research"
    for command in (["train", "--local"], ["demo", "--cdk-out", "demo-cdk.out", "--dist", "demo-dist"]):
        result = run([str(ray_efa), *command], cwd=installed["work"])
        assert result.returncode == 4, result.stderr[-3000:]
        assert "pip install 'ray-efa-stack[train]'" in result.stderr and "Traceback" not in result.stderr
    # the demo says so before its first step writes anything
    assert not (installed["work"] / "demo-cdk.out").exists() and not (installed["work"] / "demo-dist").exists()
    # and the charts name their own extra, matplotlib, which the base install lacks too
    for command in (["report", "some-run"], ["plan", "--plot", "scaling.png"]):
        result = run([str(ray_efa), *command], cwd=installed["work"])
        assert result.returncode == 4, result.stderr[-3000:]
        assert "pip install 'ray-efa-stack[plots]'" in result.stderr and "Traceback" not in result.stderr
    assert not (installed["work"] / "scaling.png").exists() and not (installed["work"] / "reports").exists()


def test_embedding_snippet_synthesizes_beside_the_platforms_own_infra_and_core(installed, tmp_path):
    # GIVEN a platform repository with its own top-level `infra` and `core` packages
    platform = tmp_path / "platform"
    for package, module, text in (("infra", "network", PLATFORM_INFRA), ("core", "naming", PLATFORM_CORE)):
        (platform / package).mkdir(parents=True)
        (platform / package / "__init__.py").write_text("")
        (platform / package / f"{module}.py").write_text(textwrap.dedent(text))
    (platform / "app.py").write_text(textwrap.dedent(PLATFORM_APP))
    # WHEN its app puts RayEksCluster and EfaGpuNodegroup into its own stack, with the installed wheel
    result = run([str(installed["python"]), "app.py", str(tmp_path / "cdk.out")], cwd=platform)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    # THEN both `infra` packages import side by side, and one stack holds the VPC, the cluster and both node groups
    assert (
        Path(out["platform_infra"]).parent.parent == platform and Path(out["platform_core"]).parent.parent == platform
    )
    assert Path(out["ray_efa"]).is_relative_to(installed["site"])
    assert (out["vpcs"], out["nodegroups"], out["clusters"]) == (1, 2, ["research"])


def test_installed_package_writes_the_settings_schema_for_editors(installed):
    # docs/settings.md's command for a platform repository's cdk.json
    command = (
        "import json; from ray_efa.core.settings import context_json_schema as s; print(json.dumps(s(), indent=2))"
    )
    result = run([str(installed["python"]), "-c", command], cwd=installed["work"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == json.loads((ROOT / "docs" / "settings.schema.json").read_text())


def test_every_exported_symbol_has_a_known_type_for_importers(installed, tmp_path):
    # GIVEN the wheel as a platform repository installs it (py.typed, the base closure: no torch, Ray or transformers)
    pyright = ROOT / "node_modules" / ".bin" / "pyright"
    # WHEN the pinned pyright checks the public interface as an importer's type checker sees it
    result = run(
        [str(pyright), "--verifytypes", "ray_efa", "--ignoreexternal", "--outputjson"],
        cwd=tmp_path,
        extra_env={
            "VIRTUAL_ENV": str(installed["venv"]),
            "PATH": f"{installed['venv'] / 'bin'}{os.pathsep}{os.environ['PATH']}",
        },
    )
    report = json.loads(result.stdout)["typeCompleteness"]
    assert report["packageRootDirectory"].startswith(str(installed["site"]))
    unknown = {s["name"] for s in report["symbols"] if s["isExported"] and not s["isTypeKnown"]}
    # THEN every exported symbol has a known type (no inferred, ambiguous or partially unknown public attribute), but
    # the nine built on torch's or Ray's types, which the base install does not have (they are the `train` extra's)
    assert unknown == {
        "ray_efa.training.model.CausalLM",
        "ray_efa.training.model.build_model",
        "ray_efa.training.lean_block.LeanAttention",
        "ray_efa.training.lean_block.LeanDecoderLayer",
        "ray_efa.training.lean_block.LeanDecoderLayer.self_attn",
        "ray_efa.training.parallelize.Bf16WireReduceScatter",
        "ray_efa.training.parallelize.parallelize",
        "ray_efa.training.failure_policy.RetryLostWorkersPolicy",
        "ray_efa.training.progress.ReportLines",
    }
    assert report["exportedSymbolCounts"]["withAmbiguousType"] == 0


PLATFORM_TYPED = '''
"""A platform's CDK app, outside the checkout, as its type checker reads it: ray_efa's settings and constructs."""
import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2

from ray_efa.core.settings import Settings
from ray_efa.infra import EfaGpuNodegroup, RayEksCluster

app = cdk.App()
stack = cdk.Stack(app, "Platform", env=cdk.Environment(region="us-east-2"))
vpc = ec2.Vpc(stack, "Vpc")
settings = Settings.from_context({"clusterName": "research"})
ray = RayEksCluster(stack, "Ray", vpc=vpc, cluster_name=settings.cluster.cluster_name)
EfaGpuNodegroup(stack, "Gpu", cluster=ray.cluster, vpc=vpc, instance_type="p5.48xlarge")
'''

PLATFORM_MISTYPED = """
from ray_efa.core.settings import Settings

name: int = Settings.from_context({}).cluster.cluster_name  # a str: only a checker that reads the types says so
"""


def _pyright_on_a_platform_app(python: Path, platform: Path) -> dict[str, list[dict]]:
    """The pinned pyright's errors on a small platform app, by file, with `python`'s environment (as a platform
    repository points its pyright at its venv)."""
    platform.mkdir()
    (platform / "app.py").write_text(textwrap.dedent(PLATFORM_TYPED))
    (platform / "mistyped.py").write_text(textwrap.dedent(PLATFORM_MISTYPED))
    result = run([str(PYRIGHT), "--pythonpath", str(python), "--outputjson", "app.py", "mistyped.py"], cwd=platform)
    report = json.loads(result.stdout)
    errors: dict[str, list[dict]] = {"app.py": [], "mistyped.py": []}
    for diagnostic in report["generalDiagnostics"]:
        if diagnostic["severity"] == "error":
            errors[Path(diagnostic["file"]).name].append(diagnostic)
    return errors


def _assert_typed(errors: dict[str, list[dict]]) -> None:
    # the app: every ray_efa import resolved, 0 errors (an unresolved import is an error in pyright's standard mode)
    assert errors["app.py"] == [], [e["message"] for e in errors["app.py"]]
    # and the types are read, not Unknown: a str setting assigned to an int is the one error of the other file
    assert [(e.get("rule"), e["range"]["start"]["line"]) for e in errors["mistyped.py"]] == [
        ("reportAssignmentType", 3)
    ]


@pytest.fixture(scope="module")
def editable(tmp_path_factory) -> Path:
    """A copy of the checkout installed as `make install` installs it (the Makefile's recipe for the editable install,
    run by make), into a fresh venv that sees the base closure; that venv's python."""
    work = tmp_path_factory.mktemp("editable")
    source = _copy((*SOURCES, "Makefile", "requirements.lock"), work / "checkout")
    venv = work / "venv"
    python, _ = fresh_venv(venv, (*BASE_REQUIREMENTS, "setuptools"), pip=True)
    (venv / ".installed").touch()  # the dependencies are there (linked): make goes on with the install of ray_efa alone
    # offline: the build uses the venv's setuptools (PIP_NO_BUILD_ISOLATION=0 turns build isolation off)
    made = run(
        ["make", "-C", str(source), f"VENV={venv}", f"{venv}/.editable"], extra_env={"PIP_NO_BUILD_ISOLATION": "0"}
    )
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    return python


def test_the_editable_install_is_the_checkouts_ray_efa_and_nothing_else(editable, tmp_path):
    probe = (
        "import importlib.util, json, ray_efa.infra; print(json.dumps([ray_efa.infra.__file__, "
        "{name: importlib.util.find_spec(name) is not None for name in ('core', 'infra', 'tests', 'tools', 'app')}]))"
    )
    result = run([str(editable), "-c", probe], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    infra, others = json.loads(result.stdout)
    # the checkout's own file (through its links), from a folder outside it; no other folder of the repository
    assert Path(infra).resolve() == (editable.parents[2] / "checkout" / "infra" / "__init__.py").resolve()
    assert others == dict.fromkeys(("core", "infra", "tests", "tools", "app"), False)


def test_a_platform_app_type_checks_against_the_editable_install(editable, tmp_path):
    # GIVEN a platform app outside the checkout, and the venv `make install` made
    # WHEN the pinned pyright checks the app with that venv THEN it reads ray_efa's types: 0 errors
    # (setuptools' default editable mode, an import hook that pyright cannot run, leaves both ray_efa imports
    # unresolved: issue 62)
    _assert_typed(_pyright_on_a_platform_app(editable, tmp_path / "platform"))


def test_a_platform_app_type_checks_against_the_wheel(installed, tmp_path):
    # the same app against the wheel's install gives the same
    _assert_typed(_pyright_on_a_platform_app(installed["python"], tmp_path / "platform"))

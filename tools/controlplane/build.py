"""Build the test control plane's binaries from Go modules at pinned versions, once per machine.

    python tools/controlplane/build.py          # builds what is missing; a line a module names its cache key and folder
    python tools/controlplane/build.py --where  # prints the folder only (builds nothing)

Three Go modules beside this file pin what `make test-cluster` runs (go.mod and go.sum are the pins):

    kube/     etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (k8s.io/kubernetes, its staging modules
              replaced by their published versions, as envtest-style projects do; etcd at the version it pins)
    kuberay/  the KubeRay operator (github.com/ray-project/kuberay/ray-operator)
    kwok/     KWOK's controller (sigs.k8s.io/kwok/cmd/kwok): the kubelet for nodes that are only API objects
    cyclonus/ cyclonus (github.com/mattfenwick/cyclonus), whose `analyze --mode query-traffic` evaluates NetworkPolicies,
              ingress and egress, as a conforming CNI would (tests/cluster/netpol.py)

Beside its binaries, a module's folder holds data files of a pinned module (`Module.data`): kuberay/crds/ has the
operator's own CRDs (ray-operator's config/crd/bases at the version go.mod pins), which the control plane serves in a
clone without ../shared (tests/cluster/conftest.py).

Each module builds into a folder of its own under the cache (`$RAY_EFA_CACHE`, else `$XDG_CACHE_HOME/ray-efa`, else
`~/.cache/ray-efa`), named by a hash of everything that decides its binaries (the module's files and `go version`):
a changed pin builds anew beside the old folder, an unchanged one is never rebuilt. A build goes to a temporary folder
first and is renamed into place whole, so an interrupted build leaves nothing that looks finished. The first build,
on 2 cores with an empty Go module cache, takes about 20 minutes in all (docs/testing.md, "The control plane"); each
module prints a line naming its cache key and folder, before it builds or when it reuses the cache. Pure standard
library, so that it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Module:
    folder: str
    binaries: dict[str, str]
    """Binary name -> Go package that builds it."""
    version_of: str = ""
    """A module whose version (from go.mod) the binaries report as their own, through component-base's ldflags, as
    Kubernetes' own build stamps it (a plain `go build` reports v0.0.0-master)."""
    data: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Folder in the cache -> (Go module, a glob inside it): files copied from the module at its pinned version."""

    def ldflags(self) -> str:
        flags = "-s -w"
        if self.version_of:
            version = required_version(self.folder, self.version_of)
            major, minor = version.lstrip("v").split(".")[:2]
            flags += "".join(
                f" -X k8s.io/component-base/version.{key}={value}"
                for key, value in (
                    ("gitVersion", version),
                    ("gitMajor", major),
                    ("gitMinor", minor),
                    ("gitTreeState", "clean"),
                )
            )
        return flags


MODULES = (
    Module(
        "kube",
        version_of="k8s.io/kubernetes",
        binaries={
            "etcd": "./cmd/etcd",
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
            "kubectl": "k8s.io/kubernetes/cmd/kubectl",
        },
    ),
    Module(
        "kuberay",
        {"kuberay-operator": "github.com/ray-project/kuberay/ray-operator"},
        data={"crds": ("github.com/ray-project/kuberay/ray-operator", "config/crd/bases/ray.io_*.yaml")},
    ),
    Module("kwok", {"kwok": "sigs.k8s.io/kwok/cmd/kwok"}),
    Module("cyclonus", {"cyclonus": "github.com/mattfenwick/cyclonus/cmd/cyclonus"}),
)
OPERATOR = "github.com/ray-project/kuberay/ray-operator"
BUILD_FLAGS = ("-trimpath",)


def required_version(folder: str, module_path: str) -> str:
    """The version `folder`'s go.mod requires of `module_path`."""
    for line in (HERE / folder / "go.mod").read_text().splitlines():
        words = line.split()
        if words[:1] == ["require"]:
            words = words[1:]
        if len(words) >= 2 and words[0] == module_path:
            return words[1]
    raise SystemExit(f"tools/controlplane/{folder}/go.mod requires no {module_path}")


def module_source(folder: str, module_path: str) -> Path:
    """The folder of `module_path`'s source in the Go module cache, at the version `folder`'s go.mod pins (downloaded
    where it is not there yet, checked against go.sum): its own data files (CRDs, KWOK's stages) come from the pinned
    release."""
    go_version()  # (says what to install where there is no go)
    env = {**os.environ, "GOFLAGS": "-mod=readonly"}
    where = ["go", "list", "-m", "-f", "{{.Dir}}", module_path]
    out = subprocess.run(where, cwd=HERE / folder, check=True, capture_output=True, text=True, env=env).stdout.strip()
    if not out:  # go list names no folder for a module it has not downloaded
        subprocess.run(["go", "mod", "download", module_path], cwd=HERE / folder, check=True, env=env)
        out = subprocess.run(where, cwd=HERE / folder, check=True, capture_output=True, text=True, env=env).stdout
    return Path(out.strip())


def cache_root() -> Path:
    if os.environ.get("RAY_EFA_CACHE"):
        return Path(os.environ["RAY_EFA_CACHE"]) / "controlplane"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ray-efa" / "controlplane"


def go_version() -> str:
    go = shutil.which("go")
    if go is None:
        raise SystemExit(
            "tools/controlplane/build.py: no `go` on PATH; the control plane is built from Go modules "
            "(Go 1.26, see README's requirements)"
        )
    return subprocess.run([go, "version"], check=True, capture_output=True, text=True).stdout.strip()


def module_key(module: Module, go: str) -> str:
    digest = hashlib.sha256(go.encode())
    digest.update(" ".join(BUILD_FLAGS).encode())
    digest.update(module.ldflags().encode())
    folder = HERE / module.folder
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def module_dir(module: Module, go: str) -> Path:
    return cache_root() / f"{module.folder}-{module_key(module, go)}"


def pins(folder: str) -> list[str]:
    """The modules `folder`'s go.mod requires directly, as 'path version' (its indirect requirements and replacements
    are in the cache key too, through the file's bytes)."""
    required, in_block = [], False
    for line in (HERE / folder / "go.mod").read_text().splitlines():
        words = line.split()
        if words[:2] == ["require", "("]:
            in_block = True
            continue
        if in_block and words[:1] == [")"]:
            in_block = False
            continue
        if words[:1] == ["require"]:
            words = words[1:]
        elif not in_block:
            continue
        if len(words) >= 2 and "indirect" not in words:
            required.append(f"{words[0]} {words[1]}")
    return required


def cache_line(module: Module, go: str, target: Path, state: str) -> str:
    """One line that names a module's cache key (what its hash covers) and where its binaries are: printed before a
    build and when the cache is reused, so that a rebuild (or its absence) is explained by the line."""
    go_words = go.split()
    toolchain = " ".join(go_words[2:]) if go_words[:2] == ["go", "version"] else go
    return (
        f"control plane {module.folder}: cache key {module_key(module, go)} = sha256 of {', '.join(pins(module.folder))}"
        f" (tools/controlplane/{module.folder}/go.mod, go.sum and sources), {toolchain}, flags "
        f"{' '.join(BUILD_FLAGS)}; {state} {target}"
    )


def bin_dirs() -> dict[str, Path]:
    """Binary name -> the file it would be at (built or not)."""
    go = go_version()
    return {name: module_dir(m, go) / name for m in MODULES for name in m.binaries}


def _module(folder: str) -> Module:
    return next(m for m in MODULES if m.folder == folder)


def operator_crds() -> list[Path]:
    """The CRDs of the operator binary (ray-operator's config/crd/bases at the version kuberay/go.mod pins), as the
    build copied them into the cache beside it; empty before the build."""
    return sorted((module_dir(_module("kuberay"), go_version()) / "crds").glob("ray.io_*.yaml"))


CRD_PINS = ("kuberay", "kuberay-1.4.0")
"""The folders whose go.mod pins a version of ray-operator whose published CRDs (its config/crd/bases) the tests read:
the operator's own, and v1.4.0 (kuberay-1.4.0/ builds nothing). The Go module proxy serves no other version."""


def published_crds(version: str) -> list[Path]:
    """ray-operator's RayCluster and RayJob CRDs as published at v<version>, read from the Go module cache (downloaded
    where missing): for each version a folder of CRD_PINS pins; [] for another."""
    for folder in CRD_PINS:
        if required_version(folder, OPERATOR) == f"v{version}":
            bases = module_source(folder, OPERATOR) / "config" / "crd" / "bases"
            return [bases / name for name in ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml")]
    return []


def operator_version() -> str:
    """The version of the operator binary (kuberay/go.mod's pin), e.g. v1.5.0."""
    return required_version("kuberay", OPERATOR)


def _copy_data(module: Module, target: Path) -> None:
    """Each of module.data's files, from the Go module cache at the pinned version, into target/<folder>/ (written
    beside it and renamed into place whole; a folder already there is kept)."""
    for folder, (module_path, pattern) in module.data.items():
        if (target / folder).is_dir():
            continue
        source = module_source(module.folder, module_path)
        files = sorted(source.glob(pattern))
        if not files:
            raise SystemExit(f"tools/controlplane/build.py: {module_path} (in {source}) has no {pattern}")
        partial = target / f".{folder}.{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for path in files:
            shutil.copyfile(path, partial / path.name)
        try:
            partial.rename(target / folder)
        except OSError:  # another build finished first: keep its folder
            shutil.rmtree(partial, ignore_errors=True)


def build(module: Module, go: str) -> Path:
    target = module_dir(module, go)
    if all((target / name).is_file() for name in module.binaries):
        print(cache_line(module, go, target, "reusing the binaries in"), flush=True)
        _copy_data(module, target)  # (a folder built before its module had data files gets them now)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    names = ", ".join(module.binaries)
    print(cache_line(module, go, target, "not built yet: building into"), flush=True)
    print(f"== building {names} from Go modules ({HERE / module.folder}/go.mod) into {target}", flush=True)
    started = time.monotonic()
    command = [
        "go",
        "build",
        *BUILD_FLAGS,
        f"-ldflags={module.ldflags()}",
        "-o",
        f"{partial}/",
        *module.binaries.values(),
    ]
    # -mod=readonly: the pins are go.mod and go.sum as committed; a build never rewrites them.
    env = {**os.environ, "GOFLAGS": "-mod=readonly"}
    result = subprocess.run(command, cwd=HERE / module.folder, env=env)
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise SystemExit(
            f"tools/controlplane/build.py: `{' '.join(command)}` in {HERE / module.folder} failed "
            f"(exit {result.returncode})"
        )
    # go build names a main package's binary after its folder: rename to the name the harness asks for.
    for name, package in module.binaries.items():
        built = partial / package.rstrip("/").rsplit("/", 1)[-1]
        if built != partial / name:
            built.rename(partial / name)
    _copy_data(module, partial)
    try:
        partial.rename(target)
    except OSError:  # another build finished first: keep its folder (with the data files, which it may lack)
        shutil.rmtree(partial, ignore_errors=True)
        _copy_data(module, target)
    print(f"   built in {time.monotonic() - started:.0f} s", flush=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--where", action="store_true", help="print the binaries' paths, build nothing")
    args = parser.parse_args(argv)
    if args.where:
        for name, path in bin_dirs().items():
            print(f"{name}\t{path}\t{'built' if path.is_file() else 'missing'}")
        go = go_version()
        for module in MODULES:
            for folder in module.data:
                path = module_dir(module, go) / folder
                print(f"{module.folder}/{folder}\t{path}\t{'copied' if path.is_dir() else 'missing'}")
        return 0
    go = go_version()
    for module in MODULES:
        build(module, go)  # prints its cache line: the key, and where the binaries are
    return 0


if __name__ == "__main__":
    sys.exit(main())

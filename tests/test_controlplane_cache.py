"""The control plane's build cache (tools/controlplane/build.py): the line each module prints names its cache key, what
the key covers and where the binaries are, so that a rebuild (or the lack of one) is explained by the build's output.

Reads the committed go.mod files; builds nothing and needs no `go` (a go version string is passed in).
"""

from __future__ import annotations

from tools.controlplane import build

GO = "go version go1.26.8 linux/amd64"


def _module(folder: str) -> build.Module:
    return next(m for m in build.MODULES if m.folder == folder)


def test_the_pins_are_the_direct_requirements_of_each_go_mod():
    assert build.pins("kuberay") == [f"{build.OPERATOR} {build.operator_version()}"]
    assert build.pins("kube") == ["go.etcd.io/etcd/server/v3 v3.6.8", "k8s.io/kubernetes v1.36.3"]
    assert all(len(build.pins(m.folder)) >= 1 for m in build.MODULES)


def test_the_cache_line_names_the_key_the_pins_the_toolchain_and_the_folder():
    module = _module("kuberay")
    target = build.cache_root() / f"kuberay-{build.module_key(module, GO)}"
    line = build.cache_line(module, GO, target, "reusing the binaries in")
    assert line.startswith(f"control plane kuberay: cache key {build.module_key(module, GO)} = sha256 of ")
    assert f"{build.OPERATOR} {build.operator_version()}" in line
    assert "go1.26.8 linux/amd64" in line
    assert line.endswith(f"reusing the binaries in {target}")
    assert "\n" not in line


def test_the_key_follows_the_go_version():
    module = _module("kwok")
    assert build.module_key(module, GO) != build.module_key(module, GO.replace("1.26.8", "1.26.9"))
    assert build.module_dir(module, GO).name == f"kwok-{build.module_key(module, GO)}"

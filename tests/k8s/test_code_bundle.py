"""The shipped code: the ConfigMap really holds importable core/ and training/, and the settings of its run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ray_efa.core.context import PROJECT_ROOT
from ray_efa.core.settings import Settings
from ray_efa.core.strategy import resolve
from ray_efa.k8s.code_bundle import (
    CHUNK_BYTES,
    CONFIG_MAP_MAX_BYTES,
    LAST_APPLIED_MAX_BYTES,
    CodeBundle,
    ManifestError,
    ShippedFile,
    collect_code,
)
from ray_efa.k8s.code_config_map import CodeConfigMap
from tests.k8s.conftest import materialize_code, mounted_items

_PROBE = """
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
import ray_efa.core.settings
from ray_efa.core.settings import Settings
settings = Settings.from_json(open(sys.argv[1] + "/settings.json").read())
print(json.dumps({
    "core": ray_efa.core.settings.__file__,
    "driver": importlib.util.find_spec("ray_efa.training.driver").origin,
    "settings": settings.to_context(),
}))
"""


@pytest.mark.parametrize("network", ["efa", "tcp"])
def test_shipped_code_imports_and_its_settings_round_trip(default_synth, tmp_path, network):
    # GIVEN the job's ConfigMap written out as the pods see it
    root = materialize_code(default_synth, network, tmp_path)
    # WHEN a fresh interpreter imports core.settings from it and reads settings.json back
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(root)],
        cwd=root,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    )
    probe = json.loads(out.stdout)
    # THEN the code came from the mount, the driver module is there, and the settings are this run's
    assert Path(probe["core"]).is_relative_to(root) and Path(probe["driver"]).is_relative_to(root)
    # (the TCP comparison job's: the EFA job's levers as its driver decides them, network flipped: k8s.workload)
    expected = default_synth.settings if network == "efa" else resolve(default_synth.settings).replace(network=network)
    assert Settings.from_context(probe["settings"]) == expected


def test_every_tracked_training_file_and_every_core_module_it_uses_is_shipped(default_synth):
    # GIVEN what git tracks under core/ and training/ (the source of truth, independent of the bundle's own walk)
    tracked = subprocess.run(
        ["git", "ls-files", "--", "core/*.py", "training/*.py"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert any(p.startswith("core/") for p in tracked)
    # WHEN we list the items of the mounted ConfigMap
    head = default_synth.ray_job("efa")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]
    shipped = {item["path"] for item in mounted_items(head)}
    # THEN every training file is there, under the import namespace, with ray_efa/__init__.py above them
    assert {f"ray_efa/{path}" for path in tracked if path.startswith("training/")} | {"ray_efa/__init__.py"} <= shipped
    # and a core module stays out only when no shipped file names it (the CDK app's own modules, e.g. context)
    left_out = [path for path in tracked if path.startswith("core/") and f"ray_efa/{path}" not in shipped]
    shipped_text = "\n".join((PROJECT_ROOT / path).read_text() for path in tracked if f"ray_efa/{path}" in shipped)
    for path in left_out:
        module = path.removesuffix(".py").replace("/", ".")
        name = module.rsplit(".", 1)[-1]
        assert f"ray_efa.{module}" not in shipped_text and f"import {name}" not in shipped_text, path
    assert "ray_efa/core/settings/__init__.py" in shipped


def test_config_map_keys_map_back_to_their_paths(default_synth):
    head = default_synth.ray_cluster["spec"]["headGroupSpec"]["template"]
    items = mounted_items(head)
    assert {"key": "ray_efa.core.settings.__init__.py", "path": "ray_efa/core/settings/__init__.py"} in items
    for item in items:
        assert item["key"] == item["path"].replace("/", ".")


def test_real_bundle_fits_a_client_side_kubectl_apply():
    # GIVEN the code of this checkout WHEN its size is checked THEN it fits (the error names the budget if it ever does not)
    parts = collect_code(Settings()).config_maps("train-efa-code")
    # THEN it ships as one ConfigMap per package (continued in -2, -3, ... past CHUNK_BYTES) plus the settings, each of
    # which fits on its own with room to grow
    names = [name for name, _ in parts]
    assert names[0] == "train-efa-code" and "train-efa-code-training" in names and names[-1] == "train-efa-settings"
    assert all(re.fullmatch(r"train-efa-code(-training)?(-\d+)?", name) for name in names[:-1]), names
    for name, part in parts:
        part.check_fits(name)
        assert 0 < part.size_bytes < LAST_APPLIED_MAX_BYTES * 3 // 4


def test_a_package_past_the_chunk_size_continues_in_numbered_config_maps_in_path_order():
    # GIVEN a training package of four files that together pass CHUNK_BYTES, each under half of it
    third = "#" * (CHUNK_BYTES // 3)
    files = tuple(
        ShippedFile(path=p, text=t)
        for p, t in (
            ("ray_efa/__init__.py", ""),
            ("ray_efa/core/a.py", ""),
            ("ray_efa/training/a.py", third),
            ("ray_efa/training/b.py", third),
            ("ray_efa/training/c.py", third),
            ("ray_efa/training/d.py", third),
            ("settings.json", "{}"),
        )
    )
    # WHEN it is split into ConfigMaps
    parts = CodeBundle(files=files).config_maps("x-code")
    # THEN the package continues in x-code-training-2, every file whole and once, in path order, each part fits
    assert [(name, part.paths()) for name, part in parts] == [
        ("x-code", ["ray_efa/__init__.py", "ray_efa/core/a.py"]),
        ("x-code-training", ["ray_efa/training/a.py", "ray_efa/training/b.py"]),
        ("x-code-training-2", ["ray_efa/training/c.py", "ray_efa/training/d.py"]),
        ("x-settings", ["settings.json"]),
    ]
    for name, part in parts:
        part.check_fits(name)


def test_top_level_files_ship_with_the_first_package_and_settings_alone():
    # GIVEN a bundle of two packages, the namespace's __init__ and settings.json
    files = tuple(
        ShippedFile(path=p, text="")
        for p in ("ray_efa/__init__.py", "ray_efa/core/a.py", "ray_efa/training/b.py", "settings.json")
    )
    # WHEN it is split into ConfigMaps
    parts = {name: part.paths() for name, part in CodeBundle(files=files).config_maps("x-code")}
    # THEN the first package carries ray_efa/__init__.py, the second has its own, and settings.json is alone
    assert parts == {
        "x-code": ["ray_efa/__init__.py", "ray_efa/core/a.py"],
        "x-code-training": ["ray_efa/training/b.py"],
        "x-settings": ["settings.json"],
    }


def _bundle_of(size: int) -> CodeBundle:
    return CodeBundle(
        files=(ShippedFile(path="core/big.py", text="#" * size), ShippedFile(path="settings.json", text="{}"))
    )


def test_bundle_over_one_mebibyte_is_rejected_naming_the_limit():
    with pytest.raises(
        ManifestError,
        match=r"ConfigMap train-efa-code would hold 1,\d{3},\d{3} bytes .* limit of 1,048,576 bytes .* core/big\.py",
    ):
        _bundle_of(CONFIG_MAP_MAX_BYTES).check_fits("train-efa-code")


def test_bundle_too_big_for_client_side_apply_is_rejected_naming_the_way_out():
    with pytest.raises(ManifestError, match=r"annotation limit .*`kubectl apply --server-side`"):
        _bundle_of(LAST_APPLIED_MAX_BYTES).check_fits("train-efa-code")


def test_oversized_bundle_fails_before_any_config_map_is_made():
    # GIVEN a bundle over the limit WHEN its ConfigMaps are built THEN it raises, naming the ConfigMap
    with pytest.raises(ManifestError, match="ConfigMap x-code would hold"):
        CodeConfigMap(name="x-code", namespace="ray", bundle=_bundle_of(CONFIG_MAP_MAX_BYTES))


def test_colliding_config_map_keys_are_rejected():
    files = (ShippedFile(path="core/a.b.py", text=""), ShippedFile(path="core/a/b.py", text=""))
    with pytest.raises(ManifestError, match=r"same ConfigMap keys \['core.a.b.py'\]"):
        CodeBundle(files=files)


def test_missing_driver_module_is_named():
    bundle = CodeBundle(files=(ShippedFile(path="ray_efa/training/__init__.py", text=""),))
    with pytest.raises(
        ManifestError,
        match=r"module ray_efa\.training\.driver is not in the shipped code \(no ray_efa/training/driver\.py",
    ):
        bundle.require_module("ray_efa.training.driver")


def test_missing_package_is_named():
    with pytest.raises(
        ManifestError,
        match=r"package ray_efa\.nothing to ship is not importable here \(no ray_efa/nothing/__init__\.py\)",
    ):
        collect_code(Settings(), packages=("ray_efa.nothing",))


def test_caches_and_hidden_files_are_not_shipped(tmp_path, monkeypatch):
    # GIVEN an importable package with a parent, a bytecode cache and a hidden directory next to its module
    for path in (
        "top/__init__.py",
        "top/pkg/__init__.py",
        "top/pkg/mod.py",
        "top/pkg/__pycache__/mod.py",
        "top/pkg/.hidden/x.py",
    ):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    # WHEN it is collected THEN only the package's modules, its parent's __init__ and settings.json ship
    assert collect_code(Settings(), packages=("top.pkg",)).paths() == [
        "settings.json",
        "top/__init__.py",
        "top/pkg/__init__.py",
        "top/pkg/mod.py",
    ]

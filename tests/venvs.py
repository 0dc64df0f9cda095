"""Fresh venvs that see only some of this venv's installed distributions, offline (tests/test_wheel.py and the
pydantic-alone import test of core.settings).

The dependencies are not downloaded: the closure of some requirements is resolved over the distributions installed
here (extras and markers honored; each installed version must satisfy the requirement) and linked file by file into
one folder, which a .pth file puts on the fresh venv's path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name


def run(args: list[str], extra_env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    """A command with no AWS credentials, no Python environment variables (but `extra_env`) and no package index."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CDK_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        AWS_EC2_METADATA_DISABLED="true",
        JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20",
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    env.update(extra_env or {})
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=240, **kwargs)


def closure(requirements: Iterable[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions these requirements need, transitively.

    Fails when a requirement is not installed here or the installed (locked) version is outside the declared range.
    """
    installed = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}
    todo = [(Requirement(r), "") for r in requirements]
    chosen: dict[NormalizedName, set[str]] = {}
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        assert name in installed, f"{req} is required but not installed in the test venv"
        dist = installed[name]
        assert req.specifier.contains(dist.version, prereleases=True), (
            f"the locked {name}=={dist.version} is outside the declared {req}"
        )
        first_time = name not in chosen
        new_extras = set(req.extras) - chosen.get(name, set())
        if not first_time and not new_extras:
            continue
        chosen.setdefault(name, set()).update(new_extras)
        for sub in dist.requires or []:  # its base requirements once, and those of each extra asked for
            for wanted in ({""} if first_time else set()) | new_extras:
                todo.append((Requirement(sub), wanted))
    return {name: installed[name] for name in chosen}


def link(dists: dict[str, metadata.Distribution], into: Path) -> None:
    """Symlink every file of these distributions (as their RECORD lists them) into one site folder."""
    for dist in dists.values():
        site = Path(str(dist.locate_file("")))  # a PathLike at run time; its declared type is a protocol of its own
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue  # console scripts live outside site-packages; bytecode is rebuilt
            target = into / file
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(site / file)


def fresh_venv(path: Path, requirements: Iterable[str], *, pip: bool) -> tuple[Path, Path]:
    """A venv (no system site-packages) that sees the closure of `requirements` and nothing else; (python, site)."""
    made = run([sys.executable, "-m", "venv", *([] if pip else ["--without-pip"]), str(path)])
    assert made.returncode == 0, made.stderr[-3000:]
    python = path / "bin" / "python"
    if pip:  # Python 3.11's venv seeds setuptools too: remove it, so the venv holds pip and the closure alone
        run([str(python), "-m", "pip", "uninstall", "-q", "-y", "setuptools"])
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    deps = path.parent / f"{path.name}-deps"
    link(closure(requirements), deps)
    (site / "linked-deps.pth").write_text(f"{deps}\n")
    return python, site

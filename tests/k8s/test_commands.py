"""Every command line the Ray pods run, through the interpreter that will run it: what no cluster test can catch.

KWOK completes every init container and runs no container at all (tests/cluster), so a misspelt program (`pyhton`),
a Python script that does not compile or a shell line that does not parse would pass every control-plane test and
fail only on EKS. Here each init and main container's command (and the lifecycle hooks, and the RayJob's entrypoint)
of every pod template of the synth meets the real thing: the program is looked up on PATH (this environment's, whose
Python has the Ray wheel the image runs: `python`, `ray`), `python -c` scripts are compiled by CPython, `python -m`
modules are found by its import system, and shell lines are parsed by bash (`bash -n`) or the image's /bin/sh.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from tests.k8s.conftest import BASE, synthesize

SHELLS = ("sh", "/bin/sh", "bash", "/bin/bash")
PATH = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
"""Where the programs are looked up: this environment's Python and its scripts (ray), then the system's."""
USER_CODE = BASE.replace(
    codeDir="examples/own-training/src",
    trainFunction="own_training.train:train_func",
    storagePath="s3://research-checkpoints/runs",
)


def _job_with_code_archive() -> list[dict[str, Any]]:
    from ray_efa.k8s.objects import ray_job_objects

    return ray_job_objects(USER_CODE, code_archive_uri="s3://research-checkpoints/runs/code/x.zip")


def _templates(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objects:
        if obj["kind"] == "RayCluster":
            specs = [(obj["metadata"]["name"], obj["spec"])]
        elif obj["kind"] == "RayJob":
            specs = [(obj["metadata"]["name"], obj["spec"]["rayClusterSpec"])]
            yield f"{obj['metadata']['name']} submitter", obj["spec"]["submitterPodTemplate"]
        else:
            continue
        for owner, spec in specs:
            yield f"{owner} head", spec["headGroupSpec"]["template"]
            for group in spec["workerGroupSpecs"]:
                yield f"{owner} worker {group['groupName']}", group["template"]


def command_lines(objects: list[dict[str, Any]]) -> Iterator[tuple[str, list[str]]]:
    """(where, argv) of every command the pods of `objects` run: init and main containers (args alone: the shell
    line KubeRay puts in front of `ray start`), preStop hooks, and each RayJob's entrypoint."""
    for obj in objects:
        if obj["kind"] == "RayJob":
            yield f"{obj['metadata']['name']} entrypoint", shlex.split(obj["spec"]["entrypoint"])
    for where, template in _templates(objects):
        spec = template["spec"]
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            at = f"{where} container {container['name']}"
            if container.get("command"):
                yield at, [*container["command"], *container.get("args", [])]
            elif container.get("args"):
                yield at, ["bash", "-c", " ".join(container["args"])]
            hook = ((container.get("lifecycle") or {}).get("preStop") or {}).get("exec")
            if hook:
                yield f"{at} preStop", hook["command"]


def problems(argv: list[str]) -> list[str]:
    """What the real interpreter says of `argv`: a program not found, a script that does not compile or parse."""
    program = argv[0]
    if shutil.which(program, path=PATH) is None:
        return [f"{program}: no such program"]
    name = Path(program).name
    if name.startswith("python") and argv[1:2] == ["-c"]:
        try:
            compile(argv[2], "<python -c>", "exec")
        except SyntaxError as error:
            return [f"python -c: {error}"]
    elif name.startswith("python") and argv[1:2] == ["-m"]:
        if find_spec(argv[2]) is None:
            return [f"python -m {argv[2]}: no such module"]
    elif program in SHELLS and argv[1:2] == ["-c"]:
        parsed = subprocess.run([program, "-n", "-c", argv[2]], capture_output=True, text=True)
        if parsed.returncode != 0:
            return [f"{program} -n: {parsed.stderr.strip()}"]
        # the first word of the line is a program too (`ray stop`, `compat=...`: an assignment is no program)
        first = shlex.split(argv[2])[0]
        if "=" not in first and not first.startswith(("[", "if", "for")) and shutil.which(first, path=PATH) is None:
            return [f"{first}: no such program"]
    return []


@pytest.mark.parametrize("objects", ["default", "code archive"])
def test_every_command_a_pod_runs_is_one_its_interpreter_accepts(objects):
    made = (
        [o for manifests in synthesize(BASE).charts.values() for o in manifests]
        if objects == "default"
        else _job_with_code_archive()
    )
    lines = list(command_lines(made))
    # (the default synth has init containers: the pip packages' install; the archive its code fetch)
    assert any("container" in where and argv[:2] == ["python", "-c"] for where, argv in lines), lines
    assert {where: problems(argv) for where, argv in lines} == {where: [] for where, _ in lines}


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["pyhton", "-c", "print(1)"], "pyhton: no such program"),
        (["python", "-c", "import sys\nprint(sys.argv"], "python -c:"),
        (["python", "-m", "ray_efa.training.drivr"], "no such module"),
        (["/bin/sh", "-c", "if true; then ray stop"], "/bin/sh -n:"),
        (["/bin/sh", "-c", "rya stop"], "rya: no such program"),
    ],
)
def test_a_typo_in_a_command_is_found(argv, says):
    (problem,) = problems(argv)
    assert says in problem

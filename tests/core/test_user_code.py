"""trainFunction, codeDir, jobName and trainConfig: parsed, checked without importing the code, every refusal naming
the setting, the value and what is allowed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ray_efa.core.settings import DEFAULT_TRAIN_FUNCTION, Settings, SettingsError
from ray_efa.core.user_code import check_user_code, code_dir_path, code_files, missing_imports

ROOT = Path(__file__).resolve().parents[2]


def _code(tmp_path: Path, files: dict[str, str]) -> Path:
    code = tmp_path / "code"
    for name, text in files.items():
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_text(text)
    return code


def _problem(settings: Settings) -> tuple[str, str]:
    with pytest.raises(SettingsError) as raised:
        check_user_code(settings)
    (problem,) = raised.value.problems
    return problem.key, problem.message


def test_the_default_is_the_built_in_function_and_needs_no_code_dir():
    code = check_user_code(Settings())
    assert (code.module, code.function, code.code_dir) == ("ray_efa.training.train", "train_func", None)
    assert code.source is not None and code.source.resolve() == ROOT / "training" / "train.py"
    assert Settings().training.builtin and Settings().training.train_function == DEFAULT_TRAIN_FUNCTION


def test_a_function_in_code_dir_is_found_without_importing_its_heavy_imports(tmp_path):
    # GIVEN a package whose module imports something this machine lacks
    code = _code(
        tmp_path,
        {
            "my_train/__init__.py": "",
            "my_train/loop.py": "import not_installed_here\n\ndef fit(config):\n    return config\n",
        },
    )
    # WHEN it is checked THEN it is found, and nothing was imported
    found = check_user_code(Settings.from_context({"trainFunction": "my_train.loop:fit", "codeDir": str(code)}))
    assert (found.code_dir, found.source) == (code, code / "my_train" / "loop.py")
    assert "my_train" not in sys.modules and "not_installed_here" not in sys.modules
    assert not Settings.from_context({"trainFunction": "my_train.loop:fit"}).training.builtin


@pytest.mark.parametrize(
    "source",
    [
        "from .impl import fit\n",
        "fit = make()\n",
        "if True:\n    def fit(c): pass\n",
        "async def fit(c): pass\n",
    ],
    ids=["re-export", "assignment", "conditional", "async"],
)
def test_a_function_bound_any_top_level_way_counts(tmp_path, source):
    code = _code(tmp_path, {"mod.py": source})
    check_user_code(Settings.from_context({"trainFunction": "mod:fit", "codeDir": str(code)}))


def test_a_missing_function_names_train_function_and_what_the_module_defines(tmp_path):
    code = _code(tmp_path, {"mod.py": "def train_loop(config): ...\n"})
    key, message = _problem(Settings.from_context({"trainFunction": "mod:train", "codeDir": str(code)}))
    assert key == "trainFunction"
    assert f"{code / 'mod.py'} defines no train at its top level (it defines train_loop)" in message


def test_a_missing_module_names_train_function_and_the_files_looked_for(tmp_path):
    code = _code(tmp_path, {"other.py": ""})
    key, message = _problem(Settings.from_context({"trainFunction": "pkg.mod:fit", "codeDir": str(code)}))
    assert key == "trainFunction" and f"codeDir {code}" in message and "no pkg/mod.py or pkg/mod/__init__.py" in message


def test_an_outside_module_without_code_dir_says_to_set_it():
    key, message = _problem(Settings.from_context({"trainFunction": "nowhere_to_be_found:fit"}))
    assert key == "trainFunction" and "set codeDir" in message


def test_a_module_that_does_not_parse_is_named_with_its_file_and_line(tmp_path):
    # GIVEN a train module whose line 3 does not parse
    code = _code(tmp_path, {"mod.py": "import os\n\ndef fit(:\n    pass\n"})
    # THEN the refusal names trainFunction, the file and the line
    key, message = _problem(Settings.from_context({"trainFunction": "mod:fit", "codeDir": str(code)}))
    assert key == "trainFunction"
    assert f"syntax error in {code / 'mod.py'}, line 3: invalid syntax" in message, message


@pytest.mark.parametrize(
    ("code_dir", "message"),
    [
        ("{tmp}/missing", "does not exist"),
        ("{root}", "not the app directory"),
        ("/", "filesystem root"),
        ("{tmp}/file.txt", "is not a folder"),
    ],
    ids=["missing", "repository-root", "filesystem-root", "a-file"],
)
def test_bad_code_dirs_are_refused_naming_code_dir(tmp_path, code_dir, message):
    (tmp_path / "file.txt").write_text("x")
    settings = Settings.from_context({"codeDir": code_dir.format(tmp=tmp_path, root=ROOT)})
    key, text = _problem(settings)
    assert key == "codeDir" and message in text


def test_a_code_dir_with_its_own_ray_efa_is_refused(tmp_path):
    code = _code(tmp_path, {"ray_efa/__init__.py": "", "mod.py": "def fit(c): ...\n"})
    key, message = _problem(Settings.from_context({"trainFunction": "mod:fit", "codeDir": str(code)}))
    assert key == "codeDir" and "shadow the driver" in message


def test_a_relative_code_dir_is_relative_to_the_app_directory(tmp_path, monkeypatch):
    # GIVEN an app directory (cdk.json) and a working directory below it
    (tmp_path / "cdk.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    # THEN codeDir is resolved against the app directory, as core.context finds it
    assert code_dir_path(Settings.from_context({"codeDir": "training"})) == tmp_path / "training"
    assert code_dir_path(Settings.from_context({"codeDir": "/abs/code"})) == Path("/abs/code")


def test_code_files_skip_caches_and_hidden_files(tmp_path):
    code = _code(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "",
            "pkg/__pycache__/a.cpython-311.pyc": "",
            ".git/config": "",
            "pkg/.env": "",
            "conf/run.yaml": "",
            "x.egg-info/PKG-INFO": "",
        },
    )
    assert [path for path, _ in code_files(code)] == ["conf/run.yaml", "pkg/__init__.py", "pkg/a.py"]


@pytest.mark.parametrize(
    ("context", "key", "message"),
    [
        ({"trainFunction": "my_train"}, "trainFunction", "must be module:function"),
        ({"trainFunction": "my-train:fit"}, "trainFunction", "must be module:function"),
        ({"jobName": "Exp_1"}, "jobName", "must be a DNS-1035 label (lowercase letters, digits and '-'"),
        ({"jobName": "e" * 44}, "jobName", "must be at most 43 characters, not 44"),
        ({"jobName": "exp-tcp"}, "jobName", "must not end with -tcp"),
        ({"trainConfig": "[1, 2]"}, "trainConfig", "must be a JSON object"),
        ({"trainConfig": "{lr: 1}"}, "trainConfig", "must be a JSON object (Expecting property name"),
        ({"trainConfig": '{"settings": {}}'}, "trainConfig", "must not use the keys settings"),
        ({"trainConfig": '{"_faults": {}}'}, "trainConfig", "must not use the keys _faults"),
    ],
    ids=["no-colon", "dash", "upper", "long", "tcp-suffix", "list", "bad-json", "settings", "underscore"],
)
def test_bad_values_name_the_setting(context, key, message):
    with pytest.raises(SettingsError) as raised:
        Settings.from_context(context)
    (problem,) = raised.value.problems
    assert problem.key == key and message in problem.message


def test_train_config_round_trips_through_json_and_replace():
    # GIVEN trainConfig from -c (a string) and from cdk.json (an object)
    given = {"lr": 0.001, "layers": [64, 64], "name": "mlp", "extra": {"a": None}}
    from_dash_c = Settings.from_context({"trainConfig": json.dumps(given)})
    from_json = Settings.from_context({"trainConfig": given})
    # THEN both hold the same object, which survives settings.json and replace(), and is never the caller's
    assert from_dash_c.training.train_config == from_json.training.train_config == given
    assert Settings.from_json(from_json.to_json()).training.train_config == given
    assert from_json.replace(steps=3).training.train_config == given
    assert from_json.training.train_config is not given
    assert Settings().training.train_config == {}


def test_an_import_that_is_neither_in_code_dir_nor_installed_is_named_with_its_line(tmp_path):
    # GIVEN a module that imports a package of codeDir, installed ones, one under `try:` and one that is nowhere
    code = tmp_path / "code"
    (code / "helpers").mkdir(parents=True)
    (code / "helpers" / "__init__.py").write_text("")
    (code / "mod.py").write_text(
        "import json\nimport numpy as np\nfrom helpers import x\ntry:\n    import optional_thing\nexcept ImportError:\n"
        "    pass\nfrom no_such_package_here.sub import y\n\ndef fit(config):\n    import also_missing_but_later\n"
    )
    code_found = check_user_code(Settings.from_context({"trainFunction": "mod:fit", "codeDir": str(code)}))
    # WHEN its imports are looked up (nothing of the code runs)
    (problem,) = missing_imports(code_found)
    # THEN the one missing at import time is named, with its line, as a trainFunction problem naming codeDir
    assert problem.key == "trainFunction" and problem.value == "mod:fit"
    assert f"{code / 'mod.py'} (line 8: import no_such_package_here.sub)" in problem.message
    assert f"neither in codeDir {code} nor installed" in problem.message


def test_a_module_whose_imports_are_all_there_has_no_problem(tmp_path):
    (tmp_path / "mod.py").write_text("import os\nimport pydantic\n\ndef fit(config):\n    pass\n")
    assert (
        missing_imports(check_user_code(Settings.from_context({"trainFunction": "mod:fit", "codeDir": str(tmp_path)})))
        == []
    )

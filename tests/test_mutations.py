"""tools/mutations.py, the mutation check `make test-mutations` runs: its list cannot rot silently. Every edit's old
text is in its file exactly once in this checkout, every test it names exists, and an edit whose text moved is an
error, never a mutation counted as killed. (The check itself, each edit failing its tests, is `make
test-mutations`'s: minutes, so not in `make test`.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.load_script import load_script

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    return load_script(ROOT / "tools" / "mutations.py")


mutations = _tool()


@pytest.mark.parametrize("mutation", mutations.MUTATIONS, ids=lambda m: m.name)
def test_every_edit_applies_to_this_checkout_once_and_names_tests_that_exist(mutation, tmp_path):
    # GIVEN a copy of the file the edit is for
    (tmp_path / mutation.file).parent.mkdir(parents=True)
    (tmp_path / mutation.file).write_text((ROOT / mutation.file).read_text(encoding="utf-8"), encoding="utf-8")
    # WHEN the edit is applied to it
    mutations.apply(mutation, tmp_path)
    # THEN the file changed where the edit says, and the tests it runs are files of the checkout
    assert mutation.new in (tmp_path / mutation.file).read_text(encoding="utf-8") and mutation.old != mutation.new
    assert (ROOT / mutation.tests[0]).is_file(), mutation.tests


def test_the_names_are_unique():
    names = [m.name for m in mutations.MUTATIONS]
    assert len(names) == len(set(names))


def test_an_edit_whose_old_text_moved_is_an_error_naming_it(tmp_path):
    # GIVEN an edit whose old text is no longer in its file (the code was rewritten)
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "x.py").write_text("a = 1\n", encoding="utf-8")
    stale = mutations.Mutation(name="stale", file="core/x.py", old="a = 2", new="a = 3", tests=("tests",), why="-")
    # THEN applying it raises, naming the mutation, the file and the count, and the file is left as it was
    with pytest.raises(mutations.MutationError, match=r"stale: the old text is in core/x.py 0 times"):
        mutations.apply(stale, tmp_path)
    assert (tmp_path / "core" / "x.py").read_text(encoding="utf-8") == "a = 1\n"


def test_the_copy_keeps_ray_efas_links_so_its_own_folders_import(tmp_path):
    # ray_efa/core -> ../core in the copy too: an edit of the copy's core/ is what its tests import, never this
    # checkout's (a link copied as a folder, or left out, would test the unmutated code)
    files = [name for name in mutations._tree_files(ROOT) if name.startswith(("ray_efa/", "core/"))]
    assert "ray_efa/core" in files
    mutations._copy_tree(ROOT, files, tmp_path)
    assert (tmp_path / "ray_efa" / "core").is_symlink()
    assert (tmp_path / "ray_efa" / "core" / "models.py").resolve() == (tmp_path / "core" / "models.py").resolve()

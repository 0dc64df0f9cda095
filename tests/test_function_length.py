"""tools/function_length.py, the check `make lint` runs: no function of the package over 80 lines (from the `def`
line to the body's last, decorators excluded, a bracket's continuation lines not counted again). Here it runs on this checkout, and on planted
functions, one line over and at the limit, so that a check that finds nothing cannot pass as one that holds."""

from __future__ import annotations

from pathlib import Path

from tests.load_script import load_script

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    return load_script(ROOT / "tools" / "function_length.py")


tool = _tool()


def _function(name: str, lines: int, *, indent: str = "", decorators: int = 0) -> str:
    """Source of a function `name` of exactly `lines` lines (def line to the body's last), under `decorators`."""
    return "".join(
        [
            f"{indent}@staticmethod\n" * decorators,
            f"{indent}def {name}():\n",
            *(f"{indent}    x = {i}\n" for i in range(lines - 1)),
        ]
    )


def test_no_function_of_the_package_is_over_the_limit():
    # GIVEN the package's folders THEN no function is longer than 80 lines (the message lists each with its length)
    assert tool.LIMIT == 80
    offenders = tool.long_functions([ROOT / folder for folder in tool.PACKAGE_FOLDERS])
    assert not offenders, "\n".join(map(str, offenders))
    # and the folders are the package's: each one a subpackage of ray_efa
    assert all((ROOT / folder / "__init__.py").is_file() for folder in tool.PACKAGE_FOLDERS)


def test_a_planted_long_function_is_listed_with_its_length(tmp_path, capsys):
    # GIVEN a module with a method one line over the limit (under two decorators), one at the limit, and a nested
    # function over it
    source = (
        "class Stack:\n"
        + _function("build", 81, indent="    ", decorators=2)
        + _function("fits", 80, indent="    ")
        + "def outer():\n"
        + _function("inner", 90, indent="    ")
    )
    (tmp_path / "mod.py").write_text(source)
    # WHEN the tool runs on it
    found = tool.long_functions([tmp_path], root=tmp_path)
    # THEN the over-long ones are listed by qualified name, def line and length, longest first; decorators do not
    # count, and 80 lines is allowed
    assert [(f.name, f.line, f.length) for f in found] == [
        ("outer", 165, 91),
        ("outer.inner", 166, 90),
        ("Stack.build", 4, 81),
    ]
    # and the command says so, exit 1
    assert tool.main([str(tmp_path / "mod.py")]) == 1
    out = capsys.readouterr()
    assert "mod.py:4 Stack.build: 81 lines (limit 80)" in out.out and "3 function(s) over 80 lines" in out.err


def test_a_module_of_short_functions_passes(tmp_path, capsys):
    (tmp_path / "mod.py").write_text(_function("short", 80) + "async " + _function("other", 5))
    assert tool.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


def test_a_statement_laid_over_several_lines_counts_once():
    # GIVEN one function written twice: its call's arguments on one line, and one argument a line as `ruff format`
    # lays out a call too long for one, with a multi-line string inside the brackets and a docstring outside them
    compact = 'def f():\n    """Two\n    lines."""\n    x = g(1, 2, "a")\n    return x\n'
    exploded = 'def f():\n    """Two\n    lines."""\n    x = g(\n        1,\n        2,\n        """a\nb""",\n    )\n    return x\n'
    # THEN both are as long: the def, the docstring's two lines, the statement and the return
    assert [length for _, _, length in tool.function_lengths(compact)] == [5]
    assert [length for _, _, length in tool.function_lengths(exploded)] == [5]

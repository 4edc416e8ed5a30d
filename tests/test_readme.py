"""The README's Python snippets run, in order, as a user would paste them (those that
need the output of the README's shell commands, marked on their first line, compile)."""

import os
import re

import pytest

README = os.path.join(os.path.dirname(__file__), "..", "README.md")
AFTER_SHELL_COMMANDS = "# after the shell commands above"


def python_snippets() -> list[str]:
    with open(README) as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_the_readme_has_python_snippets():
    assert len(python_snippets()) >= 2


@pytest.mark.slow
def test_the_readme_python_snippets_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for snippet in python_snippets():
        code = compile(snippet, README, "exec")
        if not snippet.startswith(AFTER_SHELL_COMMANDS):
            exec(code, namespace)  # noqa: S102
    assert os.path.isdir(tmp_path / "runs" / "example" / "checkpoints")

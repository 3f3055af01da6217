"""The README's Python example runs as written."""

from __future__ import annotations

import re
import shutil

from conftest import ROOT


def test_readme_python_api_example_runs(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert (tmp_path / "runs" / "api-example" / "summary.json").exists()
    assert (tmp_path / "runs" / "api-example" / "cartpole.pt").exists()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"Run the whole test suite.*?```bash\n(.*?)\n```", readme, re.S).group(1).strip()
    assert command in (ROOT / ".ci" / "run").read_text()

"""``rlplug new-plugin NAME``: a new third-party plugin package, ready to install, test and publish.

It writes ``rlplug-NAME/`` with a ``pyproject.toml`` declaring the ``rlplug`` entry point, a package
``rlplug_NAME/`` whose ``plugin.py`` registers one example estimator through the hooks, its tests (through
``rlplug.make``, as a recipe builds components), an example recipe and a README. The layout follows
``examples/rlplug-example-plugin``; ``docs/writing-plugins.md`` explains each part. An existing directory is
never touched: the files are written to a temporary directory beside it and moved into place at the end.
"""

from __future__ import annotations

import argparse
import keyword
import os
import re
import shutil
import tempfile
from pathlib import Path

#: A plugin name: lowercase words of letters and digits joined by single '-' or '_', starting with a letter.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*$")
MAX_NAME_LENGTH = 40
#: The component the scaffold registers (qualified by the plugin's name wherever it is used).
EXAMPLE_COMPONENT = "one-step"


def add_commands(subparsers) -> None:
    """Adds ``new-plugin``."""
    new = subparsers.add_parser(
        "new-plugin", help="create a third-party plugin package (rlplug-NAME/) to fill in",
        description="Create rlplug-NAME/: a pip-installable plugin package with its entry point, a plugin "
                    "module registering one example estimator, tests, an example recipe and a README. "
                    "docs/writing-plugins.md walks through it.")
    new.add_argument("name", metavar="NAME",
                     help="the plugin's name (lowercase letters, digits, '-' or '_'): the entry point's name, "
                          "shown by 'rlplug list' and used in qualified names (NAME:component)")
    new.add_argument("--dir", type=Path, default=Path("."), metavar="PATH",
                     help="where to create rlplug-NAME/ (default: the current directory)")
    new.set_defaults(handler=cmd_new_plugin)


def check_name(name: str) -> str:
    """``name`` if it can name a plugin and its package, else a :class:`UserError` saying why."""
    from rlplug.errors import UserError
    from rlplug.registry.manager import BUILTIN_PLUGIN

    shown = repr(name)
    for prefix in ("rlplug-", "rlplug_"):
        if name.startswith(prefix) and len(name) > len(prefix):
            raise UserError(f"plugin name {shown}: leave out the '{prefix}' prefix, the package is named "
                            f"rlplug-NAME already (try: {name[len(prefix):]})")
    if name == BUILTIN_PLUGIN:
        raise UserError(f"plugin name {shown} is rlplug's own plugin name; choose another")
    if not NAME_PATTERN.match(name) or len(name) > MAX_NAME_LENGTH:
        hint = f" (try: {name.lower()})" if NAME_PATTERN.match(name.lower()) else ""
        raise UserError(f"plugin name {shown} is not usable: use at most {MAX_NAME_LENGTH} lowercase letters, "
                        f"digits and single '-' or '_' between them, starting with a letter, e.g. 'gridworlds'"
                        f"{hint}")
    if keyword.iskeyword(name):  # harmless in rlplug_NAME, but confusing as an entry point name
        raise UserError(f"plugin name {shown} is a Python keyword; choose another")
    return name


def package_name(name: str) -> str:
    return "rlplug_" + name.replace("-", "_")


def cmd_new_plugin(args: argparse.Namespace) -> int:
    target = create_plugin(args.name, args.dir)
    shown = target
    print(f"created {shown}/:")
    for path in sorted(p for p in target.rglob("*") if p.is_file()):
        print(f"  {path.relative_to(target)}")
    print()
    print("next:")
    print(f"  pip install -e {shown}")
    print(f"  python -m rlplug show {args.name}:{EXAMPLE_COMPONENT}")
    print(f"  python -m pytest {shown}/tests")
    print(f"  python -m rlplug run {shown}/recipes/cartpole-ppo.toml")
    print("The install registers the plugin through its entry point. Then replace the example estimator with")
    print("your own components: docs/writing-plugins.md walks through each part.")
    return 0


def create_plugin(name: str, where: Path) -> Path:
    """Write ``where/rlplug-NAME/`` and return its path; refuses to touch anything that exists."""
    from rlplug.errors import UserError
    from rlplug.version import __version__

    check_name(name)
    target = where / f"rlplug-{name}"
    if target.exists() or target.is_symlink():
        raise UserError(f"{target} already exists; new-plugin never overwrites: remove it or choose "
                        f"another --dir or NAME")
    if where.exists() and not where.is_dir():
        raise UserError(f"--dir {where}: not a directory")
    try:
        where.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".rlplug-{name}-", dir=where))
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp's 0o700 is for secrets, not for a source tree
    except OSError as error:
        raise UserError(f"--dir {where}: cannot create the plugin there: {error.strerror or error}") from None
    try:
        for relative, text in render(name, __version__).items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if target.exists():  # created meanwhile by someone else: still never overwrite
            raise UserError(f"{target} already exists; new-plugin never overwrites")
        staging.rename(target)
    except OSError as error:
        raise UserError(f"{target}: cannot write the plugin: {error.strerror or error}") from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def render(name: str, rlplug_version: str) -> dict[str, str]:
    """``{relative path: file text}`` of the package for plugin ``name``."""
    package = package_name(name)
    values = {"@NAME@": name, "@PACKAGE@": package, "@COMPONENT@": EXAMPLE_COMPONENT,
              "@RLPLUG@": rlplug_requirement(rlplug_version), "@QUALIFIED@": f"{name}:{EXAMPLE_COMPONENT}"}

    def fill(text: str) -> str:
        for token, value in values.items():
            text = text.replace(token, value)
        return text.lstrip("\n")

    return {
        "pyproject.toml": fill(PYPROJECT),
        "README.md": fill(README),
        ".gitignore": fill(GITIGNORE),
        f"{package}/__init__.py": fill(INIT),
        f"{package}/plugin.py": fill(PLUGIN),
        f"{package}/estimators.py": fill(ESTIMATORS),
        "tests/test_plugin.py": fill(TESTS),
        "recipes/cartpole-ppo.toml": fill(RECIPE),
    }


def rlplug_requirement(version: str) -> str:
    """``rlplug>=X.Y,<NEXT``: this rlplug and its compatible releases (the next minor while rlplug is 0.x)."""
    parts = [int(p) if p.isdigit() else 0 for p in (version.split(".") + ["0", "0"])[:2]]
    major, minor = parts
    upper = f"{major}.{minor + 1}" if major == 0 else f"{major + 1}"
    return f"rlplug>={major}.{minor},<{upper}"


PYPROJECT = '''
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "rlplug-@NAME@"
version = "0.1.0"
description = "An rlplug plugin: @NAME@"
readme = "README.md"
requires-python = ">=3.11"
# Choose a license before publishing, e.g.  license = "MIT"  (a string needs setuptools >= 77).
# torch, TorchRL and TensorDict come with rlplug: depending on rlplug alone keeps them in step with it.
dependencies = ["@RLPLUG@"]

[project.optional-dependencies]
test = ["pytest>=8"]

# What makes this package a plugin: rlplug imports this module and calls its hooks. The entry point's
# name (@NAME@) is the plugin's name in `rlplug list` and in qualified names (@QUALIFIED@).
[project.entry-points.rlplug]
@NAME@ = "@PACKAGE@.plugin"

[tool.setuptools.packages.find]
include = ["@PACKAGE@*"]

[tool.pytest.ini_options]
testpaths = ["tests"]
'''

README = '''
# rlplug-@NAME@

A plugin for rlplug (reinforcement-learning components trained from TOML recipes). It adds:

| kind      | name          | parameters          | what it is |
|-----------|---------------|---------------------|------------|
| estimator | `@COMPONENT@` | `gamma` (0..1, 0.99) | one-step TD targets `r + gamma * V(s')` (cut at termination); writes `value_target` and `advantage` |

The estimator is the example `rlplug new-plugin` starts from: replace it with your own components.

## Install and use

```sh
pip install -e .                              # the entry point makes rlplug find the plugin
python -m rlplug list                         # @COMPONENT@, from plugin "@NAME@"
python -m rlplug show @QUALIFIED@             # its parameters, types, defaults and descriptions
python -m rlplug run recipes/cartpole-ppo.toml
```

In a recipe, `use = "@COMPONENT@"`, or the qualified `use = "@QUALIFIED@"` where another plugin registers the
same name. From Python: `rlplug.make("estimator", "@QUALIFIED@", gamma=0.9)`.

## Layout

- `pyproject.toml`: the `[project.entry-points.rlplug]` entry naming `@PACKAGE@.plugin`.
- `@PACKAGE@/plugin.py`: the hooks (`@rlplug.hookimpl`), one per kind of component, each calling
  `register(name, factory)`. A factory's signature is its component's recipe table.
- `@PACKAGE@/estimators.py`: the estimator itself, a TensorDict module (torch is imported only here).
- `tests/test_plugin.py`: builds the component through `rlplug.make`, as a recipe would.
- `recipes/cartpole-ppo.toml`: PPO on CartPole-v1 using the estimator.

## Test and publish

```sh
pip install -e ".[test]" && python -m pytest
python -m pip install build twine
python -m build                               # dist/*.whl and dist/*.tar.gz
python -m twine upload dist/*
```
'''

GITIGNORE = '''
__pycache__/
*.egg-info/
build/
dist/
runs/
.pytest_cache/
'''

INIT = '''
"""rlplug-@NAME@: an rlplug plugin.

rlplug finds it through the ``rlplug`` entry point in ``pyproject.toml``, which names
:mod:`@PACKAGE@.plugin`; the components themselves live in modules imported only when built.
"""

__version__ = "0.1.0"
'''

PLUGIN = '''
"""The hooks rlplug calls for the ``@NAME@`` plugin.

rlplug imports this module through the entry point in ``pyproject.toml`` and calls each ``@rlplug.hookimpl``
function with a ``register`` callback. A factory's signature is its component's recipe table: parameter names
are the keys, annotations the types rlplug checks (``rlplug.Range``, ``rlplug.Check`` in ``Annotated``),
defaults the defaults. Parameters named after ``rlplug.CONTEXT_NAMES`` (``device``, ``observation_spec``...)
are filled in by rlplug, never by a recipe. Only ``rlplug`` and ``typing`` are imported here: torch is
imported inside the factories, so that ``rlplug list`` stays quick.
"""

from __future__ import annotations

from typing import Annotated

import rlplug

Discount = Annotated[float, rlplug.Range(ge=0.0, le=1.0)]


def make_one_step(gamma: Discount = 0.99):
    """One-step TD targets r + gamma * V(s'); writes ``value_target`` and ``advantage``.

    Where a step terminated its episode the target is the reward alone; a truncation still bootstraps.

    Args:
        gamma: the discount applied to the critic's value of the next state.
    """
    from @PACKAGE@.estimators import OneStepTD

    return OneStepTD(gamma=gamma)


@rlplug.hookimpl
def rlplug_register_estimators(register):
    register("@COMPONENT@", make_one_step)


# More kinds, one hook each (their contracts: rlplug/registry/hookspecs.py):
# rlplug_register_envs, rlplug_register_networks, rlplug_register_algorithms, rlplug_register_loggers.
'''

ESTIMATORS = '''
"""The ``@COMPONENT@`` estimator: one-step TD targets over a batch laid out ``[*batch, time, 1]``.

It reads rlplug's estimator inputs (``state_value``, ``("next", "state_value")``, ``("next", "reward")``,
``("next", "terminated")``) and writes::

    value_target[t] = r[t] + gamma * V(s[t+1]) * (1 - terminated[t])
    advantage[t]    = value_target[t] - V(s[t])
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase


class OneStepTD(TensorDictModuleBase):
    in_keys = ["state_value", ("next", "state_value"), ("next", "reward"), ("next", "terminated")]
    out_keys = ["value_target", "advantage"]

    def __init__(self, gamma: float = 0.99):
        super().__init__()
        self.gamma = gamma

    @torch.no_grad()
    def forward(self, batch: TensorDictBase) -> TensorDictBase:
        value = batch.get("state_value")
        reward = batch.get(("next", "reward")).to(value.dtype)
        alive = (~batch.get(("next", "terminated")).bool()).to(value.dtype)
        target = reward + self.gamma * alive * batch.get(("next", "state_value"))
        batch.set("value_target", target)
        batch.set("advantage", target - value)
        return batch
'''

TESTS = '''
"""The @NAME@ plugin's components, built the way a recipe builds them: through ``rlplug.make``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import rlplug
from rlplug.recipe import load

ROOT = Path(__file__).resolve().parent.parent
#: The qualified name (plugin:component) finds this plugin's estimator even where another registers the name.
ESTIMATOR = "@QUALIFIED@"


def batch(reward, terminated, value, next_value):
    column = lambda xs, dtype=torch.float32: torch.tensor(xs, dtype=dtype).unsqueeze(-1)  # noqa: E731
    return TensorDict({
        "state_value": column(value),
        "next": {"reward": column(reward), "done": column(terminated, torch.bool),
                 "terminated": column(terminated, torch.bool), "state_value": column(next_value)},
    }, batch_size=[len(reward)])


def test_the_plugin_registers_its_estimator():
    spec = rlplug.get_registry().lookup("estimator", ESTIMATOR)
    assert (spec.plugin, spec.name) == ("@NAME@", "@COMPONENT@")
    assert "gamma" in spec.schema.params


def test_one_step_targets():
    data = batch(reward=[1.0, 0.0, 2.0], terminated=[False, False, True], value=[0.5, 0.5, 0.5],
                 next_value=[2.0, 4.0, 8.0])
    out = rlplug.make("estimator", ESTIMATOR, gamma=0.5)(data)
    expected = [1.0 + 0.5 * 2.0, 0.0 + 0.5 * 4.0, 2.0]  # the last step terminated: no bootstrap
    assert out["value_target"].squeeze(-1).tolist() == pytest.approx(expected)
    assert out["advantage"].squeeze(-1).tolist() == pytest.approx([e - 0.5 for e in expected])


def test_parameters_are_checked_like_a_recipe():
    with pytest.raises(rlplug.UserError, match="<= 1"):
        rlplug.make("estimator", ESTIMATOR, gamma=1.5)
    with pytest.raises(rlplug.UserError, match="unknown key"):
        rlplug.make("estimator", ESTIMATOR, gama=0.9)


def test_the_example_recipe_is_valid():
    recipe = load(ROOT / "recipes" / "cartpole-ppo.toml")
    assert recipe.algorithm.params["advantage"].spec.qualified_name == ESTIMATOR
'''

RECIPE = '''
# PPO on CartPole-v1 with the @NAME@ plugin's one-step TD estimator.
# Needs the plugin installed (pip install -e .); run:  python -m rlplug run recipes/cartpole-ppo.toml
# python -m rlplug init ppo --env CartPole-v1 writes a recipe with every key and its meaning.
[run]
seed = 0
total_frames = 50_000

[env]
use = "gym"
id = "CartPole-v1"
num_envs = 8

[algorithm]
use = "ppo"
frames_per_batch = 256
epochs = 10
minibatch_size = 128
lr = 1e-3

[algorithm.advantage]
use = "@QUALIFIED@"     # the qualified name: plugin, then component
gamma = 0.98

[algorithm.value_target]
use = "from_advantage"  # advantage + state_value: the same target @COMPONENT@ computed

[eval]
episodes = 5
'''


"""The cases of a spec file outside a pytest session: what a test, a Hypothesis example or the
command line loads by id (every Case's repr is a `load_case(...)` call).

Such a caller has no session to ask for its checks, so the registry is made as pytest would
make it for the spec's project: the built-in checks, the `pytest_optimtest.checks` entry
points, and the `pytest_optimtest_checks()` hooks of the conftest.py files from the spec's
folder up to the project root (the first folder with a pyproject.toml, setup.cfg, tox.ini,
pytest.ini or .git)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path

from .checks import CHECKS, Check, Registry
from .checks.registry import entry_point_checks
from .spec import Case

ROOT_MARKERS = ("pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini", ".git")


def project_registry(near: str | Path) -> Registry:
    """The checks a pytest session in the project of `near` (a spec file or folder) would have."""
    return _registry_of(_conftests(Path(near).resolve()))


def load_cases(path: str | Path, registry: Registry | None = None) -> list[Case]:
    """Every optimizer case of the spec at `path`, for `registry` (default: `project_registry(path)`)."""
    return (registry or project_registry(path)).optimizer_cases(path)


def load_case(path: str | Path, case_id: str, registry: Registry | None = None) -> Case:
    """The case `case_id` of the spec at `path` (KeyError naming the closest ids)."""
    return (registry or project_registry(path)).case(path, case_id)


def _conftests(start: Path) -> tuple[Path, ...]:
    folder = start if start.is_dir() else start.parent
    found = []
    for candidate in (folder, *folder.parents):
        if (candidate / "conftest.py").is_file():
            found.append(candidate / "conftest.py")
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            break
    return tuple(reversed(found))  # outermost first, as pytest loads them


@functools.lru_cache(maxsize=8)
def _registry_of(conftests: tuple[Path, ...]) -> Registry:
    checks: list[Check] = []
    for path in conftests:
        hook = getattr(_import_conftest(path), "pytest_optimtest_checks", None)
        if hook is not None:
            checks += list(hook() or [])
    checks += entry_point_checks()
    return CHECKS.with_checks(checks) if checks else CHECKS


def _import_conftest(path: Path) -> object:
    """Import a conftest.py under a name of its own (several projects' conftests may be loaded)."""
    name = f"_optimtest_conftest_{abs(hash(str(path)))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # as pytest's rootdir-relative import: the conftest's own imports
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.path.remove(str(path.parent))
    return module

"""The docs stay true: the reference is generated from the code (a key, check or option added in
code appears in it; one without a description is an error), every spec snippet in README.md and
docs/ is a valid spec, and the tutorial's commands run."""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
from functools import partial
from pathlib import Path

import pytest
from pydantic import BaseModel, Field
from warm import run_pytest

from pytest_optimtest import Check, plugin, reference
from pytest_optimtest.__main__ import build_parser
from pytest_optimtest.checks import CHECKS
from pytest_optimtest.checks.base import Verdict
from pytest_optimtest.spec.schema import Spec

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SPEC_SNIPPET = re.compile(r"^```yaml\n(.*?)^```", re.S | re.M)  # a yaml block with a title is some other file
BASE_SPEC = "optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\n"


class Budget(BaseModel):
    """How much the planted check may spend."""

    seconds: float = Field(1.0, description="the planted check's budget")


def _planted_check(**docs: str) -> Check:
    return Check("planted_budget", lambda case, runs: Verdict("ok", {"ok": True}), "the planted check's one line",
                 section=Budget, section_key="planted_budget", **docs)


def _planted_option(parser) -> None:
    parser.getgroup("planted").addoption("--planted-option", action="store_true", help="the planted option's help")


def test_the_reference_shows_a_key_a_check_and_an_option_added_in_code(tmp_path):
    registry = CHECKS.with_checks([_planted_check(proves="a pass needs the budget kept", red="the budget was spent")])
    example = tmp_path / "budgeted.yaml"
    example.write_text("optimizer: torch.optim.SGD\nplanted_budget: {seconds: 3.5}\n")

    keys, checks = reference.spec_keys(registry, [example]), reference.checks(registry)
    options = reference.options([plugin.pytest_addoption, _planted_option])

    assert "| `planted_budget` |" in keys and "the planted check's budget" in keys  # the section and its field
    assert "| the planted check's budget | `3.5` (budgeted.yaml) |" in keys  # an example, from a spec that gives it
    assert "### planted_budget" in checks and "a pass needs the budget kept" in checks and "the budget was spent" in checks
    assert "`--planted-option`" in options and "the planted option's help" in options
    assert "planted" not in reference.checks(CHECKS)  # a temporary registry; the built-in one is untouched


def test_something_without_a_description_fails_the_reference():
    with pytest.raises(reference.Undocumented, match="'planted_budget' has no proves"):
        reference.checks(CHECKS.with_checks([_planted_check(red="the budget was spent")]))

    class Bare(BaseModel):
        """A section with an undocumented key."""

        seconds: float = 1.0

    bare = Check("planted_bare", lambda case, runs: None, "one line", section=Bare, proves="p", red="r")
    with pytest.raises(reference.Undocumented, match="spec key 'seconds' of Bare has no description"):
        reference.spec_keys(CHECKS.with_checks([bare]))

    with pytest.raises(reference.Undocumented, match="--bare has no help"):
        reference.options([lambda parser: parser.addoption("--bare")])


def test_every_builtin_key_check_option_and_command_is_documented():
    assert all(f"### {name} " in reference.checks(CHECKS) for name in CHECKS)
    keys = reference.spec_keys(CHECKS)
    assert all(f"| `{key}` |" in keys for key in Spec.model_fields)
    assert "`--optim-spec`" in reference.options([plugin.pytest_addoption])
    assert all(f"### `{name}`" in reference.commands(build_parser()) for name in ("schema", "check", "init", "table"))


def _snippets() -> list[tuple[str, str]]:
    found = []
    for path in DOC_FILES:
        text = path.read_text()
        for match in SPEC_SNIPPET.finditer(text):
            found.append((f"{path.relative_to(ROOT)}:{text[:match.start()].count(chr(10)) + 2}", match.group(1)))
    return found


@pytest.mark.parametrize(("where", "snippet"), _snippets(), ids=[w for w, _ in _snippets()])
def test_every_spec_snippet_in_the_docs_is_a_valid_spec(where, snippet, tmp_path):
    """A whole spec as it is; a fragment (top-level keys of a spec) under a base spec's optimizer."""
    whole = re.search(r"^(optimizer|kind):", snippet, re.M) is not None
    path = tmp_path / "snippet.yaml"
    path.write_text(snippet if whole else BASE_SPEC + snippet)
    CHECKS.load_spec(path)  # schema and the checks' sections; SpecError names the file, line and key


def _tutorial_commands() -> list[list[str]]:
    text = (ROOT / "docs" / "getting-started.md").read_text()
    block = text[text.index("Run it:"):]
    block = block[block.index("```bash\n") + len("```bash\n"):block.index("```", block.index("```bash\n") + 7)]
    commands = [shlex.split(line, comments=True) for line in block.splitlines() if line.strip() and not line.startswith("cd ")]
    assert commands and all(c[:3] == ["python", "-m", "pytest"] for c in commands), commands
    return [c[3:] for c in commands]


def test_the_tutorials_commands_run(pytester):
    """Each command of the tutorial, as written: the selective one runs whole; the full runs are
    collected here (the whole spec without closures runs in test_readme_tutorial, and the closure
    variants in the main job's examples, to keep the suite fast)."""
    for name in ("lion.py", "lion.yaml"):
        shutil.copy(ROOT / "examples" / "lion" / name, pytester.path / name)
    for args in _tutorial_commands():
        selective = "-k" in args
        run = partial(run_pytest, pytester) if selective else pytester.runpytest_inprocess  # collecting imports no torch twice
        result = run(*args, "--optim-device", "cpu", "-p", "no:randomly", *(() if selective else ("--collect-only", "-q")))
        assert result.ret == 0, (args, result.stdout.str()[-3000:])
        if selective:
            outcomes = result.parseoutcomes()
            assert outcomes.get("passed", 0) > 0 and not outcomes.get("failed"), outcomes


def _load(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_release_run_becomes_a_row_of_the_compatibility_table(tmp_path, monkeypatch):
    """tools/torch_release.py condenses a main job's report; the docs build renders the rows."""
    import datetime
    import json

    release, hooks = _load(ROOT / "tools" / "torch_release.py"), _load(ROOT / "docs" / "hooks.py")
    items = [{"check": "parity", "outcome": "passed"}, {"check": "kernel_count", "outcome": "passed"},
             {"check": "kernel_count", "outcome": "skipped"}, {"check": "law_hooks", "outcome": "xfailed"}]
    row = release.release_row({"torch": "2.15.0+cu130", "items": items}, "2.15.0", "cpu",
                              datetime.datetime(2026, 11, 26, tzinfo=datetime.timezone.utc), 0, "python tools/torch_release.py 2.15.0")
    assert row["outcomes"] == {"passed": 2, "skipped": 1, "xfailed": 1} and row["kernel_count"] == {"passed": 1, "skipped": 1}
    (tmp_path / "torch-2.15.0-cpu.json").write_text(json.dumps(row))
    monkeypatch.setattr(hooks, "RELEASES", tmp_path)
    assert "| 2.15.0+cu130 | cpu | 2 | 0 | 1 | 1 | 1 / 1 | 0 | 2026-11-26 | `python tools/torch_release.py 2.15.0` |" in hooks._releases()
    (tmp_path / "torch-2.11.0-cuda.json").write_text(json.dumps({**row, "device": "cuda", "note": "mended since"}))
    assert "| cuda | 2 | 0 | 1 | 1 | 1 / 1 | 0 | 2026-11-26 | `python tools/torch_release.py 2.15.0` | mended since |" in hooks._releases()


def test_the_release_tool_passes_what_follows_double_dash_to_pytest():
    release = _load(ROOT / "tools" / "torch_release.py")
    parser = argparse.ArgumentParser()
    parser.add_argument("torch")
    parser.add_argument("--suite", action="store_true")
    args, pytest_args = release.parse(parser, ["2.15.0", "--suite", "--", "-p", "no:cacheprovider", "-k", "fsdp"])
    assert (args.torch, args.suite, pytest_args) == ("2.15.0", True, ["-p", "no:cacheprovider", "-k", "fsdp"])
    assert release.parse(parser, ["2.15.0"])[1] == []


def test_update_mode_rechecks_what_it_wrote_and_the_row_shows_the_recheck(tmp_path, monkeypatch):
    """A release run with --update-expected skips the kernel counts it has no entry for, writes them,
    and runs those items again: their outcomes replace the first run's; other reds still count."""
    import json
    import subprocess

    release = _load(ROOT / "tools" / "torch_release.py")
    first = {"torch": "2.12", "items": [{"nodeid": "a::parity", "check": "parity", "outcome": "passed"},
                                        {"nodeid": "a::kernel_count", "check": "kernel_count", "outcome": "skipped"}]}
    commands = []

    def run(command, **kwargs):
        commands.append(command)
        (tmp_path / "recheck.json").write_text(json.dumps({"items": [{"nodeid": "a::kernel_count", "check": "kernel_count",
                                                                      "outcome": "passed"}]}))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(release.subprocess, "run", run)
    merged, code = release.recheck(Path("python"), first, 0, ["pytest", "--optim-spec", "specs/"], tmp_path)
    assert commands[0][-4:] == ["-k", release.RECHECKED, "--optim-report", str(tmp_path / "recheck.json")]
    assert sorted((r["check"], r["outcome"]) for r in merged["items"]) == [("kernel_count", "passed"), ("parity", "passed")]
    assert code == 0
    first["items"][0]["outcome"] = "failed"  # a red the recheck did not rerun still fails the release
    assert release.recheck(Path("python"), first, 1, ["pytest"], tmp_path)[1] == 1
    # a recheck that dies before writing its report: the first run stands, and the release fails
    monkeypatch.setattr(release.subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 3))
    assert release.recheck(Path("python"), first, 0, ["pytest"], tmp_path) == (first, 3)

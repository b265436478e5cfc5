"""The tutorial's spec (README.md, docs/getting-started.md) runs and passes, and the fuzzing page's
strategies example runs, so the docs stay true."""

from __future__ import annotations

import shutil
from pathlib import Path

from warm import run_pytest

from pytest_optimtest.harness.torch_api import fsdp2_runs_on_cpu, torch_version

LION = Path(__file__).resolve().parent.parent / "examples" / "lion"


def test_tutorial_spec_passes(pytester):
    for name in ("lion.py", "lion.yaml"):
        shutil.copy(LION / name, pytester.path / name)
    result = run_pytest(pytester, "--optim-spec", "lion.yaml", "--optim-device", "cpu", "-k", "not closure")
    # 4 cases x (parity, kernel_count, recompile); 2 plain cases x (graph_breaks + 4 in-backward checks);
    # the first case's once-per-optimizer checks (closure_graph_break is deselected by -k; no_leak passes and
    # reports the GraphModule cycle); distributed and zero, fsdp and checkpoint on the first case; the nine laws
    # on by default there, less law_closure_loss (deselected by -k); on a torch the spec records no kernel count
    # for, the four kernel_count items skip, and where FSDP2 cannot shard on CPU so do fsdp and checkpoint
    unrecorded = 0 if f'"{torch_version()}": {{cpu:' in (LION / "lion.yaml").read_text() else 4
    unsharded = 0 if fsdp2_runs_on_cpu() else 2
    result.assert_outcomes(passed=4 * 3 + 2 * 5 + 4 + 2 + 2 + 8 - unrecorded - unsharded, skipped=unrecorded + unsharded)


def test_the_fuzzing_pages_strategies_example_runs(monkeypatch, tmp_path):
    page = (LION.parent.parent / "docs" / "fuzzing.md").read_text()
    start = page.index("@given(spec_cases")
    begin = page.rindex("```python", 0, start) + len("```python")
    block = page[begin:page.index("```", start)]
    # a file of its own, its lines numbered as in the page: Hypothesis reads the test's source, and on
    # Python 3.12 tokenizing the page's prose around the block raises
    example = tmp_path / "fuzzing_md_example.py"
    example.write_text("\n" * page.count("\n", 0, begin) + block)
    monkeypatch.chdir(LION.parent.parent)
    namespace: dict = {}
    exec(compile(example.read_text(), str(example), "exec"), namespace)
    namespace["test_adam_never_makes_nan"]()

"""The README's tutorial spec runs and passes, so the README stays true."""

from __future__ import annotations

import shutil
from pathlib import Path

LION = Path(__file__).resolve().parent.parent / "examples" / "lion"


def test_tutorial_spec_passes(pytester):
    for name in ("lion.py", "lion.yaml"):
        shutil.copy(LION / name, pytester.path / name)
    result = pytester.runpytest_subprocess("--optim-spec", "lion.yaml", "--optim-device", "cpu", "-k", "not closure")
    result.assert_outcomes(passed=4 * 2 + 2 * 4)  # 4 plain cases x (parity, kernel_count) + 2 x 4 in-backward checks

"""specs/ecosystem/record.py: a run's reds as xfail rules that say which failure they expect."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

RECORD = Path(__file__).resolve().parent.parent / "specs" / "ecosystem" / "record.py"


def _record_module():
    spec = importlib.util.spec_from_file_location("ecosystem_record", RECORD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _red(check: str, reason: str, verdict: dict | None = None) -> dict:
    return {"spec": "specs/ecosystem/x/adam.yaml", "case": "adam-default-cpu", "check": check, "device": "cpu",
            "outcome": "failed", "reason": reason, "verdict": verdict}


def test_each_recorded_xfail_matches_the_failure_it_was_recorded_from_with_numbers_free():
    """record.py wrote rules without `match`: an item failing later for another reason stayed an xfail."""
    record = _record_module()
    law = _red("law_equivalent", "[law_equivalent] adam-default-cpu (/x/specs/ecosystem/x/adam.yaml:6) adam-default-cpu: "
                                 "law equivalent[tensor_lr] broken: {lr: {'tensor': 0.002}} must run like {lr: 0.002} (params "
                                 "and state); they differ after step 1 of 7")
    raised = _red("parity", "root cause of this case: its ladder's rung 'eager_steps' failed; the optimizer's code raised "
                            "KeyError: 'initial_lr'", {"kind": "root_cause", "rung": "eager_steps",
                                                       "cause": "at eager step 1: KeyError: 'initial_lr'"})
    matches = [record.match(law), record.match(raised)]
    assert matches == [r"law equivalent\[tensor_lr\] broken: \{lr: \{'tensor': [-+\d.e]+\}\} must run",
                       "KeyError: 'initial_lr'"]
    assert re.search(matches[0], law["reason"].replace("0.002", "0.01"))  # another lr, the same failure
    assert not re.search(matches[1], "KeyError: 'sum'")
    lines = record.rules([law, raised], "2.13")["specs/ecosystem/x/adam.yaml"]
    assert [line for line in lines if line.startswith("    match: ")] == [
        f"    match: {record._quoted(m)}" for m in matches]

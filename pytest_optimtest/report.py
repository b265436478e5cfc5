"""Results of generated items: per-item records, terminal table, JSON and Markdown reports,
and the baseline gate.

Each item attaches a JSON-able record to its report (`user_properties`), so the same
records reach the controller under pytest-xdist.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RECORD_KEY = "optimtest"


def item_metrics(check: Any, case: Any, runs: Any) -> dict[str, Any]:
    """The numbers a check reports for a case (its `metrics`), never running anything."""
    return check.metrics(case, runs) if check.metrics is not None else {}


def record(item: Any, metrics: dict[str, Any], verdict: dict[str, Any] | None = None,
           evidence: dict[str, Any] | None = None) -> dict[str, Any]:
    """The item's JSON record; `verdict` says why it is not a plain outcome: `root_cause` (the case's one
    red for a failed rung of its ladder), `blocked` (skipped for one), `vacuous` or `not_applicable`;
    `evidence`, what a pass proved (the check's Verdict)."""
    case = item.case
    return record_fields(_relative(case.spec_path), case.id, item.check, case.device, getattr(case, "dtype", "float32"),
                         getattr(case, "optimizer", None), os.environ.get("PYTEST_XDIST_WORKER", "main"), metrics,
                         verdict, evidence)


def record_fields(spec: str, case: str, check: str, device: str, dtype: str | None, optimizer: str | None,
                  worker: str, metrics: dict[str, Any], verdict: dict[str, Any] | None = None,
                  evidence: dict[str, Any] | None = None) -> dict[str, Any]:
    """A JSON record from its fields: `record` for an item, and the controller's for the item a
    worker died in (it has the node id, not the item)."""
    return {"verdict": verdict, "evidence": evidence, "spec": spec, "case": case, "check": check, "device": device,
            "dtype": dtype, "optimizer": optimizer, "worker": worker, "metrics": metrics}


def _relative(path: str) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


# The file inductor generated for one compile is named by a hash of its code: one root cause seen in
# two cases names two such files, grouped as one.
_generated_path = re.compile(r"[^\s(]*torchinductor\S*?\.py:\d+")
GENERATED = "<code inductor generated>"
# A cause's numbers (how far apart, how many elements, at which index) are the case's, not the cause's:
# one mechanism that differs by other amounts in each case (or names the case in its reproducer) is one root cause.
_number = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_line = re.compile(r":\d+ in ")  # where in a function it raised: one root cause at any of its lines (blame.root_cause)
# Rungs whose failure is one fact of the optimizer, worded per case (a closure case says the closure's
# graphs are not the step's; each case names its lr): one root cause per optimizer, whatever the words.
ONE_FACT_RUNGS = ("graph_captured", "eager_moves")


def _without_case(cause: str, case: str) -> str:
    """The cause with its case's id (as its reproducer's -k names it) made neutral."""
    return re.sub(rf"(?<![\w.-]){re.escape(case)}(?![\w.-])", "<case>", cause)


@dataclass
class Results:
    """Every generated item's record and outcome, as the controller sees them."""

    records: list[dict[str, Any]] = field(default_factory=list)

    def add(self, report: Any) -> None:
        data = next((v for k, v in report.user_properties if k == RECORD_KEY), None)
        if data is None:
            return
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
            self.records.append({**data, "nodeid": report.nodeid, "outcome": outcome,
                                 "duration_s": round(report.duration, 4), "reason": _reason(report, outcome)})

    def root_causes(self) -> list[dict[str, Any]]:
        """Reds that are a failed rung of a case's ladder, one entry per optimizer and cause: how many
        cases it was red in and how many items it blocked there."""
        groups: dict[tuple[str, ...], dict[str, Any]] = {}
        for r in self.records:
            verdict = r.get("verdict") or {}
            if verdict.get("kind") not in ("root_cause", "blocked") or "rung" not in verdict:
                continue  # a check blocked by another check's red (not a rung) is counted per spec, not grouped here
            cause = verdict.get("mechanism") or _generated_path.sub(GENERATED, verdict["cause"])  # known: one, wherever it raised
            mechanism = "" if verdict["rung"] in ONE_FACT_RUNGS else _number.sub("#", _without_case(cause, r["case"]))
            # a mechanism blame knows is one root cause in whichever rung or check each case met it (catalyst's Lookahead,
            # no Optimizer.__init__: its closure case's eager step, its plain case's closure_graph_break)
            key = (r.get("optimizer") or r["spec"], "" if "mechanism" in verdict else verdict["rung"], mechanism,
                   "" if not mechanism or "mechanism" in verdict else _line.sub(" in ", _generated_path.sub(GENERATED, verdict.get("where", ""))))
            entry = groups.setdefault(key, {"optimizer": key[0], "rung": verdict["rung"], "cause": cause, "where": key[3],
                                            "cases": set(), "red": 0, "xfailed": 0, "blocked": 0, "numbers_differ": False})
            entry["numbers_differ"] |= bool(mechanism) and cause != entry["cause"]
            entry["cases"].add(r["case"])
            entry["red"] += verdict["kind"] == "root_cause"
            entry["blocked"] += verdict["kind"] == "blocked" and r["outcome"] == "skipped"  # not a declared xfail
            entry["xfailed"] += verdict["kind"] == "root_cause" and r["outcome"] == "xfailed"
        return [{**e, "cases": sorted(e["cases"])} for e in groups.values()]

    def by_spec(self) -> dict[str, list[dict[str, Any]]]:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in self.records:
            groups[r["spec"]].append(r)
        return dict(sorted(groups.items()))

    def rows(self) -> list[dict[str, Any]]:
        """One row per spec: outcomes, observed kernel counts, compile seconds, median speedup."""
        rows = []
        for spec, records in self.by_spec().items():
            outcomes: defaultdict[str, int] = defaultdict(int)
            for r in records:
                outcomes[r["outcome"]] += 1
            kernels = sorted({r["metrics"]["kernels"] for r in records if r["check"] == "kernel_count" and "kernels" in r["metrics"]})
            timed = [r["metrics"] for r in records if r["check"] == "parity" and "compiled_step_s" in r["metrics"]]
            speedups = [m["eager_step_s"] / m["compiled_step_s"] for m in timed if m["compiled_step_s"] > 0]
            verdicts = Counter((r.get("verdict") or {}).get("kind") for r in records)
            blocked = sum((r.get("verdict") or {}).get("kind") == "blocked" and r["outcome"] == "skipped" for r in records)
            rows.append({
                "spec": spec, "passed": outcomes["passed"], "failed": outcomes["failed"],
                "xfailed": outcomes["xfailed"], "skipped": outcomes["skipped"],
                "vacuous": verdicts["vacuous"], "blocked": blocked,  # a blocked check the spec declares xfail is an xfail
                "kernels": "-".join(map(str, (kernels[0], kernels[-1]) if len(kernels) > 1 else kernels)) or "",
                "compile_s": round(sum(r["metrics"].get("compile_s", 0) for r in records if r["check"] == "parity"), 1),
                "speedup": round(statistics.median(speedups), 2) if speedups else None,
            })
        return rows


def _reason(report: Any, outcome: str) -> str:
    """The item's verdict in one line: the check's summary, the skip or xfail reason, or the failure's
    first lines and its diagnosis."""
    if outcome == "xfailed":
        text = report.wasxfail
    elif outcome == "skipped" and isinstance(report.longrepr, tuple):
        text = report.longrepr[2].removeprefix("Skipped: ")
    elif outcome == "passed":
        text = next((content for name, content in report.sections if name.endswith("optimtest call")), "")
    else:
        lines = [line for line in report.longreprtext.splitlines() if not re.match(r"\[gw\d+\] ", line)]  # xdist's "[gw0] linux -- Python ..."
        head = next((i for i, line in enumerate(lines) if line.startswith("[")), -1)  # "[check] case (where)"
        text = _short(" ".join(_verdict_text(lines[head + 1:] or lines[:1]).split()), 650)
        diagnosis = next((line.strip() for line in lines[head + 1:] if line.strip().startswith("diagnosis:")), "")
        if diagnosis and diagnosis not in text:  # whose doing it is, where the verdict's first lines do not say
            text += " " + diagnosis
    return _short(" ".join(text.split()), 800)


def _listed_item(line: str) -> bool:
    """An indented line: what a verdict lists (zero's " ZeRO vs unsharded on rank 0:" heads its own list)."""
    return line.startswith(" ") and not line.strip().startswith("diagnosis:")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _verdict_text(body: list[str]) -> str:
    """A failure's verdict: its first two lines, where one ends with ':' (what differed, dynamo's
    reasons) that one and the first three items it lists, and the error that follows the list with
    where it was raised (what a fuzz property's minimal example raised, and whose doing it is)."""
    kept: list[str] = []
    for i, line in enumerate(body[:2]):
        kept.append(line)
        if line.endswith(":"):
            listed = [_short(item.strip(), 200) for item in itertools.takewhile(_listed_item, body[i + 1:])]
            after = body[i + 1 + len(listed):]
            raised = after[:1] + [at.strip() for at in after[1:2] if at.strip().startswith("at ")] \
                if after and _ERROR_LINE.match(after[0]) else []
            return " ".join([*kept, " / ".join(listed[:3]), *raised])
    return " ".join(kept)


_ERROR_LINE = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)(: |$)")


def compatibility_table(report: dict[str, Any]) -> str:
    """Markdown: one row per optimizer, one column per check; each non-pass numbered, with its reason below."""
    items = report.get("items", [])
    checks = list(dict.fromkeys(_column(r) for r in items))
    rows: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in items:
        rows[r.get("optimizer") or r["case"]][_column(r)].append(r)
    marks = {"passed": "pass", "xfailed": "xfail", "skipped": "skip", "failed": "**FAIL**", "error": "**ERROR**"}
    notes: list[str] = []
    numbers: dict[str, int] = {}
    lines = [f"| optimizer | {' | '.join(checks)} |", "| --- |" + " --- |" * len(checks)]
    for optimizer in sorted(rows, key=str.lower):
        cells = []
        for check in checks:
            records = rows[optimizer].get(check, [])
            if not records:
                cells.append("")
                continue
            worst = min(records, key=lambda r: ("failed", "error", "xfailed", "skipped", "passed").index(r["outcome"])
                        if r["outcome"] in ("failed", "error", "xfailed", "skipped", "passed") else 0)
            cell = marks.get(worst["outcome"], worst["outcome"])
            if worst["outcome"] != "passed":
                reason = worst.get("reason", "")
                if reason not in numbers:  # one note for a reason several checks share
                    numbers[reason] = len(numbers) + 1
                    notes.append(f"{numbers[reason]}. `{optimizer}` ({worst['case']}): {reason}")
                cell += f" [{numbers[reason]}]"
            cells.append(cell)
        lines.append(f"| `{optimizer}` | " + " | ".join(cells) + " |")
    counts = {c: sum(1 for o in rows if any(r["outcome"] == "passed" for r in rows[o].get(c, []))
                     and all(r["outcome"] == "passed" for r in rows[o].get(c, []))) for c in checks}
    summary = ", ".join(f"{c} {counts[c]}" for c in checks)
    return "\n".join([f"torch {report.get('torch', '?')}: {len(rows)} optimizers; passing every case, per check: {summary}.",
                      "", *lines, "", *notes]) + "\n"


def _column(record: dict[str, Any]) -> str:
    """The table column of an item: its check, and its param dtype unless float32."""
    dtype = record.get("dtype") or "float32"  # a crashed item's record (built from its node id) has none
    return record["check"] if dtype == "float32" else f"{record['check']} {dtype}"


def terminal_table(rows: list[dict[str, Any]]) -> list[str]:
    width = max([4] + [len(r["spec"]) for r in rows])
    header = (f"{'spec':<{width}} {'passed':>6} {'failed':>6} {'xfailed':>7} {'skipped':>7} {'vacuous':>7} {'blocked':>7} "
              f"{'kernels':>8} {'compile s':>9} {'speedup':>8}")
    lines = [header]
    for r in rows:
        speedup = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        lines.append(f"{r['spec']:<{width}} {r['passed']:>6} {r['failed']:>6} {r['xfailed']:>7} {r['skipped']:>7} "
                     f"{r.get('vacuous', 0):>7} {r.get('blocked', 0):>7} {r['kernels'] or '-':>8} {r['compile_s']:>9} {speedup:>8}")
    return lines


def markdown(rows: list[dict[str, Any]], torch_version: str) -> str:
    lines = [f"### pytest-optimtest (torch {torch_version})", "",
             "| spec | passed | failed | xfailed | skipped | of them vacuous | of them blocked | kernels | compile s | "
             "compiled/eager speedup |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        speedup = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        lines.append(f"| `{r['spec']}` | {r['passed']} | {'**' + str(r['failed']) + '**' if r['failed'] else 0} | "
                     f"{r['xfailed']} | {r['skipped']} | {r.get('vacuous', 0)} | {r.get('blocked', 0)} | "
                     f"{r['kernels'] or '-'} | {r['compile_s']} | {speedup} |")
    return "\n".join(lines) + "\n"


def root_cause_lines(results: Results) -> list[str]:
    """The terminal's lines for reds grouped by root cause, and the vacuous items counted."""
    lines = []
    for e in results.root_causes():
        expected = f" ({e['xfailed']} of them xfailed)" if e["xfailed"] else ""
        lines.append(f"optimtest: {e['optimizer']}: 1 root cause, {e['red']} red{expected} in {len(e['cases'])} case(s), "
                     f"blocks {e['blocked']} items: {e['rung']}: {e['cause']}" + (f" ({e['where']})" if e["where"] else "")
                     + (" (its numbers differ per case; the first case's shown)" if e["numbers_differ"] else ""))
    vacuous = sum((r.get("verdict") or {}).get("kind") == "vacuous" for r in results.records)
    if vacuous:
        lines.append(f"optimtest: {vacuous} vacuous item(s): their comparison proved nothing (skipped with the reason; "
                     "--optim-strict fails them)")
    return lines


def write_json(path: str | Path, results: Results, torch_version: str) -> None:
    data = {"torch": torch_version, "summary": results.rows(), "items": results.records,
            "root_causes": results.root_causes()}
    Path(path).write_text(json.dumps(data, indent=1, sort_keys=True))


def regressions(baseline_path: str | Path, results: Results) -> list[str]:
    """The gate numbers (each check's metrics["gate"]: generated kernels, recompiles, graph
    breaks, a third-party check's own) that grew against a saved --optim-report."""
    baseline = json.loads(Path(baseline_path).read_text())
    before = {(r["case"], r["check"]): r.get("metrics", {}) for r in baseline.get("items", [])}
    found = []
    for r in results.records:
        old, new = before.get((r["case"], r["check"])), r["metrics"].get("gate", {})
        if old is None or not new:
            continue
        if "gate" not in old:  # a gate that cannot compare must not pass
            found.append(f"{r['case']} [{r['check']}]: the baseline holds no gate numbers for it (an older report?); regenerate it")
            continue
        for label, now in new.items():
            was = old["gate"].get(label)
            if was is not None and now > was:
                found.append(f"{r['case']} [{r['check']}]: {label} {was} -> {now}")
    return found

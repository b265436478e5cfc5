"""Record a run's reds in the init-written ecosystem specs (issue 32's unseen set): each failed item
becomes a strict xfail of its case and check, its reason the verdict the plugin gave (what differed
or raised, whose doing, the command that shows it), for the torch release and device it was seen on.
A Hypothesis property's red is recorded as a skip: its examples are drawn at random, so it is a
finding, not an outcome that repeats.

    pytest --optim-spec specs/ecosystem/<package> ... --optim-report unseen.json
    python specs/ecosystem/record.py unseen.json

Run it on specs that hold no recorded rules yet (it appends; it does not merge).
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import torch


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _verdict(reason: str) -> str:
    """The red's text without its item header, and with paths as any checkout and environment show them."""
    reason = re.sub(r"^\[\w+\] \S+ \([^)]*\) ", "", reason)
    reason = re.sub(r"\S*/(specs/ecosystem/)", r"\1", reason)
    return re.sub(r"\S*/site-packages/", "site-packages/", reason)


def rules(records: list[dict], release: str) -> dict[str, list[str]]:
    """spec path -> the YAML lines of its rules, xfails then skips."""
    found: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"xfail": [], "skip": []})
    for r in records:
        if r["outcome"] not in ("failed", "error"):
            continue
        fuzz = r["check"].startswith("fuzz_")
        command = f"pytest --optim-spec {r['spec']} -k '{r['case']} and {r['check']}'"
        reason = (f"{'found by Hypothesis (not asserted: its examples are random)' if fuzz else 'observed'} on torch "
                  f"{release} {r['device']}: {_verdict(r['reason'])[:500]} Repro: {command}")
        found[r["spec"]]["skip" if fuzz else "xfail"] += [
            f"  - cases: {_quoted(r['case'])}", f"    checks: [{r['check']}]", f"    devices: [{r['device']}]",
            f"    torch: ['{release}']", f"    reason: {_quoted(reason)}"]
    return {spec: [line for kind in ("xfail", "skip") if lines[kind] for line in [f"{kind}:", *lines[kind]]]
            for spec, lines in found.items()}


def main(report_path: str) -> None:
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    records = json.loads(Path(report_path).read_text())["items"]
    for spec, lines in sorted(rules(records, release).items()):
        path = Path(spec)
        text = path.read_text()
        if "\nxfail:" in text or "\nskip:" in text:
            raise SystemExit(f"{spec} already holds rules: record into specs without them")
        path.write_text(text.rstrip("\n") + "\n# the reds of the run that added this spec (specs/ecosystem/record.py)\n"
                        + "\n".join(lines) + "\n")
        print(f"{spec}: {sum(line.startswith('  - ') for line in lines)} rules")


if __name__ == "__main__":
    main(sys.argv[1])

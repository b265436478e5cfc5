"""Record a run's reds in the init-written ecosystem specs (issue 32's unseen set): each failed item
becomes a strict xfail of its case and check, its reason the verdict the plugin gave (what differed
or raised, whose doing, the command that shows it), for the torch release and device it was seen on,
and its `match` the words that failure opens with (numbers left free): another failure of the item is
a red, not an xfail.
A Hypothesis property's red is recorded as a skip: its examples are drawn at random, so it is a
finding, not an outcome that repeats; an error the steps raised skips every property of its fuzz
case, since whichever property draws it first is its one red (the others are blocked by it).

    pytest --optim-spec specs/ecosystem/<package> ... --optim-report unseen.json
    python specs/ecosystem/record.py unseen.json

Run it on specs that hold no recorded rules yet (it appends; it does not merge). With --merge (a
run of checks new to specs that already hold rules: issue 34's laws on by default), an init-written
spec gets the new rules inserted into its rule lists, and a spec generate.py writes gets them in
laws_on_by_default.json, which generate.py reads (run it afterwards). A red that is its case's root
cause (a failed rung, or one error several checks raise) is recorded once for its case, over the item
that claimed it and every item it blocked: under another selection or order another of them claims it,
and the rest are blocked (a skip, which a strict xfail allows).
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


_NUMBER = re.compile(r"(?<!\w)\d+(?:\.\d+)?(?:e[-+]?\d+)?(?!\w)")


def match(record: dict) -> str:
    """A regex of the words a red opens with, which its reason holds: a root cause's error (its type and message)
    where that is in the reason, else the check's verdict less its case id; up to 70 characters, whole words,
    numbers free (another release words them alike)."""
    verdict, reason = record.get("verdict") or {}, _verdict(record["reason"])
    cause = verdict.get("cause") if verdict.get("kind") == "root_cause" else None
    found = _opening(re.sub(r"^at [\w ]+ step \d+: ", "", _verdict(cause)), record["case"]) if cause else None
    return found if found and re.search(found, reason) else _opening(reason, record["case"])


def _opening(text: str, case: str) -> str:
    text = (text.removeprefix(f"{case}: ").splitlines() or [""])[0]
    if len(text) > 70:
        text = text[:70].rsplit(" ", 1)[0]
    text = text.rstrip(":;,. ")
    return r"[-+\d.e]+".join(re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", piece) for piece in _NUMBER.split(text))


def rules(records: list[dict], release: str) -> dict[str, list[str]]:
    """spec path -> the YAML lines of its rules, xfails then skips."""
    found: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"xfail": [], "skip": []})
    properties: dict[tuple[str, str], list[str]] = defaultdict(list)  # a fuzz case's properties, as the run had them
    for r in records:
        if r["check"].startswith("fuzz_") and r["check"] not in properties[r["spec"], r["case"]]:
            properties[r["spec"], r["case"]].append(r["check"])
    blocked: dict[tuple[str, str, str], list[str]] = defaultdict(list)  # the items a root cause blocked, by its rung
    for r in records:
        verdict = r.get("verdict") or {}
        if verdict.get("kind") == "blocked" and "rung" in verdict and not r["check"].startswith("fuzz_"):
            blocked[r["spec"], r["case"], verdict["rung"]].append(r["check"])
    for r in records:
        if r["outcome"] not in ("failed", "error"):
            continue
        fuzz = r["check"].startswith("fuzz_")
        command = f"pytest --optim-spec {r['spec']} -k '{r['case']} and {r['check']}'"
        reason = (f"{'found by Hypothesis (not asserted: its examples are random)' if fuzz else 'observed'} on torch "
                  f"{release} {r['device']}: {_verdict(r['reason'])[:800]} Repro: {command}")
        # an error a fuzz case's steps raise is one red, on whichever property drew it first: the skip covers them all
        raised = (r.get("verdict") or {}).get("kind") == "root_cause"
        if fuzz and raised:
            checks = ", ".join(properties[r["spec"], r["case"]])
        else:
            checks = ", ".join([r["check"], *(blocked[r["spec"], r["case"], r["verdict"].get("rung", "")] if raised else [])])
        found[r["spec"]]["skip" if fuzz else "xfail"] += [
            f"  - cases: {_quoted(r['case'])}", f"    checks: [{checks}]", f"    devices: [{r['device']}]",
            f"    torch: ['{release}']", f"    reason: {_quoted(reason)}", *([] if fuzz else [f"    match: {_quoted(match(r))}"])]
    return {spec: [line for kind in ("xfail", "skip") if lines[kind] for line in [f"{kind}:", *lines[kind]]]
            for spec, lines in found.items()}


def merge(records: list[dict], release: str) -> None:
    """Insert the run's rules into init-written specs' rule lists; generated specs' into laws_on_by_default.json."""
    generated: list[dict] = []
    for spec, lines in sorted(rules(records, release).items()):
        path = Path(spec)
        text = path.read_text()
        if "generated by generate.py" in text.partition("\n")[0]:
            generated += _as_json(lines, _optimizer(text))
            continue
        for kind in ("xfail", "skip"):
            block = _block(lines, kind)
            if not block:
                continue
            if f"\n{kind}:\n" in text:
                text = text.replace(f"\n{kind}:\n", f"\n{kind}:\n" + "\n".join(block) + "\n", 1)
            else:
                text = text.rstrip("\n") + f"\n{kind}:\n" + "\n".join(block) + "\n"
        path.write_text(text)
        print(f"{spec}: {sum(line.startswith('  - ') for line in lines)} rules merged")
    if not generated:  # a run of init-written specs only: the generated specs' record stands as it is
        return
    out = Path(__file__).parent / "laws_on_by_default.json"
    kept = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps(kept + [g for g in generated if g not in kept], indent=1) + "\n")
    print(f"{out}: {len(generated)} rules of generated specs added to {len(kept)} (run generate.py)")


def _block(lines: list[str], kind: str) -> list[str]:
    """The rule items under `kind:` in rules()' lines."""
    if f"{kind}:" not in lines:
        return []
    start = lines.index(f"{kind}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


def _optimizer(text: str) -> str:
    return re.search(r"^optimizer: (\S+)", text, re.M).group(1)  # type: ignore[union-attr]


def _as_json(lines: list[str], optimizer: str) -> list[dict]:
    """rules()' xfail items as production.json's entries (generated specs run on one torch release and device)."""
    out: list[dict] = []
    for line in _block(lines, "xfail"):
        key, _, value = line.strip().removeprefix("- ").partition(": ")
        if line.startswith("  - "):
            out.append({"optimizer": optimizer})
        if key == "cases":
            out[-1]["cases"] = json.loads(value)
        elif key == "checks":
            out[-1]["checks"] = [c.strip() for c in value.strip("[]").split(",")]
        elif key == "reason":
            out[-1]["reason"] = json.loads(value)
    return out


def main(report_path: str, merging: bool = False) -> None:
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    records = json.loads(Path(report_path).read_text())["items"]
    if merging:
        merge(records, release)
        return
    for spec, lines in sorted(rules(records, release).items()):
        path = Path(spec)
        text = path.read_text()
        if "\nxfail:" in text or "\nskip:" in text:
            raise SystemExit(f"{spec} already holds rules: record into specs without them")
        path.write_text(text.rstrip("\n") + "\n# the reds of the run that added this spec (specs/ecosystem/record.py)\n"
                        + "\n".join(lines) + "\n")
        print(f"{spec}: {sum(line.startswith('  - ') for line in lines)} rules")


if __name__ == "__main__":
    main(sys.argv[1], merging="--merge" in sys.argv[2:])

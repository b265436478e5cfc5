"""--optim-update-expected: write observed kernel, recompile and graph-break counts into the specs.

A ruamel.yaml round trip keeps comments and layout, as syrupy's --snapshot-update keeps
snapshots. Only the running torch version's entries are written. Minimal edits: an entry
that every case it covered disagrees with the same way is changed; otherwise the cases that
differ get exact-id entries; a missing table entry is created.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.scalarstring import DoubleQuotedScalarString


@dataclass(frozen=True)
class Change:
    spec: str
    path: tuple  # key path in the spec file
    old: Any
    new: Any

    def __str__(self) -> str:
        key = "".join(f"[{p!r}]" if not isinstance(p, str) or not p.isidentifier() else f".{p}" for p in self.path).lstrip(".")
        return f"{self.spec}: {key}: {'(none)' if self.old is None else self.old} -> {self.new}"


@dataclass
class Plan:
    changes: list[Change]
    conflicts: list[str]
    stale: list[str]


def plan(records: list[dict[str, Any]]) -> Plan:
    """What to write, from the controller's records of one full run."""
    changes: list[Change] = []
    conflicts: list[str] = []
    kernels: dict[tuple, dict[str, int]] = defaultdict(dict)  # (spec, table, version, device, pattern) -> {case: observed}
    used: set[tuple] = set()
    counts: dict[tuple, dict[str, int]] = defaultdict(dict)  # (spec, path, declared) -> {case: observed}
    for r in records:
        m = r["metrics"]
        expectations = []
        if r["check"] == "kernel_count" and "expected" in m and "kernels" in m:
            expectations.append((m["expected"], m["kernels"]))
        expectations += [(k, k["observed"]) for k in m.get("perturbation_kernels", [])]
        for e, observed in expectations:
            key = (r["spec"], tuple(e["table"]), e["version"], e["device"], e["pattern"])
            used.add(key)
            if e["pattern"] is None or e["count"] != observed:
                kernels[key][r["case"]] = observed
        for i, (observed, declared) in enumerate(zip(m.get("recompiles", {}).get("perturbations", []), m.get("declared_recompiles", []))):
            counts[(r["spec"], ("recompile", "perturbations", i, "recompiles"), declared)][r["case"]] = observed
        if "graph_breaks" in m:
            counts[(r["spec"], ("graph_breaks",), m["declared_graph_breaks"])][r["case"]] = m["graph_breaks"]
    changes += _kernel_changes(kernels, records)
    for (spec, path, declared), observed in counts.items():
        values = set(observed.values())
        if len(values) > 1:
            conflicts.append(f"{spec}: {'.'.join(map(str, path))}: cases disagree ({_show(observed)}); not written")
        elif values and (new := values.pop()) != declared:
            changes.append(Change(spec, path, declared, new))
    return Plan(changes, conflicts, _stale(records, used))


def _kernel_changes(kernels: dict[tuple, dict[str, int]], records: list[dict[str, Any]]) -> list[Change]:
    changes = []
    for (spec, table, version, device, pattern), observed in kernels.items():
        declared = _declared(records, spec, table, version, device, pattern)
        base = (*table, DoubleQuotedScalarString(version), device)
        values = Counter(observed.values())
        if pattern is None:
            if len(values) == 1:
                changes.append(Change(spec, (*base, "*"), None, next(iter(values))))
            else:
                common = values.most_common(1)[0][0]
                changes.append(Change(spec, (*base, "*"), None, common))
                changes += [Change(spec, (*base, case), None, n) for case, n in observed.items() if n != common]
        elif pattern in observed:  # an exact entry for that very case
            changes.append(Change(spec, (*base, pattern), declared, observed[pattern]))
        elif _all_covered_disagree(records, spec, table, version, device, pattern, observed):
            common = values.most_common(1)[0][0]  # no case keeps the old value: move the entry itself
            changes.append(Change(spec, (*base, pattern), declared, common))
            changes += [Change(spec, (*base, case), None, n) for case, n in observed.items() if n != common]
        else:
            changes += [Change(spec, (*base, case), None, n) for case, n in observed.items() if n != declared]
    return changes


def _declared(records, spec, table, version, device, pattern) -> int | None:
    for e in _expectations(records):
        if (e[0], tuple(e[1]["table"]), e[1]["version"], e[1]["device"], e[1]["pattern"]) == (spec, table, version, device, pattern):
            return e[1]["count"]
    return None


def _all_covered_disagree(records, spec, table, version, device, pattern, observed) -> bool:
    """Every case this glob entry covered in the run observed something else than declared."""
    covered = {e[2] for e in _expectations(records)
               if (e[0], tuple(e[1]["table"]), e[1]["version"], e[1]["device"], e[1]["pattern"]) == (spec, table, version, device, pattern)}
    return covered == set(observed)


def _expectations(records):
    for r in records:
        m = r["metrics"]
        if r["check"] == "kernel_count" and "expected" in m:
            yield r["spec"], m["expected"], r["case"]
        for k in m.get("perturbation_kernels", []):
            yield r["spec"], k, r["case"]


def _stale(records: list[dict[str, Any]], used: set[tuple]) -> list[str]:
    """Entries of the running version's tables, on devices that ran, that no case used."""
    yaml = YAML(typ="rt")
    out = []
    ran = {(s, tuple(e["table"]), e["version"], e["device"]) for s, e, _ in _expectations(records)}
    for spec, table, version, device in sorted(ran, key=str):
        node = _get(yaml.load(Path(spec).read_text()), (*table, version, device))
        if isinstance(node, dict):
            out += [f"{spec}: {'.'.join(map(str, table))}['{version}'].{device}[{p!r}] matched no case in this run"
                    for p in node if (spec, table, version, device, p) not in used]
    return out


def apply(changes: list[Change]) -> list[str]:
    """Write `changes` into their spec files; returns what was written, one line each."""
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)  # "  - item", the style of the shipped specs
    written = []
    by_spec: dict[str, list[Change]] = defaultdict(list)
    for change in changes:
        by_spec[change.spec].append(change)
    for spec, spec_changes in by_spec.items():
        path = Path(spec)
        root = yaml.load(path.read_text())
        for change in spec_changes:
            _set(root, change.path, change.new)
            written.append(str(change))
        with path.open("w") as f:
            yaml.dump(root, f)
    return written


def _get(node: Any, path: tuple) -> Any:
    for part in path:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return None
    return node


def _set(root: Any, path: tuple, value: Any) -> None:
    node = root
    for i, part in enumerate(path[:-1]):
        following = path[i + 1]
        if isinstance(node, list):
            while len(node) <= part:
                node.append(CommentedMap({"clear_state": True}))  # the default perturbation
            node = node[part]
            continue
        child = node.get(part)
        if child is None or (not isinstance(child, (dict, list))):
            if isinstance(following, int):
                child = []
            else:
                child = CommentedMap({"*": child}) if isinstance(child, int) else CommentedMap()
            node[part] = child
        node = child
    node[path[-1]] = value


def _show(observed: dict[str, int]) -> str:
    return ", ".join(f"{case}: {n}" for case, n in sorted(observed.items()))

"""--optim-update-expected: write what the checks observed into the specs.

Update mode knows no check: it reads two kinds of entries from the items' metrics.
- `updates`: [{path, declared, observed}]: a spec key path (e.g. ["graph_breaks"]) whose
  value every case reporting it must agree on; written when they agree and it differs.
- `kernel_tables`: [{table, version, device, pattern, count, observed}]: an entry of a
  kernel-count table (torch version -> device -> case-id glob -> count), and what the case saw.

A ruamel.yaml round trip keeps comments and layout, as syrupy's --snapshot-update keeps
snapshots. Only the running torch version's table entries are written. Minimal edits: an
entry that every case it covered disagrees with the same way is changed; otherwise the
cases that differ get exact-id entries; a missing table entry is created.
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
    # per kernel-table entry (spec, table, version, device, pattern): its declared count, the
    # cases it covered in this run, and those that observed something else
    declared: dict[tuple, int | None] = {}
    covered: dict[tuple, set[str]] = defaultdict(set)
    differing: dict[tuple, dict[str, int]] = defaultdict(dict)
    counts: dict[tuple, dict[str, int]] = defaultdict(dict)  # (spec, path, declared) -> {case: observed}
    for spec, e, case, observed in _expectations(records):
        key = (spec, tuple(e["table"]), e["version"], e["device"], e["pattern"])
        declared[key] = e["count"]
        covered[key].add(case)
        if e["pattern"] is None or e["count"] != observed:
            differing[key][case] = observed
    for r in records:
        for u in r["metrics"].get("updates", []):
            counts[(r["spec"], tuple(u["path"]), u["declared"])][r["case"]] = u["observed"]
    for key, observed in differing.items():
        changes += _kernel_changes(key, declared[key], observed, all_differ=covered[key] == set(observed))
    for (spec, path, want), observed in counts.items():
        values = set(observed.values())
        if len(values) > 1:
            conflicts.append(f"{spec}: {'.'.join(map(str, path))}: cases disagree ({_show(observed)}); not written")
        elif values and (new := values.pop()) != want:
            changes.append(Change(spec, path, want, new))
    return Plan(changes, conflicts, _stale(records, set(covered)))


def _kernel_changes(key: tuple, declared: int | None, observed: dict[str, int], all_differ: bool) -> list[Change]:
    """Edits for one table entry: move it when no case keeps its value, else add exact-id entries."""
    spec, table, version, device, pattern = key
    base = (*table, DoubleQuotedScalarString(version), device)
    common = Counter(observed.values()).most_common(1)[0][0]
    if pattern in observed:  # an exact entry for that very case
        return [Change(spec, (*base, pattern), declared, observed[pattern])]
    if pattern is None or all_differ:  # a new '*' entry, or a glob no covered case agrees with any more
        head = [Change(spec, (*base, pattern or "*"), declared, common)]
        return head + [Change(spec, (*base, case), None, n) for case, n in observed.items() if n != common]
    return [Change(spec, (*base, case), None, n) for case, n in observed.items()]


def _expectations(records: list[dict[str, Any]]):
    """(spec, table entry, case, observed) for every kernel-table entry the records carry."""
    for r in records:
        for k in r["metrics"].get("kernel_tables", []):
            yield r["spec"], k, r["case"], k["observed"]


def _stale(records: list[dict[str, Any]], used: set[tuple]) -> list[str]:
    """Entries of the running version's tables, on devices that ran, that no case used."""
    yaml = YAML(typ="rt")
    out = []
    ran = {(s, tuple(e["table"]), e["version"], e["device"]) for s, e, _, _ in _expectations(records)}
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

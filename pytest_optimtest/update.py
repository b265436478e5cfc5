"""--optim-update-expected: write what the checks observed into the specs.

Update mode knows no check: it reads two kinds of entries from the items' metrics.
- `updates`: [{path, declared, observed}]: a spec key path (e.g. ["graph_breaks"], or a hook
  order's ["expected", "2.16"]) whose value every case reporting it must agree on; written when
  they agree and it differs.
- `kernel_tables`: [{table, version, device, pattern, count, observed}]: an entry of a
  kernel-count table (torch version -> device -> case-id glob -> count), and what the case saw.

A ruamel.yaml round trip keeps comments and layout, as syrupy's --snapshot-update keeps
snapshots. Only the running torch version's table entries are written. Minimal edits: an
entry that every case it covered disagrees with the same way is changed; otherwise the
cases that differ get exact-id entries; a missing table entry is created. Where the cases
that fall to '*' (or to a table that does not exist yet) differ in groups, the groups get
case-id globs (`*-foreach-*`) when a glob saves entries, as one writes such a table by hand.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import DoubleQuotedScalarString


@dataclass(frozen=True)
class Change:
    spec: str
    path: tuple  # key path in the spec file
    old: Any
    new: Any

    def __str__(self) -> str:
        key = "".join(f"[{p!r}]" if not isinstance(p, str) or not p.isidentifier() else f".{p}" for p in self.path).lstrip(".")
        return f"{self.spec}: {key}: {_brief(self.old)} -> {_brief(self.new)}"


def _brief(value: Any) -> str:
    """A value for one line: a list (a hook order) by its length, a mapping by its keys."""
    if value is None:
        return "(none)"
    if isinstance(value, list):
        return f"{len(value)} entries"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_brief(v)}" for k, v in value.items()) + "}"
    return str(value)


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
    counts: dict[tuple, dict[str, Any]] = defaultdict(dict)  # (spec, path) -> {case: observed}
    written: dict[tuple, Any] = {}  # (spec, path) -> the declared value
    for spec, e, case, observed in _expectations(records):
        key = (spec, tuple(e["table"]), e["version"], e["device"], e["pattern"])
        declared[key] = e["count"]
        covered[key].add(case)
        if e["pattern"] is None or e["count"] != observed:
            differing[key][case] = observed
    for r in records:
        for u in r["metrics"].get("updates", []):
            counts[(r["spec"], tuple(u["path"]))][r["case"]] = u["observed"]
            written[(r["spec"], tuple(u["path"]))] = u["declared"]
    for key, observed in differing.items():
        changes += _kernel_changes(key, declared[key], observed, covered[key])
    for (spec, path), observed in counts.items():
        values = {json.dumps(v, sort_keys=True): v for v in observed.values()}  # lists too (a hook order)
        want = written[(spec, path)]
        if len(values) > 1:
            conflicts.append(f"{spec}: {'.'.join(map(str, path))}: cases disagree ({_show(observed)}); not written")
        elif values and (new := next(iter(values.values()))) != want:
            changes.append(Change(spec, path, want, new))
    return Plan(changes, conflicts, _stale(records, set(covered)))


def _kernel_changes(key: tuple, declared: int | None, observed: dict[str, int], covered: set[str]) -> list[Change]:
    """Edits for one table entry, given the cases that observed something else than `declared`."""
    spec, table, version, device, pattern = key
    base = (*table, DoubleQuotedScalarString(version), device)
    observed = {DoubleQuotedScalarString(case): n for case, n in observed.items()}  # case ids and globs quoted,
    covered = {DoubleQuotedScalarString(case) for case in covered}  # as the shipped specs write them
    all_differ = covered == set(observed)
    if pattern in observed:  # an exact entry for that very case
        return [Change(spec, (*base, pattern), declared, observed[pattern])]
    if pattern not in (None, "*"):  # a glob: moved when no case keeps it, else exceptions to it
        if not all_differ:
            return [Change(spec, (*base, case), None, n) for case, n in sorted(observed.items())]
        common = _most_common(observed.values())
        head = [Change(spec, (*base, pattern), declared, common)]
        return head + [Change(spec, (*base, case), None, n) for case, n in sorted(observed.items()) if n != common]
    # '*', or no entry at all: new globs come after the table's own, so they only reach these cases
    seen = {case: observed.get(case, declared) for case in sorted(covered)}
    if pattern == "*" and not all_differ:
        default, globs, exact = declared, *_table_for(seen, declared)
    else:  # the '*' that needs the fewest entries; ties go to the count most cases saw
        common = _most_common(seen.values())
        ranked = sorted(set(seen.values()), key=lambda n: (n != common, n))
        default, globs, exact = min(((n, *_table_for(seen, n)) for n in ranked), key=lambda t: len(t[1]) + len(t[2]))
    star = DoubleQuotedScalarString("*")
    changes = [] if default == declared and pattern == "*" else [Change(spec, (*base, star), declared, default)]
    changes += [Change(spec, (*base, glob), None, n) for glob, n in globs]
    return changes + [Change(spec, (*base, case), None, n) for case, n in exact.items()]


def _table_for(observed: dict[str, Any], default: Any) -> tuple[list[tuple[str, int]], dict[str, int]]:
    """The globs under a '*' of `default`, and the exact entries still needed after them."""
    globs = [(DoubleQuotedScalarString(glob), n) for glob, n in infer_globs(observed, default)]
    exact = {case: n for case, n in observed.items()
             if n != next((count for glob, count in globs if _glob_matches(glob, case)), default)}
    return globs, exact


def infer_globs(observed: dict[str, int], default: int) -> list[tuple[str, int]]:
    """Case-id globs `*-part-*` (in order, first match wins) for groups of cases whose count is not
    `default`: greedily, the glob that saves the most entries, while one saves any. A glob's
    cases that disagree with it cost an exact entry each, as do the cases it takes from `default`."""
    unassigned = dict(observed)
    chosen: list[tuple[str, int]] = []
    while True:
        best: tuple[int, str, int] | None = None
        for glob in _candidate_globs(case for case, n in unassigned.items() if n != default):
            matched = [n for case, n in unassigned.items() if _glob_matches(glob, case)]
            count = _most_common(matched)
            saved = sum(n != default for n in matched) - sum(n != count for n in matched) - 1
            if count != default and saved > 0 and (best is None or saved > best[0]):
                best = (saved, glob, count)
        if best is None:
            return chosen
        chosen.append(best[1:])
        unassigned = {case: n for case, n in unassigned.items() if not _glob_matches(best[1], case)}


def _candidate_globs(case_ids) -> list[str]:
    """`*-part-*` and `*-part-part-*` for the parts between a case id's spec name and device."""
    globs = set()
    for case_id in case_ids:
        parts = case_id.split("-")[1:-1]
        for run in (*([p] for p in parts), *(parts[i:i + 2] for i in range(len(parts) - 1))):
            if not any(c in part for part in run for c in "*?[]"):
                globs.add("*-" + "-".join(run) + "-*")
    return sorted(globs)


def _glob_matches(glob: str, case_id: str) -> bool:
    return glob[1:-1] in case_id  # '*-part-*': fnmatch's answer, without the pattern compile


def _most_common(counts) -> int:
    """The count seen most often; ties go to the smaller count, so the answer is the same every run."""
    tally = Counter(counts)
    return min(tally, key=lambda n: (-tally[n], n))


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
    yaml.brace_single_entry_mapping_in_flow_sequence = True  # `[{tensor: 0.9}]` stays as written
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)  # "  - item", the style of the shipped specs
    yaml.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    written = []
    by_spec: dict[str, list[Change]] = defaultdict(list)
    for change in changes:
        by_spec[change.spec].append(change)
    for spec, spec_changes in by_spec.items():
        path = Path(spec)
        original = path.read_text()
        root = yaml.load(original)
        head, before = _top_level_blocks(original, root)  # before the changes add keys without line marks
        for change in spec_changes:
            _set(root, change.path, change.new)
            written.append(str(change))
        dumped = io.StringIO()
        yaml.dump(root, dumped)
        _, after = _top_level_blocks(dumped.getvalue(), YAML(typ="rt").load(dumped.getvalue()))
        changed = {change.path[0] for change in spec_changes}
        # ruamel lays out anew what it dumps (a flow list written over two lines comes back on one):
        # the dumped text for the top-level keys that changed, the original's for every other
        blocks = [after[key] if key in changed or key not in before else before[key] for key in after]
        path.write_text(head + "".join(block if block.endswith("\n") else block + "\n" for block in blocks))
    return written


def _top_level_blocks(text: str, root: Any) -> tuple[str, dict[Any, str]]:
    """The text before the first top-level key, and each top-level key's lines (up to the next key),
    from `root`, the document `text` loads to."""
    lines = text.splitlines(keepends=True)
    starts = [root.lc.key(key)[0] for key in root]
    ends = starts[1:] + [len(lines)]
    return "".join(lines[:starts[0]]), {key: "".join(lines[s:e]) for key, s, e in zip(root, starts, ends)}


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
    node[_key(path[-1])] = _yaml_value(value)


def _key(part: Any) -> Any:
    """A release key ("2.16", "*") double-quoted, as the shipped specs write them (bare, YAML reads a
    float or an alias)."""
    return DoubleQuotedScalarString(part) if isinstance(part, str) and re.fullmatch(r"\d+\.\d+|\*", part) else part


def _yaml_value(value: Any) -> Any:
    """Lists of events as the specs write them: one flow list a line under a block list."""
    if isinstance(value, dict) and not isinstance(value, CommentedMap):
        mapping = CommentedMap((_key(k), _yaml_value(v)) for k, v in value.items())
        if not any(isinstance(v, dict) or (isinstance(v, list) and any(isinstance(i, (list, dict)) for i in v)) for v in value.values()):
            mapping.fa.set_flow_style()  # an event with its parents: one line
        return mapping
    if isinstance(value, list) and not isinstance(value, CommentedSeq):
        seq = CommentedSeq(_yaml_value(v) for v in value)
        if not any(isinstance(v, (list, dict)) for v in value):
            seq.fa.set_flow_style()
        return seq
    return value


def _show(observed: dict[str, int]) -> str:
    return ", ".join(f"{case}: {n}" for case, n in sorted(observed.items()))

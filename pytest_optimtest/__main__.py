"""`python -m pytest_optimtest schema | check PATH... | init OPTIMIZER [-o FILE] | table REPORT.json`"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m pytest_optimtest` (the reference renders it)."""
    parser = argparse.ArgumentParser(prog="python -m pytest_optimtest")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("schema", help="print the JSON Schema of spec files")
    check = sub.add_parser("check", help="validate spec files without running them")
    check.add_argument("paths", nargs="+", type=Path, help="spec files or directories of them")
    init = sub.add_parser("init", help="write a starter spec for an optimizer class, from its constructor")
    init.add_argument("optimizer", help="import path, e.g. mypkg.optim:Lion or torch.optim.Adam")
    init.add_argument("-o", "--output", type=Path, help="file to write (default: <name>.yaml; '-' for stdout)")
    table = sub.add_parser("table", help="render an --optim-report JSON as a Markdown optimizer x check table")
    table.add_argument("report", type=Path, help="the JSON file --optim-report wrote")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    if args.command == "table":
        from .report import compatibility_table

        print(compatibility_table(json.loads(args.report.read_text())), end="")
        return 0

    if args.command == "init":
        from .scaffold import write_starter_spec

        return write_starter_spec(args.optimizer, args.output)

    if args.command == "schema":
        from .cases import project_registry

        print(json.dumps(project_registry(Path.cwd()).json_schema(), indent=2))
        return 0
    return _check(args.paths)


def _check(paths: list[Path]) -> int:
    """Validate each spec with the checks of its project (conftest.py hooks and entry points included)."""
    from .cases import project_registry
    from .spec import SpecError
    from .spec.errors import internal_error

    files = [f for p in paths for f in (sorted(p.rglob("*.y*ml")) if p.is_dir() else [p])]
    failed = 0
    for file in files:
        try:
            cases = project_registry(file).cases(file)
        except SpecError as exc:
            failed += 1
            print(f"error: {exc}")
        except Exception as exc:  # a bug of ours, or a conftest that fails to import: report it, go on
            failed += 1
            print(f"error: {internal_error(file, exc)}")
        else:
            print(f"ok: {file}: {len(cases)} cases")
    if not files:
        print("error: no spec files found")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

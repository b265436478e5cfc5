"""Run the main job on one torch release: the maintainer's command for a new release, and how the
compatibility table (docs/compatibility.md) is kept.

    python tools/torch_release.py 2.15.0                    # main job, report, the row of the table
    python tools/torch_release.py 2.15.0 --update-expected  # also record that release's kernel counts
    python tools/torch_release.py 2.15.0 --suite            # the test suite instead of the main job
    python tools/torch_release.py 2.8.0 -- -k fsdp          # pytest arguments after --

It makes (or reuses) a virtualenv under .releases/torch-<version>/ with that torch and this
project, runs `pytest --optim-spec specs/` there with `--optim-report`, and writes the run's row,
`docs/releases/torch-<version>-<device>.json` (outcomes, kernel_count items passed and skipped,
date, command), from which the docs build renders the table. `--update-expected` writes the
counts that release observed into the specs, under its own major.minor only, then runs the items
those expectations gate again (kernel counts, recompiles, hook orders) so that the row shows them
passing against what was written, not skipped for want of it.

Releases after 2.13 are CUDA builds that also run on CPU (gigabytes). Where pip's configuration
caps torch (these machines: at 2.14.1), the cap is lifted for this install only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS = ROOT / "docs" / "releases"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="pytest arguments go after --")
    parser.add_argument("torch", help="the torch release, e.g. 2.15.0")
    parser.add_argument("--venv", type=Path, help="the virtualenv to make or reuse (default: .releases/torch-<version>)")
    parser.add_argument("--device", default="cpu", help="--optim-device for the run (default: cpu)")
    parser.add_argument("--update-expected", action="store_true", help="record the release's kernel counts into the specs")
    parser.add_argument("--suite", action="store_true", help="run the test suite (README's `pytest`) instead of the main job")
    args, pytest_args = parse(parser, sys.argv[1:] if argv is None else argv)

    venv = args.venv or ROOT / ".releases" / f"torch-{args.torch}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if not installed_torch(python).startswith(args.torch):
        # the cap lifted for both installs: under it, installing the project would put the capped torch back
        pip, uncapped = [str(python), "-m", "pip", "install", "--quiet"], {**os.environ, "PIP_CONSTRAINT": "/dev/null"}
        subprocess.run([*pip, f"torch=={args.torch}"], check=True, env=uncapped)
        subprocess.run([*pip, "-e", f"{ROOT}[test]"], check=True, env=uncapped)
    if not installed_torch(python).startswith(args.torch):
        sys.exit(f"{venv} holds torch {installed_torch(python) or '(none)'}, not {args.torch}")

    report = venv / ("suite.json" if args.suite else "report.json")
    command = ["pytest"] if args.suite else ["pytest", "--optim-spec", "specs/", "--optim-device", args.device,
                                             "--optim-report", str(report)]
    command += ["--optim-update-expected"] if args.update_expected and not args.suite else []
    command += pytest_args
    print("running:", " ".join(command), flush=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    code = subprocess.run([str(python), "-m", *command], cwd=ROOT).returncode
    if not args.suite and report.exists():
        result = json.loads(report.read_text())
        if args.update_expected:
            result, code = recheck(python, result, code, [*command[:command.index("--optim-report")], *pytest_args], venv)
        row = release_row(result, args.torch, args.device, started, code,
                          f"python tools/torch_release.py {args.torch}" + (" --update-expected" if args.update_expected else ""))
        ROWS.mkdir(parents=True, exist_ok=True)
        path = ROWS / f"torch-{args.torch}-{args.device}.json"
        path.write_text(json.dumps(row, indent=2) + "\n")
        print(f"wrote {path.relative_to(ROOT)}: {row['outcomes']}")
    return code


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The tool's arguments, and the pytest arguments after `--` (argparse alone rejects `-- -k x`
    after a positional: its optional positional has already matched nothing)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    return parser.parse_args(argv[:cut]), argv[cut + 1:]


RECHECKED = "kernel_count or recompile or hook_order"  # the items whose expectations update mode writes


def recheck(python: Path, report: dict, code: int, command: list[str], venv: Path) -> tuple[dict, int]:
    """After update mode, run the items it wrote expectations for again; their outcomes replace the
    first run's in the report (the rest of the first run stands). The exit code is the worse of the two
    runs', counting the first run's reds outside the rechecked items only."""
    again = venv / "recheck.json"
    again.unlink(missing_ok=True)  # a recheck that writes no report must not be read as an earlier run's
    print("rechecking what update mode wrote:", " ".join([*command, "-k", RECHECKED]), flush=True)
    recheck_code = subprocess.run([str(python), "-m", *command, "-k", RECHECKED, "--optim-report", str(again)], cwd=ROOT).returncode
    if not again.exists():
        return report, recheck_code or code
    rechecked = json.loads(again.read_text())["items"]
    ids = {r["nodeid"] for r in rechecked}
    kept = [r for r in report["items"] if r["nodeid"] not in ids]
    first_reds = any(r["outcome"] in ("failed", "error") for r in kept)
    return {**report, "items": kept + rechecked}, recheck_code if recheck_code not in (0, 5) else int(first_reds)


def installed_torch(python: Path) -> str:
    """The torch version a virtualenv's python imports ('' when none)."""
    found = subprocess.run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 else ""


def release_row(report: dict, torch: str, device: str, started: datetime.datetime, code: int, command: str) -> dict:
    """One row of the compatibility table, from one main job's --optim-report."""
    items = report.get("items", [])
    kernel = Counter(r["outcome"] for r in items if r.get("check") == "kernel_count")
    return {"torch": report.get("torch", torch), "device": device, "date": started.date().isoformat(),
            "exit_code": code, "command": command, "outcomes": dict(Counter(r["outcome"] for r in items)),
            "kernel_count": dict(kernel)}


if __name__ == "__main__":
    sys.exit(main())

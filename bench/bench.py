"""Benchmarks of the core plugin; prints a table of figures measured in this one run.

    python bench/bench.py                 # everything (about 10 minutes on 2 cores)
    python bench/bench.py --only collect  # collection of 10,000 generated cases

Figures are ratios and wall times on this machine, never assertions: machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SPEC_10K = """
optimizer: torch.optim.SGD
kwargs: {{lr: 0.1}}
devices: [cpu, cuda]
closure: [false, true]
grid:
  maximize: [false, true]
  foreach: [false, true]
schedulers:
  StepLR: {{step_size: 1}}
  ExponentialLR: {{gamma: 0.9}}
  ConstantLR: {{factor: 0.5}}
  LinearLR: {{}}
  PolynomialLR: {{}}
cases:
{cases}
"""


def bench_collection(tmp: Path) -> dict[str, float]:
    cases = "\n".join(f"  - {{name: c{i}, kwargs: {{lr: {0.001 * (i + 1):.3f}}}, schedulers: true}}" for i in range(125))
    (tmp / "big.yaml").write_text(SPEC_10K.format(cases=cases))
    code = f"""
import time, torch, torch._dynamo, pytest
torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)  # torch's lazy imports happen here, not below
start = time.perf_counter()
pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "--optim-spec", {str(tmp)!r}, "--rootdir", {str(tmp)!r}])
print("COLLECT_SECONDS", time.perf_counter() - start)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp).stdout
    items = int(re.search(r"(\d+) tests? collected", out).group(1))
    seconds = float(re.search(r"COLLECT_SECONDS (\S+)", out).group(1))
    cases = len({line.rsplit("::", 1)[0] for line in out.splitlines() if "::" in line})
    return {"cases": cases, "items": items, "seconds": seconds}


def bench_main_job(workers: int, cache_dir: str) -> dict[str, float]:
    cmd = [sys.executable, "-m", "pytest", "--optim-spec", "specs/torch_optim", "-q", "-p", "no:cacheprovider"]
    if workers > 1:
        cmd += ["-n", str(workers), "--dist", "loadscope"]
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir}
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - start
    tail = proc.stdout.strip().splitlines()[-1]
    session = float(re.search(r" in ([\d.]+)s", tail).group(1))
    inside = re.search(r"optimtest: (\d+) compiled case runs; ([\d.]+)s inside checks", proc.stdout)
    return {"wall": wall, "session": session, "inside_torch": float(inside.group(2)) if inside else float("nan"),
            "result": tail.strip("= ")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["collect", "main"], default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "collect"):
            c = bench_collection(Path(tmp))
            print(f"collection: {c['cases']} cases, {c['items']} items in {c['seconds']:.2f}s "
                  f"(torch import excluded; target < 2 s)")
        if args.only in (None, "main"):
            for workers in (1, 2):
                cache = tempfile.mkdtemp(prefix="inductor-cache-")
                for temperature in ("cold", "warm"):
                    r = bench_main_job(workers, cache)
                    line = f"main job specs/torch_optim, {'serial' if workers == 1 else '-n 2'}, {temperature} cache: " \
                           f"wall {r['wall']:.1f}s, session {r['session']:.1f}s [{r['result']}]"
                    if workers == 1:
                        overhead = r["session"] - r["inside_torch"]
                        line += (f"; inside checks (model, compile, steps) {r['inside_torch']:.1f}s, "
                                 f"plugin overhead {overhead:.1f}s = {100 * overhead / r['session']:.1f}% of the session")
                    print(line, flush=True)


if __name__ == "__main__":
    main()

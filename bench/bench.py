"""Benchmarks of the core plugin; prints the figures measured in this one run.

    python bench/bench.py                 # everything (about 25 minutes on 2 cores)
    python bench/bench.py --only import   # a one-test project's pytest, plugin loaded vs disabled
    python bench/bench.py --only collect  # collection of 10,000 generated cases
    python bench/bench.py --only main     # the main job, cold and warm inductor cache
    python bench/bench.py --only peer     # parity + kernel_count vs PyTorch's recipe (bench/peer.py), cold and warm
    python bench/bench.py --only laws     # the conformance laws of the torch.optim specs vs their parity items
    python bench/bench.py --only main --against REF --workers 2 --pairs 3   # the main job, cold, at REF and here

Figures are ratios and wall times on this machine, never assertions: machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
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

class Phase:  # pytest's collection phase: from its start to the final item list
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session):
        self.start = time.perf_counter()

    def pytest_collection_finish(self, session):
        self.end = time.perf_counter()

phase = Phase()
start = time.perf_counter()
pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "--optim-spec", {str(tmp)!r}, "--rootdir", {str(tmp)!r},
             "--optim-device", "cpu,cuda"], plugins=[phase])
print("COLLECT_SECONDS", time.perf_counter() - start, phase.end - phase.start)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp).stdout
    items = int(re.search(r"(\d+) tests? collected", out).group(1))
    whole, seconds = map(float, re.search(r"COLLECT_SECONDS (\S+) (\S+)", out).groups())
    cases = len({line.rsplit("::", 1)[0] for line in out.splitlines() if "::" in line})
    return {"cases": cases, "items": items, "seconds": seconds, "whole": whole}


def bench_import(runs: int = 7) -> dict[str, float]:
    """Median wall time of `pytest` in a one-test project, with this plugin loaded and disabled.

    pytest-randomly is off in both: it imports Hypothesis itself, and it is not our dependency.
    """
    project = Path(tempfile.mkdtemp(prefix="one-test-"))
    (project / "test_one.py").write_text("def test_one():\n    assert True\n")
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    times: dict[str, list[float]] = {"loaded": [], "disabled": []}
    for _ in range(runs):  # interleaved, so drift on a shared machine hits both alike
        for label, extra in (("loaded", []), ("disabled", ["-p", "no:optimtest"])):
            start = time.perf_counter()
            subprocess.run(base + extra, capture_output=True, cwd=project, check=True)
            times[label].append(time.perf_counter() - start)
    loaded, disabled = statistics.median(times["loaded"]), statistics.median(times["disabled"])
    probe = "import sys, pytest; pytest.main(['-q', '-p', 'no:randomly', '-p', 'no:cacheprovider']); " \
            "print('HEAVY', sorted(m for m in ('torch', 'pydantic', 'ruamel.yaml') if m in sys.modules))"
    heavy = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=project).stdout
    return {"loaded": loaded, "disabled": disabled, "ratio": loaded / disabled,
            "heavy": re.search(r"HEAVY (.*)", heavy).group(1)}


def bench_main_job(cache_dir: str, workers: int = 1, root: Path = ROOT) -> dict[str, float | str]:
    # specs/ecosystem left out: CI's main job runs without its packages (one skip a spec), and a
    # machine that has them installed would otherwise time 66 more optimizers
    cmd = [sys.executable, "-m", "pytest", "--optim-spec", "specs/", "-q", "-p", "no:cacheprovider", "--ignore", "specs/ecosystem"]
    cmd += ["-n", str(workers) if workers > 1 else "0"]  # -n 0: serial, whatever the ini's addopts say
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir}
    start, cpu_before = time.perf_counter(), _children_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env=env)  # `-m`: root's package first
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu_before
    lines = proc.stdout.strip().splitlines()
    tail = lines[-1] if lines else f"no output (exit {proc.returncode}): {proc.stderr[-500:]}"
    inside = re.search(r"([\d.]+)s inside checks", proc.stdout)
    return {"wall": wall, "cpu": cpu, "inside": float(inside.group(1)) if inside else float("nan"), "result": tail.strip("= ")}


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children and the descendants they waited
    for: pytest, its xdist workers, their rank processes and compilers."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_peer(cache_dir: str, fresh_peer_cache: bool) -> dict[str, float | str]:
    """Wall time of our parity + kernel_count items over the torch.optim CPU cases, and of the peer
    recipe over the same cases, each in its own process with the given inductor cache dir."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache_dir}
    ours_cmd = [sys.executable, "-m", "pytest", "--optim-spec", "specs/torch_optim", "-q", "-p", "no:cacheprovider",
                "--optim-device", "cpu", "-k", "(parity or kernel_count) and not fuzz", "-n", "0"]
    start = time.perf_counter()
    ours = subprocess.run(ours_cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    ours_wall = time.perf_counter() - start
    peer_cmd = [sys.executable, str(ROOT / "bench" / "peer.py")] + ([] if fresh_peer_cache else ["--shared-cache"])
    peer_env = {**env, "TORCHINDUCTOR_CACHE_DIR": cache_dir + "-peer"}
    if not fresh_peer_cache:  # fill the peer's shared cache first, as our cold run filled ours
        subprocess.run(peer_cmd, capture_output=True, text=True, cwd=ROOT, env=peer_env)
    start = time.perf_counter()
    peer = subprocess.run(peer_cmd, capture_output=True, text=True, cwd=ROOT, env=peer_env)
    peer_wall = time.perf_counter() - start
    tail = ours.stdout.strip().splitlines()[-1] if ours.stdout.strip() else ours.stderr[-300:]
    found = re.search(r"PEER .*", peer.stdout)
    return {"ours": ours_wall, "peer": peer_wall, "ratio": ours_wall / peer_wall, "ours_result": tail.strip("= "),
            "peer_result": found.group(0) if found else peer.stderr[-300:]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["import", "collect", "main", "peer", "laws"], default=None)
    parser.add_argument("--workers", type=int, default=1, help="main job under pytest-xdist -n N (default serial)")
    parser.add_argument("--against", default=None, metavar="GIT_REF",
                        help="with --only main: also time the main job of GIT_REF, cold, in this run (a git worktree)")
    parser.add_argument("--pairs", type=int, default=1, help="with --against: this many pairs, their order alternating")
    args = parser.parse_args()
    print(f"# {platform.node()}: {os.cpu_count()} cores, python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}", flush=True)
    if args.only in (None, "import"):
        r = bench_import()
        print(f"import overhead: one-test project, median of 7: plugin loaded {r['loaded']:.2f}s, disabled "
              f"{r['disabled']:.2f}s, ratio {r['ratio']:.3f} (target <= 1.10); heavy modules loaded: {r['heavy']}",
              flush=True)
    if args.only in (None, "collect"):
        with tempfile.TemporaryDirectory() as tmp:
            c = bench_collection(Path(tmp))
        print(f"collection: {c['cases']} cases, {c['items']} items in {c['seconds']:.2f}s (pytest's collection phase; "
              f"target < 2 s); the whole `pytest --collect-only -q` {c['whole']:.2f}s (plugins' import and configure, "
              f"20,080 lines printed; torch import excluded; PYTHONDONTWRITEBYTECODE="
              f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r}: set, pytest rewrites the plugins' asserts every run)",
              flush=True)
    if args.only in (None, "peer"):
        cache = tempfile.mkdtemp(prefix="inductor-cache-")
        for temperature, fresh in (("cold", True), ("warm", False)):  # warm: both find their caches filled
            r = bench_peer(cache, fresh)
            print(f"parity + kernel_count over the torch.optim CPU cases, serial, {temperature}: ours {r['ours']:.0f}s, "
                  f"peer recipe {r['peer']:.0f}s, ratio {r['ratio']:.2f} (target <= 0.5 cold) "
                  f"[ours: {r['ours_result']}] [{r['peer_result']}]", flush=True)
    if args.only in (None, "laws"):
        r = bench_laws()
        print(f"conformance laws of specs/torch_optim, serial: {r['laws']:.1f}s [{r['laws_result']}]; their parity items "
              f"(cold inductor cache) {r['parity']:.1f}s [{r['parity_result']}]; ratio {r['laws'] / r['parity']:.3f}",
              flush=True)
    if args.only == "main" and args.against:
        bench_against(args.against, args.workers, args.pairs)
        return
    if args.only in (None, "main"):
        cache = tempfile.mkdtemp(prefix="inductor-cache-")  # empty: cold; the second run finds it filled: warm
        for temperature in ("cold", "warm"):
            r = bench_main_job(cache, args.workers)
            where = "serial" if args.workers == 1 else f"-n {args.workers}"
            print(f"main job `pytest --optim-spec specs/`, {where}, {temperature} inductor cache: wall "
                  f"{r['wall'] / 60:.1f} min ({r['wall']:.0f}s), {r['inside']:.0f}s inside checks, outside them "
                  f"(python and torch start, collection, reports) {1 - r['inside'] / r['wall']:.1%} "
                  f"[{r['result']}]", flush=True)


def bench_laws() -> dict[str, float | str]:
    """Wall time of the law items of the torch.optim specs, and of their parity items, serial."""
    out: dict[str, float | str] = {}
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": tempfile.mkdtemp(prefix="inductor-cache-")}
    for name, selection in (("laws", "law_"), ("parity", "parity and not fuzz")):
        cmd = [sys.executable, "-m", "pytest", "--optim-spec", "specs/torch_optim", "-q", "-p", "no:cacheprovider",
               "--optim-device", "cpu", "-k", selection, "-n", "0", "--optim-in-process"]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
        out[name] = time.perf_counter() - start
        out[f"{name}_result"] = proc.stdout.strip().splitlines()[-1].strip("= ") if proc.stdout.strip() else proc.stderr[-300:]
    return out


def bench_against(ref: str, workers: int, pairs: int = 1) -> None:
    """The main job, cold, at `ref` and at this tree, in `pairs` back-to-back pairs, their order
    alternating (ref first, then this tree first): the ratio is what a change cost. A shared machine's
    speed drifts within minutes, so each pair's ratio is printed, and with several pairs their median;
    the CPU seconds of the runs' processes drift less than wall time and are printed beside it."""
    with tempfile.TemporaryDirectory() as tmp:
        other = Path(tmp) / "ref"
        subprocess.run(["git", "worktree", "add", "--detach", str(other), ref], cwd=ROOT, check=True, capture_output=True)
        try:
            ratios: dict[str, list[float]] = {"wall": [], "cpu": []}
            for pair in range(pairs):
                runs = ((ref, other), ("this tree", ROOT))
                measured = {}
                for label, root in runs if pair % 2 == 0 else runs[::-1]:
                    r = measured[label] = bench_main_job(tempfile.mkdtemp(prefix="inductor-cache-"), workers, root)
                    print(f"main job, cold, {'serial' if workers == 1 else f'-n {workers}'}, {label}: {r['wall'] / 60:.1f} min, "
                          f"CPU {r['cpu']:.0f}s [{r['result']}]", flush=True)
                for key in ratios:
                    ratios[key].append(float(measured["this tree"][key]) / float(measured[ref][key]))
                print(f"pair {pair + 1}: ratio this tree / {ref}: wall {ratios['wall'][-1]:.3f}, CPU {ratios['cpu'][-1]:.3f}",
                      flush=True)
            if pairs > 1:
                print(f"median of {pairs} pairs: wall {statistics.median(ratios['wall']):.3f}, "
                      f"CPU {statistics.median(ratios['cpu']):.3f}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()

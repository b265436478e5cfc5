"""Examples per minute of the fuzz_parity property on this machine, with and without dynamic shapes.

    python bench/fuzz_rate.py [--examples 40] [--optimizer torch.optim.Adam]

Both runs draw the same examples (derandomized) in one process, each with a fresh inductor
cache directory, so neither profits from the other's compiled kernels. Printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import textwrap
import time
from pathlib import Path


def rate(optimizer: str, examples: int, dynamic: bool) -> tuple[float, str]:
    from hypothesis import settings

    from pytest_optimtest.checks import CHECKS
    from pytest_optimtest.harness.hypothesis_runs import register_profiles
    from pytest_optimtest.harness.run_cache import RunCache

    register_profiles()
    settings.load_profile("optimtest-ci")  # derandomized: both runs see the same examples
    folder = Path(tempfile.mkdtemp())
    spec = folder / "spec.yaml"
    spec.write_text(textwrap.dedent(f"""
        optimizer: {optimizer}
        kwargs: {{lr: 0.01}}
        fuzz: {{parity: {{examples: {{ci: {examples}}}, dynamic: {str(dynamic).lower()}}}}}
        checks: [fuzz_parity]
    """))
    (fuzz,) = [c for c in CHECKS.cases(spec) if c.id.endswith("-fuzz-cpu")]
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(folder / "inductor")
    start = time.perf_counter()
    summary = CHECKS["fuzz_parity"].run(fuzz, RunCache())
    return examples / ((time.perf_counter() - start) / 60), summary


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--optimizer", default="torch.optim.Adam")
    args = parser.parse_args()
    results = {dynamic: rate(args.optimizer, args.examples, dynamic) for dynamic in (True, False)}
    for dynamic, (per_minute, summary) in results.items():
        print(f"dynamic={dynamic!s:<5} {per_minute:7.1f} examples/min   {summary}")
    print(f"ratio dynamic/static: {results[True][0] / results[False][0]:.2f}")


if __name__ == "__main__":
    main()

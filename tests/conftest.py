import functools
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # planted.py and helpers.py

import pytest

PYTESTER_ADDOPTS = "-p no:randomly --optim-device cpu"

# A torch with Triton (any CUDA build) starts a pool of one compile process per core in every process at
# its first compile (inductor's warm pool). Here that is each xdist worker, each nested pytest session and
# each rank they start: on a 16-core GPU machine, hundreds of processes importing torch at once, for graphs
# of a few kernels. The suite compiles in process, and its nested sessions inherit it; a contributor's own
# setting wins.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

# pytester's in-process runs drop the modules they imported; inductor's lowering registers operator libraries
# (torch.library), which torch refuses to register twice, so a later compile in the worker raised when an
# in-process run had imported it first. Imported here, it outlives every in-process run.
import torch._inductor.lowering  # noqa: E402, F401


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Under xdist, the suite's tests spread one by one, as with xdist's `load`, but a module with a
    module-scoped fixture (a whole subprocess session over planted optimizers, a minute or more) goes
    to one worker whole: spread, each worker would run that session again. (Not xdist's loadgroup:
    pytest 9.2 derives nodeid from Node._id, and xdist 3.8 tags groups by writing _nodeid.)"""
    if config.option.dist != "load" or config.getoption("optim_spec"):
        return None
    # imported here: only an xdist session gets here
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if _has_module_fixture(root / path) else nodeid

        def _assign_work_unit(self, node) -> None:
            # whole modules first: handed out last, one would run alone at the end while the other workers idle
            for scope in [scope for scope in self.workqueue if "::" not in scope]:
                self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return SuiteScheduling(config, log)


@functools.cache
def _has_module_fixture(path: Path) -> bool:
    return path.suffix == ".py" and 'scope="module"' in path.read_text()


@pytest.fixture(autouse=True)
def nested_sessions_on_cpu(monkeypatch):
    """Every pytest session a test starts in a subprocess of its own gets the same fixed order and CPU
    cases as pytester's below: on a GPU machine `init` writes CUDA cases too, which would double the
    counts the tests expect."""
    monkeypatch.setenv("PYTEST_ADDOPTS", PYTESTER_ADDOPTS)


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester runs get the suite's fixed order (pytester clears PYTEST_ADDOPTS first), and CPU cases
    only: the counts the tests expect are CPU's, on a contributor's GPU machine too. Tests about
    random order pass `-p randomly`, those about devices pass their own `--optim-device` (it wins)."""
    monkeypatch.setenv("PYTEST_ADDOPTS", PYTESTER_ADDOPTS)
    return pytester


@pytest.fixture(scope="session")
def rank_pools():
    """Rank processes kept for the worker's whole run, as a session keeps them for its cases."""
    from pytest_optimtest.harness.ranks import RankPools

    pools = RankPools()
    yield pools
    pools.close()


@pytest.fixture(autouse=True)
def ranks_shared(monkeypatch, rank_pools):
    """Every RunCache a test makes runs its rank jobs on the worker's kept ranks: starting two ranks costs
    about 9 s of CPU (each imports torch and joins the group), once per test where each made its own.
    A job that fails ends its ranks, and the next job starts fresh ones (RankPools.run). Tests about
    rank lifetimes make a RankPools of their own."""
    from pytest_optimtest.harness import run_cache

    monkeypatch.setattr(run_cache, "RankPools", lambda: rank_pools)


@pytest.fixture
def ci_profile():
    """Hypothesis's `ci` settings profile (ours: derandomized, 10 examples) for the test."""
    from hypothesis import settings

    from pytest_optimtest.harness.hypothesis_runs import register_profiles

    register_profiles()
    previous = settings.get_current_profile_name()
    settings.load_profile("optimtest-ci")
    yield
    settings.load_profile(previous)

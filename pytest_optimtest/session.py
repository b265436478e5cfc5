"""One pytest session's spec run. The session object is the plugin: pytest calls its hooks, each a
line or three into its own methods, and the items call it to run their checks. It owns the
registry of checks, the run cache, the outcomes (for prerequisites), the results and what
happens at the end: the summary, the JSON report, the baseline gate and update mode.
Nothing global: it lives on the pytest config, as pytest-benchmark's and syrupy's sessions do."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest

from . import report as reporting
from . import scheduling, update
from .checks import BUILTIN, CHECKS, Check, NotApplicable, Registry, RegistryError, Vacuous, Verdict
from .checks.registry import entry_point_checks
from .supervisor import supervised
from .harness.containment import JOURNAL_ENV, CaseTimedOut, Journal, deadline, journal_folder
from .harness.devices import selected_devices, unavailable_reason
from .harness.hypothesis_runs import register_profiles
from .harness.blame import blame, one_line, root_cause
from .harness import torch_api
from .harness.diagnosis import PER_PARAM_REGIMES, PRECISION_CASTS, PRECISION_CASTS_FOUND, STORAGE_SWAP, not_comparable, run_diagnoses
from .harness.ladder import COMPARED_COMPILED, RungFailure
from .harness.ranks import RankFailure
from .harness.run_cache import CaseKey, RunCache
from .harness.vacuity import Blocked
from .items import SESSION, SESSION_PLUGIN, CheckItem, SpecFile
from .spec.case import Case, FuzzCase
from .spec.schema import LOW_PRECISION

SPEC_SUFFIXES = (".yaml", ".yml")
PARITYS_RUNGS = ("graph_captured", "compiled_steps", "compiled_matches")  # what parity's own verdict would say
T = TypeVar("T")
BUILTIN_NAMES = frozenset(c.name for c in BUILTIN)
_REGISTRY = pytest.StashKey[Registry]()  # the registry of a session without specs (fixtures and markers only)


def activate(config: pytest.Config, roots: list[Path]) -> None:
    """Set this session up to run the specs under `roots` (called from the entry point's configure)."""
    if not hasattr(config, "workerinput") and JOURNAL_ENV not in os.environ:  # the controller: its workers inherit it
        folder = tempfile.mkdtemp(prefix="optimtest-journal-")
        os.environ[JOURNAL_ENV] = folder
        def remove_journal() -> None:
            os.environ.pop(JOURNAL_ENV, None)
            shutil.rmtree(folder, ignore_errors=True)

        config.add_cleanup(remove_journal)
    session = config.stash[SESSION] = OptimtestSession(config, roots, registry_for(config))
    config.pluginmanager.register(session, SESSION_PLUGIN)


def third_party_checks(config: pytest.Config) -> list[Check]:
    """Checks from the `pytest_optimtest_checks` hook and the `pytest_optimtest.checks` entry points."""
    return [c for checks in config.hook.pytest_optimtest_checks() for c in (checks or [])] + entry_point_checks()


def registry_for(config: pytest.Config) -> Registry:
    """This session's checks: the built-in ones plus the third-party ones, registered once."""
    if SESSION in config.stash:
        return config.stash[SESSION].registry
    if _REGISTRY not in config.stash:
        try:
            config.stash[_REGISTRY] = CHECKS.with_checks(third_party_checks(config))
        except RegistryError as exc:
            raise pytest.UsageError(f"pytest-optimtest: cannot register check: {exc}") from None
    return config.stash[_REGISTRY]


class OptimtestSession:
    """What a session with specs holds and does, from configure to the end of the session."""

    def __init__(self, config: pytest.Config, roots: list[Path], registry: Registry) -> None:
        self.config, self.roots, self.registry = config, roots, registry
        self.runs = RunCache()
        self.results = reporting.Results()
        self.remaining: Counter[CaseKey] = Counter()  # items of a case not yet torn down
        self.parity_runs: set[CaseKey] = set()  # cases whose parity item runs: the one red of their compiled rungs
        self.outcomes: dict[tuple[CaseKey, str], str | None] = {}  # None: passed; else why not
        self.root_causes: dict[tuple[CaseKey, str], str] = {}  # (case, failed rung) -> the one item red with it
        self.strict = bool(config.getoption("optim_strict"))
        self.absent: Counter[tuple[str, str]] = Counter()  # (device, why unavailable) -> items not generated
        self.messages: list[str] = []  # lines for the terminal summary
        self.partial = False  # some generated items were deselected
        self.check_seconds = 0.0
        folder = journal_folder()
        self.journal = Journal(folder) if folder is not None else None
        register_profiles()
        self._direct_args()

    # -- hooks: a line or three each ------------------------------------------------------------

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        return SpecFile.from_parent(parent, path=file_path) if self.is_spec(file_path) else None

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> Iterator[None]:
        result = yield  # after every plugin deselected (-k, pytest-split)
        self.selected([i for i in items if isinstance(i, CheckItem)])
        return result

    def pytest_report_collectionfinish(self) -> list[str]:
        return self.absent_lines()

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.partial = self.partial or bool(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.results.add(report)  # workers' reports too, under xdist

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: the plugin runs without xdist too
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        return scheduling.make_scheduler(config, log)

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist's: the item a worker died in, before it is reported
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        scheduling.describe_crash(report, self.journal, self.config.rootpath)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.write_summary(terminalreporter)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.finish(session)

    # -- collection ----------------------------------------------------------------------------

    def _direct_args(self) -> None:
        config = self.config
        if config.getoption("optim_spec") and config.args_source != pytest.Config.ArgsSource.ARGS:
            # `pytest --optim-spec specs/` runs the specs, not the testpaths.
            config.args[:] = [str(p) for p in config.getoption("optim_spec")]
        else:
            # a root is added unless an argument names it, a folder above it, or a part of it (a
            # node id copied from a report runs that node, not the whole root)
            named = [Path(a.split("::")[0]).resolve() for a in config.args]
            config.args.extend(str(r) for r in self.roots
                               if not any(r == c or c in r.parents or r in c.parents for c in named))
        if getattr(config.option, "dist", "no") == "load":
            # Keep a case's checks on one worker, so its compiled run is made once: loadscope groups
            # by the node id up to its last '::', which for a check item is its case. (Not loadgroup:
            # pytest 9.2 derives nodeid from Node._id, and xdist 3.8 tags groups by writing _nodeid.)
            config.option.dist = "loadscope"

    def is_spec(self, path: Path) -> bool:
        return path.suffix in SPEC_SUFFIXES and any(path == r or r in path.parents for r in self.roots)

    def generated(self, cases: Iterable[Any]) -> Iterator[Any]:
        """The cases to make items for: those of the selected devices that this machine has
        (the others are counted for the header, not generated)."""
        chosen = selected_devices(self.config)
        reasons: dict[str, str | None] = {}
        horizon = self.config.getoption("optim_horizon")
        if horizon:  # the nightly's longer runs: parity and the laws take at least this many steps
            cases = [replace(c, steps=max(c.steps, horizon)) if isinstance(c, Case) else c for c in cases]
        for case in cases:
            if chosen is not None:
                if case.device in chosen:
                    yield case
                continue
            if case.device not in reasons:
                reasons[case.device] = unavailable_reason(case.device)
            why = reasons[case.device]
            if why:  # not generated: a CPU machine shows its real results, not a wall of skips
                self.absent[case.device, why] += len(case.checks)
            else:
                yield case

    def selected(self, items: list[CheckItem]) -> None:
        """Count each case's selected items (its runs are freed after the last one) and note the
        cases where a selected check needs the perturbation phase of the compiled run."""
        perturbed = set()
        for item in items:
            self.remaining[item.case.key] += 1
            if item.check == "parity" and item.get_closest_marker("skip") is None:
                self.parity_runs.add(item.case.key)
            if "perturbations" in self.registry[item.check].needs:
                perturbed.add(item.case.key)
        self.runs.perturbed = perturbed

    def absent_lines(self) -> list[str]:
        return [f"optimtest: {n} items of {device} cases not generated, {why.partition(': ')[2] or why} "
                f"(--optim-device {device} lists them as skips)" for (device, why), n in self.absent.items()]

    # -- running items -------------------------------------------------------------------------

    def setup_item(self, item: CheckItem) -> None:
        """Skip the item where its case's device is missing, a rule skips it, or a prerequisite did not pass."""
        # the record goes with every report of this item, a skip in setup's included
        item.user_properties[:] = [(reporting.RECORD_KEY, reporting.record(item, {}))]
        reason = unavailable_reason(item.case.device) or item.case.skip.get(item.check)
        if reason:
            pytest.skip(reason)
        died = self.journal.died_in(item.case.key) if self.journal is not None else None
        if died:
            pytest.fail(f"crashed: the process running this case died in {died} (a native crash or an exit in the "
                        "optimizer's step or in torch); "
                        + ("the supervisor ran the session again" if supervised() else "pytest-xdist replaced it")
                        + ", and this case is not run again",
                        pytrace=False)
        for needed in self.registry[item.check].prerequisites:
            if needed in item.case.checks:
                why = self.outcome(item.case, needed)
                if why:
                    pytest.skip(f"prerequisite {needed!r} did not pass: {why}")

    def outcome(self, case: Any, name: str) -> str | None:
        """None when check `name` passed on `case`, else why not; runs it now if it has not run
        yet (under pytest-randomly a check may come before its prerequisite)."""
        key = (case.key, name)
        if key not in self.outcomes:
            if name in case.skip:
                self.outcomes[key] = f"skipped: {case.skip[name]}"
            elif (failure := self._blocking(name, case)) is not None:
                self.outcomes[key] = failure.blocked()
            else:
                try:
                    self._run_check(name, case)
                    self.outcomes[key] = None
                except NotApplicable as exc:
                    self.outcomes[key] = f"not applicable: {exc}"
                except (Exception, CaseTimedOut) as exc:  # any failure of the prerequisite is the reason to skip
                    self.outcomes[key] = one_line(exc)
        return self.outcomes[key]

    def run_item(self, item: CheckItem) -> str | None:
        """Run the item's check on the rungs it stands on; record its outcome, verdict and metrics
        (a skip when not applicable, blocked by a rung that failed, or vacuous)."""
        check, key, start = self.registry[item.check], (item.case.key, item.check), time.perf_counter()
        verdict: dict[str, Any] | None = None
        evidence: dict[str, Any] | None = None
        try:
            failure = self._blocking(item.check, item.case)
            if failure is not None:
                kind = self._claim(item, failure)
                verdict = {"kind": kind, **failure.as_record()}
                _raise_blocked(item, failure, kind)
            try:
                result = self._run_check(item.check, item.case)
            except Blocked as exc:  # a check's own "blocked by" (a compiled half, the sharded run, another law's red)
                if item.get_closest_marker("xfail") is not None:  # that the spec declares failing: fails as declared
                    raise AssertionError(str(exc)) from exc
                verdict = {"kind": "blocked", "reason": str(exc)}
                raise
            except Exception as exc:
                vacuous = self._not_comparable(item, exc) if isinstance(exc, AssertionError) else None
                if vacuous is not None:  # a verdict the case's RNG use makes meaningless
                    raise vacuous from exc
                failure = self._parity_failed(item)  # a red where the case's compiled step already differs: parity's
                if failure is None:
                    failure, kind = self._swapped_storage(item, exc)  # the same cause, in every regime that holds storage
                    if failure is None:
                        failure, kind = self._inductor_rounding(item, exc)  # bf16 rounding, in every compiled regime
                    if failure is None:
                        failure, kind = self._same_error(item, exc)  # the same error, raised in another check's run
                    if failure is None:
                        raise
                    verdict = {"kind": kind, **failure.as_record()}
                    if kind == "root_cause":
                        raise
                kind = "vacuous" if failure.vacuous else "blocked"  # a difference that proves nothing is no red here either
                verdict = {"kind": kind, **failure.as_record()}
                _raise_blocked(item, failure, kind)
            self.outcomes[key] = None
            if isinstance(result, Verdict):
                evidence = result.evidence
            elif item.check in BUILTIN_NAMES:  # no evidence, no pass
                raise Vacuous(f"{item.case.id}: {item.check} returned no evidence of what it compared (a bug of "
                              "pytest-optimtest's: please report it)")
            return result
        except Vacuous as exc:
            self.outcomes[key] = f"vacuous: {exc}"
            verdict = verdict or {"kind": "vacuous", "reason": str(exc)}
            if self.strict or getattr(item.case, "strict", False):
                pytest.fail(f"vacuous, and strict mode fails it (--optim-strict or the spec's `strict`): {exc}", pytrace=False)
            pytest.skip(str(exc) if "vacuous" in str(exc) or "diverged" in str(exc) else f"vacuous: {exc}")
        except NotApplicable as exc:
            self.outcomes[key] = f"not applicable: {exc}"
            pytest.skip(str(exc))
        except (Exception, CaseTimedOut) as exc:
            self.outcomes[key] = one_line(exc)
            item.diagnoses = [*item.diagnoses, *self._diagnoses(item)]
            raise
        finally:
            self.check_seconds += time.perf_counter() - start
            metrics = reporting.item_metrics(check, item.case, self.runs)
            if item.diagnoses:
                metrics = {**metrics, "diagnoses": sorted({*metrics.get("diagnoses", []), *item.diagnoses})}
            item.user_properties[:] = [(reporting.RECORD_KEY, reporting.record(item, metrics, verdict, evidence))]

    def _parity_failed(self, item: CheckItem) -> RungFailure | None:
        """The case's failed compiled_matches rung, for a red of a check that compares compiled values with
        eager ones: the same compiled-only difference, told once, by parity (which runs for this case)."""
        if item.check == "parity" or not isinstance(item.case, Case) or item.case.key not in self.parity_runs \
                or not self._compares_compiled(item.check):
            return None
        failure = self.runs.ladder(item.case).first_failure(("compiled_matches",))
        return failure if failure is not None and failure.rung == "compiled_matches" else None

    def _swapped_storage(self, item: CheckItem, exc: BaseException) -> tuple[RungFailure | None, str]:
        """(the red as a root cause, "root_cause" or "blocked") for a check of a regime that holds its params'
        storage (DDP, ZeRO, FSDP2, in-backward) failing on an optimizer whose eager step swaps that storage:
        the first such red of the case is its one red, the later ones are blocked by it; (None, "") otherwise."""
        if item.check not in PER_PARAM_REGIMES or not isinstance(item.case, Case) or not self.runs.ladder(item.case).swapped:
            return None, ""
        failure = RungFailure(f"the same cause in {item.check}", f"{STORAGE_SWAP}: {one_line(exc)}", mechanism=STORAGE_SWAP)
        return self._claimed(item, STORAGE_SWAP, failure, "the same cause in")

    def _inductor_rounding(self, item: CheckItem, exc: BaseException) -> tuple[RungFailure | None, str]:
        """(the red as a root cause, "root_cause" or "blocked") for a check other than parity that compares a
        compiled run with eager at bf16/fp16 and passes when run again with inductor's emulate_precision_casts:
        inductor's rounding, torch's doing, one root cause however many compiled regimes of the case show it
        (parity's own red says it with its reruns); (None, "") otherwise."""
        case = item.case
        if item.check == "parity" or not isinstance(exc, AssertionError) or not isinstance(case, Case) \
                or case.dtype not in LOW_PRECISION or not self._compares_compiled(item.check):
            return None, ""
        try:
            with torch_api.inductor_config(emulate_precision_casts=True):
                self._guarded(case, f"check {item.check!r} with emulate_precision_casts",
                              lambda: self.registry[item.check].run(case, RunCache()))
        except (Exception, CaseTimedOut):  # noqa: BLE001  # still red, or no verdict either way: the red stands as it is
            return None, ""
        cause = PRECISION_CASTS_FOUND.format(dtype=case.dtype, check=item.check)
        failure = RungFailure(f"the same cause in {item.check}", f"{cause}: {one_line(exc)}", mechanism=PRECISION_CASTS)
        item.diagnoses = [cause]  # the red's, where it is the root cause (a blocked item's reason holds it)
        return self._claimed(item, PRECISION_CASTS, failure, "the same cause in")

    def _same_error(self, item: CheckItem, exc: BaseException) -> tuple[RungFailure | None, str]:
        """(the error as a root cause, "root_cause" or "blocked") where the optimizer's or torch's code raised
        it: the first item of the case to raise it is its one red, a later one raising the same error in the
        same function is blocked by it (a step that refuses params without grads fails every check that gives it
        some), its own asserts included, and a fuzz property's minimal example that raised it (each property of a
        spec's fuzz case draws the same params: a `.view` over a transposed one raises in all of them); (None, "")
        for a check's own verdict or a rank's failure."""
        cause = exc.__cause__
        if isinstance(exc, AssertionError) and cause is not None and blame(cause).owner in ("optimizer", "torch") \
                and not getattr(exc, "mechanism", ""):  # a verdict that names the root cause keeps it
            exc = cause  # a check's verdict on the error it caught (a diagnosis beside it): the error is the cause
        if not isinstance(item.case, (Case, FuzzCase)):
            return None, ""
        found = blame(exc)
        mechanism = getattr(exc, "mechanism", "") or found.mechanism  # a rank's job's, or this process's
        told = getattr(exc, "root", "")  # a verdict on an error raised on a rank, keyed there (KnownCause)
        if found.owner not in ("optimizer", "torch") and not (mechanism or told):  # a check's own verdict, a rank's failure
            return None, ""
        failure = RungFailure(f"the same error in {item.check}", one_line(exc), found.where or found.innermost)
        if isinstance(exc, RankFailure) and told and not mechanism:  # said as the rank raised it, not as the ranks ended
            said, _, where = told.rpartition(" at ")
            failure = replace(failure, cause=said or failure.cause, where=where)
        if mechanism:  # one root cause however many places raise it (the step's hooks, state_dict's, on the ranks)
            failure = replace(failure, cause=f"{mechanism}: {failure.cause}", mechanism=mechanism)
        return self._claimed(item, mechanism or told or root_cause(exc, found=found), failure, "the same error in")

    def _claimed(self, item: CheckItem, cause: str, failure: RungFailure, same: str) -> tuple[RungFailure, str]:
        """(failure, "root_cause") for the case's first item that fails by `cause`; (failure told as `same` <that
        item's check>, "blocked") for every later one."""
        claimed = self.root_causes.setdefault((item.case.key, cause), item.nodeid)
        if claimed == item.nodeid:
            return failure, "root_cause"
        return replace(failure, rung=f"{same} {claimed.rsplit('::', 1)[-1].split('[')[0]}"), "blocked"

    def _compares_compiled(self, check: str) -> bool:
        """Whether the check compares compiled values with eager ones (the compiled run's diagnoses and
        parity's compiled_matches are about it)."""
        return set(COMPARED_COMPILED) <= set(self.registry[check].ladder)

    def _not_comparable(self, item: CheckItem, exc: AssertionError) -> Vacuous | None:
        if not isinstance(item.case, Case) or blame(exc).owner != "pytest-optimtest":  # not a check's verdict
            return None
        return not_comparable(item.check, item.case.id, self.runs.ladder(item.case).draws, exc)

    def _diagnoses(self, item: CheckItem) -> list[str]:
        """What the case's runs show about any failure on it: the diagnoses belong to the run, not to parity."""
        if not isinstance(item.case, Case) or item.root_cause is not None:
            return []
        try:
            ladder = self.runs.ladder(item.case)
            compiled = self.runs.peek("compiled", item.case) if self._compares_compiled(item.check) else None
            return run_diagnoses(item.check, compiled, ladder.draws, ladder.swapped)
        except Exception:  # noqa: BLE001  # a diagnosis is evidence beside the verdict, never a second failure
            return []

    def _blocking(self, name: str, case: Any) -> RungFailure | None:
        """The lowest failed rung of the case's ladder that check `name` stands on, or None."""
        rungs = self.registry[name].ladder
        if not rungs or not isinstance(case, Case):
            return None
        return self._guarded(case, f"check {name!r}", lambda: self.runs.ladder(case).first_failure(rungs))

    def _claim(self, item: CheckItem, failure: RungFailure) -> str:
        """What a failed rung makes of this item: the case's one red for it (the first item to need
        it), blocked by it, or vacuous or not applicable where the rung says so."""
        if failure.vacuous:
            return "vacuous"
        if failure.not_applicable:
            return "not_applicable"
        if failure.rung in PARITYS_RUNGS and item.check != "parity" and item.case.key in self.parity_runs:
            return "blocked"  # parity is the red, in whatever order the items run
        claimed = self.root_causes.setdefault((item.case.key, failure.rung), item.nodeid)
        return "root_cause" if claimed == item.nodeid else "blocked"

    def _run_check(self, name: str, case: Any) -> Verdict | str | None:
        """Run a check within the case's timeout, its progress journaled for a process that dies."""
        return self._guarded(case, f"check {name!r}", lambda: self.registry[name].run(case, self.runs))

    def _guarded(self, case: Any, what: str, work: Callable[[], T]) -> T:
        timeout = self.config.getoption("optim_timeout") or getattr(case, "timeout_s", None)
        journal = self.journal.running(case.key, what) if self.journal is not None else contextlib.nullcontext()
        with journal, deadline(timeout):
            return work()

    def teardown_item(self, item: CheckItem) -> None:
        """Free the case's runs once every one of its items ran, in whatever order."""
        self.remaining[item.case.key] -= 1
        if self.remaining[item.case.key] <= 0:
            self.runs.release(item.case)

    # -- the end of the session ----------------------------------------------------------------

    def write_summary(self, terminal: Any) -> None:
        if self.runs.cases_run:
            terminal.write_line(f"optimtest: {self.runs.cases_run} case runs (each shared by the checks that asked for it); "
                                f"{self.check_seconds:.1f}s inside checks")
        if not self.results.records:
            return
        terminal.section("optimtest summary per spec")
        for line in [*reporting.terminal_table(self.results.rows()), *reporting.root_cause_lines(self.results), *self.messages]:
            terminal.write_line(line)

    def finish(self, session: pytest.Session) -> None:
        """End the rank processes; on the controller, write the report, the GitHub summary, the
        baseline gate's verdict and update mode's edits."""
        self.runs.close()
        if hasattr(self.config, "workerinput"):  # xdist workers: the controller reports
            return
        from .harness.torch_api import torch_version  # torch is loaded by now; the adapter is the one place

        option = self.config.getoption
        if option("optim_report"):
            reporting.write_json(option("optim_report"), self.results, torch_version())
            self.messages.append(f"optimtest: report written to {option('optim_report')}")
        summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary_file and self.results.records:
            with open(summary_file, "a", encoding="utf-8") as f:
                f.write(reporting.markdown(self.results.rows(), torch_version()))
        if option("optim_baseline") and self._gate(option("optim_baseline")):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if option("optim_update_expected"):
            self.messages += self._update_expected()

    def _gate(self, baseline: str) -> bool:
        """Whether the run regressed against the saved report (the lines say how)."""
        found = reporting.regressions(baseline, self.results)
        if found:
            self.messages.append(f"optimtest: {len(found)} regression(s) against {baseline}:")
            self.messages += [f"  {line}" for line in found]
        else:
            self.messages.append(f"optimtest: no regression against {baseline} "
                                 "(generated kernels, recompiles, graph breaks, checks' own gate numbers)")
        return bool(found)

    def _update_expected(self) -> list[str]:
        partial = self._partial_run()
        if partial and not self.config.getoption("optim_update_force"):
            return [f"optimtest: --optim-update-expected refused: a partial run ({partial}) would mark unrun entries "
                    "stale and write expectations from some cases only; rerun the whole suite, or add --optim-update-force"]
        planned = update.plan(self.results.records)
        lines = [f"optimtest: updated {line}" for line in update.apply(planned.changes)]
        lines += [f"optimtest: not updated: {c}" for c in planned.conflicts]
        lines += [f"optimtest: stale: {s}" for s in planned.stale]
        return lines or ["optimtest: --optim-update-expected: every expectation already matches"]

    def _partial_run(self) -> str | None:
        option, reasons = self.config.option, []
        if getattr(option, "keyword", ""):
            reasons.append(f"-k {option.keyword!r}")
        if getattr(option, "markexpr", ""):
            reasons.append(f"-m {option.markexpr!r}")
        if getattr(option, "lf", False):
            reasons.append("--lf")
        if getattr(option, "deselect", None):
            reasons.append("--deselect")
        if any("::" in str(a) for a in self.config.args):
            reasons.append("node ids")
        if self.partial:
            reasons.append("deselected items")
        return ", ".join(dict.fromkeys(reasons)) or None


def _raise_blocked(item: CheckItem, failure: RungFailure, kind: str) -> None:
    if kind == "vacuous":
        raise Vacuous(failure.blocked())
    if kind == "not_applicable":
        raise NotApplicable(failure.cause)
    if kind == "blocked" and item.get_closest_marker("xfail") is not None:
        # the spec declares this check failing on the case: blocked by the root cause, it fails as declared
        # (strict: once the rung holds again, the check runs, and a pass tells the author to drop the xfail)
        raise AssertionError(failure.blocked()) from failure.error  # its error's whole text, for a rule's `match`
    if kind == "blocked":
        raise Blocked(failure.blocked())
    item.root_cause = failure
    raise failure.error if failure.error is not None else AssertionError(failure.cause)

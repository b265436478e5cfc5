"""pytest-xdist's scheduling of a spec session: each case's items on one worker, and workers
that die in a case replaced without losing the session.

A spec session runs under xdist's loadscope (session.py sets it), whose scope for a check item is
its case. xdist replaces a worker that dies, but loadscope (xdist 3.5 to 3.8) then hands work to
the replacement before its collection has arrived, and the controller dies on a KeyError
(INTERNALERROR, exit code 3, the rest of the results lost; pytest-xdist issues 1189 and 1362).
It also queues the item the worker died in again, so that item is reported twice: as xdist's
crash and as the journal's "crashed" (harness/containment.py) on the replacement.
`CaseScheduling` is loadscope with three mends: a worker gets work only once its collection is in;
the item that was running when its worker died is reported once, as the crash (which
`describe_crash` completes with what the case was doing); and a worker is never left holding one
last item with nothing more to come (it waits for more work or its shutdown, and a case given back
without its crashed item would otherwise hang the session).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from .report import RECORD_KEY, record_fields


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The scheduler for a spec session under loadscope; None (xdist's own) otherwise."""
    if getattr(config.option, "dist", "no") != "loadscope":
        return None
    return _case_scheduling()(config, log)


def _case_scheduling() -> type:
    # imported here: this module is loaded only under pytest-xdist, which the plugin does not require
    from xdist.scheduler import LoadScopeScheduling

    class CaseScheduling(LoadScopeScheduling):
        """loadscope that survives workers dying in a case."""

        def _reschedule(self, node: Any) -> None:
            if node not in self.registered_collections:  # a replacement: work comes once its collection is in
                return
            super()._reschedule(node)
            # A worker holds its last item back until it gets another or is shut down; a case given
            # back without the item it died in can leave it one item and nothing to come: top it up.
            while not node.shutting_down and self._pending_of(self.assigned_work[node]) < 2:
                if self.workqueue:
                    self._assign_work_unit(node)
                else:
                    node.shutdown()

        def remove_node(self, node: Any) -> str | None:
            """Give the dead worker's unfinished cases back; the item it died in is the crash (the
            first it had not finished: a worker runs its items in order), reported once by xdist."""
            workload = self.assigned_work.pop(node)
            pending = [nodeid for unit in workload.values() for nodeid, done in unit.items() if not done]
            if not pending:
                return None
            for unit in workload.values():
                if pending[0] in unit:
                    unit[pending[0]] = True
            left = {scope: unit for scope, unit in workload.items() if not all(unit.values())}
            if left:
                self.workqueue.update(left)
                for other in self.assigned_work:
                    self._reschedule(other)
            return pending[0]

    return CaseScheduling


def describe_crash(report: pytest.TestReport, journal: Any, rootpath: Path) -> None:
    """xdist's report of the item a worker died in ("worker 'gw1' crashed while running ..."),
    completed: what the case was doing (the journal's check and step), a reproducer, and the
    item's record, so that the JSON report has it too."""
    path, case_id, check = (report.nodeid.split("::") + ["", ""])[:3]
    died = journal.died_in((os.path.normpath(rootpath / path), case_id)) if journal is not None else None
    how = _how_it_ended(report)
    report.longrepr = (f"{report.longrepr}: the process running this case died"
                       + (f" ({how})" if how else "") + (f" in {died}" if died else "")
                       + " (a native crash or an exit in the optimizer's step or in torch; the stack faulthandler "
                         "printed for a fatal signal is in the output above); this case is not run again\n"
                         f"reproduce: pytest --optim-spec {path} -k '{case_id} and {check}' -n 0")
    report.when = "call"  # xdist's "???": the item failed while running, as the report's record says
    # the controller has the node id only: no dtype or optimizer
    report.user_properties = [(RECORD_KEY, record_fields(path, case_id, check, case_id.rsplit("-", 1)[-1], None, None,
                                                         "controller", {}, {"kind": "crashed", "in": died}))]


def _how_it_ended(report: pytest.TestReport) -> str | None:
    """The dead worker's signal or exit code, read from the process execnet started for it (xdist
    hands the worker over on the report; execnet's popen is not public API, hence every getattr)."""
    popen = getattr(getattr(getattr(getattr(report, "node", None), "gateway", None), "_io", None), "popen", None)
    try:
        code = popen.wait(timeout=5) if popen is not None else None
    except Exception:  # still running, or not a subprocess.Popen after all: say nothing rather than guess
        return None
    if code is None:
        return None
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"

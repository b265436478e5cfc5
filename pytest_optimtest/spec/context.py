"""What a check's section hooks see of the spec being expanded (`validate`) and of one case
(`expect`): positions for error messages, the running torch, the kernel tables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import SpecError
from .kernel_table import KernelExpectation, kernel_expectation
from .loader import Locator
from .values import value_problem


@dataclass
class SpecContext:
    """One optimizer spec, for a check's `validate(section, spec)`."""

    locator: Locator
    spec: Any  # the validated Spec model, sections included
    optimizer: type
    schedulers: tuple[str, ...]  # the scheduler names the spec declares
    torch_version: str
    _no_entry: dict[tuple, KernelExpectation] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return self.locator.path

    def error(self, parts: tuple[object, ...], message: str) -> SpecError:
        """A SpecError at that key path, with its file and line."""
        return self.locator.error(parts, message)

    def check_values(self, values: dict[str, Any], where: tuple[object, ...]) -> None:
        """Kwarg-like values (`{tensor: ...}`, `{import: ...}`) are well formed, else a SpecError."""
        for key, raw in values.items():
            problem = value_problem(raw)
            if problem:
                raise self.error((*where, key), problem)

    def kernels(self, counts: dict, at: tuple, case_id: str, device: str) -> KernelExpectation:
        """The entry of the kernel table at key path `at` that applies to the case."""
        if counts.get(self.torch_version, {}).get(device):
            return kernel_expectation(counts, at, self.locator, case_id, device, self.torch_version)
        if (at, device) not in self._no_entry:  # no table here: the same "add one" for every case
            self._no_entry[at, device] = kernel_expectation(counts, at, self.locator, case_id, device, self.torch_version)
        return self._no_entry[at, device]


@dataclass(frozen=True)
class CaseContext:
    """One case being made, for a check's `expect(section, case)`."""

    spec: SpecContext
    id: str
    device: str

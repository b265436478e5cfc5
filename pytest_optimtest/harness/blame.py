"""Whose doing an exception is: the optimizer's own code, torch's, or this plugin's; and the
frames of the user's code it passed through, so a failure points at their file and line."""

from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from . import torch_api

_OURS = str(Path(__file__).resolve().parents[1])
_TORCH = str(Path(torch.__file__).resolve().parent)
_PYTHON = str(Path(traceback.__file__).resolve().parent)  # the standard library, less what is installed into it:
_INSTALLED = {"site-packages", "dist-packages"}


@dataclass(frozen=True)
class Blame:
    owner: str  # "optimizer", "torch" or "pytest-optimtest"
    frames: list[traceback.FrameSummary]  # the user's frames, outermost first
    innermost: str = ""  # the innermost frame of any owner, as "file:line in function (owner)"
    compiled: bool = False  # the optimizer's frames ran under torch.compile (dynamo's frames called them)
    generated: bool = False  # the innermost frame is code inductor generated
    note: str = ""  # why the owner is the optimizer although torch's frame raised, where that is known
    mechanism: str = ""  # the root cause, where known, however many places it raises in: one red (session.py)

    @property
    def where(self) -> str:
        """The innermost user frame as file:line in function, or ''."""
        if not self.frames:
            return ""
        f = self.frames[-1]
        return f"{f.filename}:{f.lineno} in {_user_function(f.name)}"

    def traceback(self, limit: int = 6) -> str:
        """The user's frames as a traceback excerpt, innermost last."""
        return "".join(traceback.format_list(self.frames[-limit:])).rstrip()


_RESUMED = re.compile(r"torch_dynamo_resume_in_(\w+?)_at_\d+")


def _user_function(name: str) -> str:
    """The user's name for a frame's function: dynamo names the code it resumes after a graph break
    `torch_dynamo_resume_in_<function>_at_<line>`."""
    found = _RESUMED.fullmatch(name)
    return f"{found.group(1)} (resumed after a graph break)" if found else name


def _kind(filename: str) -> str:
    path = str(Path(filename).resolve()) if not filename.startswith("<") else filename
    if _within(path, _OURS):
        return "pytest-optimtest"
    if _within(path, _TORCH) or _generated(path):
        return "torch"  # torch's package, or the code inductor generated
    if filename.startswith("<") or (_within(path, _PYTHON) and not _INSTALLED.intersection(Path(path).parts)):
        return "python"
    return "optimizer"


def file_owner(filename: str) -> str:
    """Whose code a file is: "optimizer" (the user's), "torch", "pytest-optimtest" or "python"."""
    return _kind(filename)


def _generated(path: str) -> bool:
    folder = torch_api.generated_code_dir()
    return folder is not None and _within(path, str(Path(folder).resolve()))


def _within(path: str, folder: str) -> bool:
    """Whether `path` lies in `folder` (torch_optimizer/ is not inside torch/)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def one_line(exc: BaseException) -> str:
    """An exception in one line: its type and its message's first line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def bounded_message(exc: BaseException, lines: int = 12, chars: int = 2000) -> str:
    """The exception as `Type: message`, cut to `lines` lines and `chars` characters, saying how much was left
    out (pybind11's "incompatible function arguments" prints every tensor it was given)."""
    text = f"{type(exc).__name__}: {exc}"
    kept = "\n".join(text.splitlines()[:lines])[:chars]
    return kept if kept == text else f"{kept}\n  ... ({len(text) - len(kept)} more characters of the message)"


def told(exc: BaseException) -> str:
    """The exception in one line, where it was raised, whose doing it is, and why where that is known."""
    found = blame(exc)
    return (f"{one_line(exc)}\n  raised at {found.where or found.innermost} ({found.owner}'s doing)"
            + (f"\n  diagnosis: {found.note}" if found.note else ""))


def refused_on_purpose(exc: BaseException) -> str:
    """'file:line' of the optimizer's own `raise` or `assert` statement that raised `exc` (GPAAdamW's
    `assert lr_max > 0`): a refusal of a value it does not take, on purpose, not a fault; else ''."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or _kind(frames[-1].filename) != "optimizer":
        return ""
    return f"{frames[-1].filename}:{frames[-1].lineno}" if refusal_statement(frames[-1].line or "") else ""


def refusal_statement(line: str, asserted: bool = True) -> bool:
    """Whether a source line refuses on purpose: a `raise` statement, or (with `asserted`) an `assert`."""
    return line.strip().startswith(("raise ", "assert ") if asserted else "raise ")


def blame(exc: BaseException, handler_frames: int = 0) -> Blame:
    """Who raised `exc`: the innermost frame that is not the standard library decides. Only frames
    below this plugin's last one count (pytest's and pluggy's above it are not the optimizer's).
    `handler_frames`: innermost frames to leave out (the timeout's signal handler)."""
    frames = list(traceback.extract_tb(exc.__traceback__))
    frames = frames[:len(frames) - handler_frames]  # a signal handler's own frames: not where it was
    kinds = [_kind(f.filename) for f in frames]
    if "pytest-optimtest" in kinds:
        ours = len(kinds) - 1 - kinds[::-1].index("pytest-optimtest")
        frames, kinds = frames[ours:], kinds[ours:]
    owner = next((k for k in reversed(kinds) if k != "python"), "pytest-optimtest")
    innermost = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name} ({kinds[-1]})" if frames else ""
    traced = torch_api.traced_frames(exc)  # where in the user's code dynamo was when it raised, below torch's frames
    traced_kinds = [_kind(f.filename) for f in traced]
    if torch_api.raised_by_traced_code(exc):  # their code raised while traced (under fullgraph): their doing
        owner = next((k for k in reversed(traced_kinds) if k != "python"), owner)
    # Under torch.compile: dynamo's frames on the stack, or the resume functions it makes of the user's code after a
    # graph break (these run through the C eval-frame hook, with no dynamo frame above them in the traceback).
    compiled = any((k == "torch" and "_dynamo" in f.filename) or f.name.startswith("torch_dynamo_resume_in_")
                   for f, k in zip(frames, kinds))
    generated = bool(frames) and _generated(str(Path(frames[-1].filename).resolve()))
    init_skipped = _optimizer_init_skipped(exc, frames)
    note = (init_skipped or _called_with_arguments_torch_does_not_take(exc, frames, kinds) or _dtensor_refuses(exc, frames, kinds)
            or _calls_what_torch_removed(exc, frames, kinds))
    users = [f for f, k in [*zip(frames, kinds), *zip(traced, traced_kinds)] if k == "optimizer"]
    return Blame("optimizer" if note else owner, users, innermost, compiled, generated, note,
                 INIT_SKIPPED if init_skipped else "")


_SIGNATURE_MISMATCH = re.compile(r"(\w+)\(\) (missing \d+ required|got an unexpected keyword argument|takes \d+ positional "
                                 r"argument|got multiple values for argument)")


def _called_with_arguments_torch_does_not_take(exc: BaseException, frames: list[traceback.FrameSummary],
                                               kinds: list[str]) -> str:
    """Why a TypeError over the arguments of a torch function that the optimizer's own line calls is the
    optimizer's doing, though torch's frame raised it (a decorator forwarding *args, **kwargs: agc_optims'
    Adam_AGC calls torch.optim's functional adam() without the `maximize` it has required since 1.13)."""
    found = _SIGNATURE_MISMATCH.match(str(exc)) if isinstance(exc, TypeError) else None
    callers = [f for f, k in zip(frames, kinds) if k == "optimizer"]
    if found is None or not callers or kinds[-1] != "torch" or f"{found.group(1)}(" not in (callers[-1].line or ""):
        return ""
    return (f"its {callers[-1].name} calls torch's {found.group(1)}() with arguments that torch {torch.__version__}'s "
            f"{found.group(1)} does not take (a torch function whose signature changed across releases): the optimizer's doing")


# torch's words for a function it took away (torch.symeig: "deprecated since version 1.9 and is now removed")
REMOVED = re.compile(r"is now removed|has been removed|was removed|deprecated since", re.IGNORECASE)


def _calls_what_torch_removed(exc: BaseException, frames: list[traceback.FrameSummary], kinds: list[str]) -> str:
    """Why torch's refusal of a function it removed, called by the optimizer's own line, is the optimizer's doing
    (deepchem's KFACOptimizer calls torch.symeig, which torch 2.x keeps only to raise that it was removed)."""
    callers = [f for f, k in zip(frames, kinds) if k == "optimizer"]
    if not callers or kinds[-1] != "torch" or not REMOVED.search(str(exc).partition("\n")[0]):
        return ""
    return (f"its {callers[-1].name} calls what torch {torch.__version__.split('+')[0]} removed (`{callers[-1].line}`), and "
            "torch says so: the optimizer's doing, though torch's frame raised it")


# DTensor's refusals of an op as its caller wrote it, each telling the caller what to write instead
_DTENSOR_REFUSALS = re.compile(r"in-place operations that require placement changes are not supported|"
                               r"got mixed torch\.Tensor and DTensor")


def _dtensor_refuses(exc: BaseException, frames: list[traceback.FrameSummary], kinds: list[str]) -> str:
    """Why DTensor's refusal of an op that the optimizer's own line calls is the optimizer's doing, though
    torch's frame raised it: DTensor supports the op written otherwise, and says how (emerging_optimizers'
    ObliqueSGD clamps a norm of sharded params in place: `norm.clamp_min_(eps)` over a Partial placement),
    or, for an in-place op on a plain tensor given a DTensor, raises a bare AssertionError in its dispatch
    (timm's NvNovoGrad: `exp_avg_sq.copy_(norm)`, its state made by torch.zeros([]) beside DTensor params),
    or is asked for a collective over a DTensor (llm-foundry's DecoupledClipLion all-reduces a grad's norm)."""
    callers = [f for f, k in zip(frames, kinds) if k == "optimizer"]
    if not callers:
        return ""
    if isinstance(exc, AssertionError) and not str(exc) and frames[-1].filename.endswith(_DTENSOR_DISPATCH):
        return (f"DTensor's dispatch refuses the in-place op at {callers[-1].name}'s line (`{callers[-1].line}`): it writes a "
                "plain tensor with a DTensor operand, and torch raises a bare AssertionError there; the optimizer keeps "
                "that tensor plain where its params are DTensors (make it from the param, zeros_like(p), or compute out "
                "of place): the optimizer's doing, though torch's frame raised it")
    collective = _COLLECTIVE_OVER_DTENSOR.search(str(exc)) if isinstance(exc, NotImplementedError) else None
    if collective is not None:
        return (f"its {callers[-1].name} passes a DTensor to a collective (c10d.{collective.group(1)}), written for local "
                "shards: DTensor never registers one, as its own ops over sharded params are already global (a norm of "
                "a DTensor is the whole param's, so reducing it again would count each shard twice); reduce "
                "`.to_local()` or skip the reduction where params are DTensors: the optimizer's doing, though torch's "
                "frame raised it")
    if not isinstance(exc, RuntimeError) or not _DTENSOR_REFUSALS.search(str(exc)):
        return ""
    return (f"DTensor refuses the op as {callers[-1].name} writes it over sharded params, and says what works instead (an "
            "out-of-place op, or DTensor operands throughout): the optimizer's doing, though torch's frame raised it")


# DTensor's dispatch asked for a c10d collective (all_reduce of a DTensor): no sharding strategy is, or will be, registered
_COLLECTIVE_OVER_DTENSOR = re.compile(r"Operator c10d\.(\w+?)(?:\.default)? does not have a sharding strategy registered")
_DTENSOR_DISPATCH = os.path.join("distributed", "tensor", "_dispatch.py")


# What torch.optim.Optimizer.__init__ sets and its other methods read (step's hook wrapper, zero_grad, state_dict)
_SET_BY_OPTIMIZER_INIT = re.compile(r"object has no attribute '(_optimizer_\w+|_zero_grad_profile_name|defaults|param_groups|state)'")
_ONLY_OPTIMIZER_INIT_SETS = re.compile(r"_optimizer_\w+|_zero_grad_profile_name")  # the rest, an optimizer may set itself
INIT_SKIPPED = "the optimizer never called torch.optim.Optimizer.__init__"


def mechanism(exc: BaseException, frames: list[traceback.FrameSummary]) -> str:
    """The root cause blame knows `exc` for, or '', where its traceback was kept apart as `frames` (DCP's);
    for an exception with its own traceback, `blame(exc).mechanism`."""
    return INIT_SKIPPED if _optimizer_init_skipped(exc, frames) else ""


def root_cause(exc: BaseException, frames: list[traceback.FrameSummary] | None = None, found: Blame | None = None) -> str:
    """The key of `exc`'s root cause, one red per case (session.py): the mechanism blame knows, else the
    error and the function that raised it (the optimizer's innermost, else the innermost), its line left
    out: DoG reads p.grad unasked at two lines of its step. `frames`: its traceback where it was kept
    apart (DCP's failures on ranks); `found`: blame(exc), where the caller has it."""
    if frames is None:
        found = found or blame(exc)
        known, where = found.mechanism, found.where or found.innermost
    else:
        known = mechanism(exc, frames)
        where = optimizer_frame(frames) or (f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "")
    return known or f"{one_line(exc)} at {re.sub(r':[0-9]+ in ', ' in ', where)}"


# A root cause that several checks' verdicts see (closure_loss's, closure_graph_break's): one red a case.
CLOSURE_NEVER_CALLED = "its step(closure) never calls the closure"


class KnownCause(AssertionError):
    """A check's verdict on an error raised where its exception cannot reach (a rank): one red with the same
    error raised anywhere else in the case (session.py). `mechanism`: the root cause blame told there, if
    any; `root`: its root_cause key."""

    def __init__(self, message: str, mechanism: str, root: str = "") -> None:
        super().__init__(message)
        self.mechanism = mechanism
        self.root = root


def _optimizer_init_skipped(exc: BaseException, frames: list[traceback.FrameSummary]) -> str:
    """Why an AttributeError for what torch.optim.Optimizer.__init__ sets is the optimizer's doing: a
    subclass that never called Optimizer.__init__ (eve's Lookahead) lacks it. Told where torch.optim's
    own code read it, or wherever it was read for what only Optimizer.__init__ sets (its hooks)."""
    found = _SET_BY_OPTIMIZER_INIT.search(str(exc)) if isinstance(exc, AttributeError) else None
    in_torch_optim = bool(frames) and Path(frames[-1].filename).parts[-3:] == ("torch", "optim", "optimizer.py")
    if found is None or not (in_torch_optim or _ONLY_OPTIMIZER_INIT_SETS.fullmatch(found.group(1))):
        return ""
    reader = f"torch.optim.Optimizer's {frames[-1].name}" if in_torch_optim else (f"{frames[-1].name}" if frames else "its code")
    return (f"{reader} read `{found.group(1)}`, which Optimizer.__init__ sets: the optimizer "
            "subclasses torch.optim.Optimizer without calling its __init__, so what it inherits (step's hooks, zero_grad, "
            "state_dict) cannot run; the optimizer's doing (call super().__init__(params, defaults))")




def optimizer_frame(stack: list[traceback.FrameSummary], code: bool = False) -> str:
    """The innermost frame of the optimizer's own code on `stack`, as file:line in function ('' if none);
    `code`: with its source line."""
    for frame in reversed(stack):
        if _kind(frame.filename) == "optimizer":
            line = f": `{frame.line.strip()}`" if code and frame.line else ""
            return f"{frame.filename}:{frame.lineno} in {frame.name}{line}"
    return ""


def recompile_limit_diagnosis(where: str | None, recompiles_for: str) -> str:
    """Why a torch.compile in the optimizer's own code hit dynamo's recompile limit: the optimizer's
    doing; `recompiles_for` says what the regime makes it recompile for."""
    return (f"dynamo's recompile limit ({torch_api.recompile_limit()}), hit by a torch.compile in the optimizer's own "
            f"code{f' at {where}' if where else ''}: the function it compiles recompiles for {recompiles_for} "
            "(dynamo counts them per code object), and under fullgraph the limit raises: the optimizer's doing; one "
            "compiled function that does not guard on the optimizer instance stays under it, and where the optimizer's "
            "users raise torch._dynamo.config.recompile_limit for it, the spec says so: `recompile_limit: N`")

"""Any bytes at all in a spec file give one SpecError (file, line where known, what is wrong),
in bounded time: never another exception, never a hang."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_optimtest.checks import CHECKS
from pytest_optimtest.harness.torch_api import torch_version
from pytest_optimtest.spec import SpecError

# specs/ecosystem left out: generated from one template, and their packages, where installed, import
# torch.distributed, which cannot register its operators again after a pytester in-process run dropped it
SHIPPED = sorted(p for p in Path(__file__).parents[1].glob("specs/**/*.yaml") if "ecosystem" not in p.parts)
SHIPPED_TEXT = [p.read_text() for p in SHIPPED]
SECONDS = 10  # per file; a clean load of the largest shipped spec takes well under one


def load_and_expand(path: Path) -> None:
    CHECKS.cases(path, torch_version())


def assert_only_spec_error(path: Path) -> SpecError | None:
    start = time.perf_counter()
    try:
        load_and_expand(path)
        error = None
    except SpecError as exc:
        error = exc
        assert exc.path == str(path)
        assert "Traceback" not in str(exc)
    assert time.perf_counter() - start < SECONDS, f"{path} took {time.perf_counter() - start:.1f}s"
    return error


YAML_BITS = st.sampled_from([
    "\n", ": ", "- ", "[", "]", "{", "}", "&a ", "*a", "<<: *a\n", "!!python/object:os.system ", "!tag ", "? ",
    "|\n", ">\n", "'", '"', "#", "---\n", "...\n", "%YAML 1.2\n", "\t", "\x00", "\x1b", "\ufeff", "\ud7ff",
    "1e400", "-0", "0x1F", "99999999999999999999", ".nan", "~", "null", "yes", "no", "on",
])
MUTATION = st.tuples(st.floats(0, 1), st.sampled_from(["insert", "delete", "duplicate"]),
                     st.one_of(YAML_BITS, st.text(max_size=20)), st.integers(1, 200))


def mutate(text: str, mutations: list[tuple[float, str, str, int]]) -> str:
    for where, op, payload, length in mutations:
        at = int(where * len(text))
        if op == "insert":
            text = text[:at] + payload + text[at:]
        elif op == "delete":
            text = text[:at] + text[at + length:]
        else:
            text = text[:at] + text[at:at + length] * 2 + text[at + length:]
    return text


FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@FUZZ
@given(text=st.text())
def test_arbitrary_text(tmp_path, text):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    assert_only_spec_error(path)


@FUZZ
@given(data=st.binary(max_size=400))
def test_arbitrary_bytes(tmp_path, data):
    path = tmp_path / "fuzz.yaml"
    path.write_bytes(data)
    assert_only_spec_error(path)


@FUZZ
@given(index=st.integers(0, len(SHIPPED_TEXT) - 1), mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_mutated_shipped_specs(tmp_path, index, mutations):
    path = tmp_path / "fuzz.yaml"
    path.write_text(mutate(SHIPPED_TEXT[index], mutations), encoding="utf-8", errors="surrogatepass")
    assert_only_spec_error(path)


# what ruamel.yaml's int, float, bool and sexagesimal resolvers look at: a value made of these can
# resolve to a number its constructor then fails on (`+_`)
NUMBER_LIKE = st.text(alphabet="+-_.:0123456789eEoxXbBinfaINFA~", min_size=1, max_size=10)


@FUZZ
@given(value=NUMBER_LIKE, key=st.sampled_from(["kwargs: {lr: %s}", "steps: %s", "cases:\n  - name: %s", "%s: 1"]))
def test_number_like_scalars(tmp_path, value, key):
    path = tmp_path / "fuzz.yaml"
    path.write_text("optimizer: torch.optim.SGD\n" + key % value + "\n")
    assert_only_spec_error(path)


ALIAS_BOMB = """
a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
optimizer: torch.optim.SGD
"""
HOSTILE = {
    "control_character": ("optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nname: a\x07b\n", "not readable as YAML"),
    "deep_nesting": ("optimizer: torch.optim.SGD\nkwargs: {lr: " + "[" * 5000 + "]" * 5000 + "}\n",
                     ":2: nested more than 32 levels deep"),
    "deep_block_nesting": ("optimizer: torch.optim.SGD\nkwargs:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)),
                           "nested more than 32 levels deep"),
    "alias_bomb": (ALIAS_BOMB, "more than 100,000 values"),
    "merge_bomb": ("a: &a {x: 1}\nb: &b {<<: *a, y: 1}\nc: {<<: *b, z: 1}\noptimizer: torch.optim.SGD\n", "unknown key"),
    "huge_steps": ("optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nsteps: 100000000000000000000\n", "[steps]"),
    "huge_digits": ("optimizer: torch.optim.SGD\nseed: " + "9" * 5000 + "\n", ":2: a number of 5,000 digits"),
    "million_list": ("optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nclosure: [" + "true, " * 1_000_000 + "]\n",
                     "larger than 1024 KiB"),
    "long_list": ("optimizer: torch.optim.SGD\nkwargs: {lr: 0.1, betas: [" + "1," * 200_000 + "]}\n",
                  ":2: more than 20,000 YAML nodes"),
    "case_explosion": ("optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\ngrid:\n"
                       + "".join(f"  f{i}: {{values: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}}\n" for i in range(5)),
                       "more than 10,000 cases"),
    "python_tag": ("optimizer: !!python/object/apply:os.system ['touch pwned']\n", "optimizer"),
    "not_utf8": (b"optimizer: torch.optim.SGD\nname: \xff\xfe\n", "not UTF-8"),
    "huge_file": ("optimizer: torch.optim.SGD\n" + "# padding\n" * 200_000, "larger than 1024 KiB"),
    "kind_not_a_string": ("kind: [1, 2]\n", "[kind] unknown kind"),
    # ruamel.yaml resolves `+_` as an int and then fails on it (IndexError), found by the bytes fuzz on
    # another Hypothesis version
    "sign_and_underscore": ("optimizer: torch.optim.SGD\nkwargs: {lr: +_}\n", ":2: [kwargs.lr] not readable as YAML: the value '+_'"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_file_is_one_clear_spec_error(tmp_path, name):
    text, expected = HOSTILE[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    error = assert_only_spec_error(path)
    assert error is not None, f"{name} was accepted"
    assert expected in str(error), str(error)
    assert len(str(error)) < 500, str(error)
    assert not Path("pwned").exists()


def test_a_hostile_file_errors_alone_and_the_session_runs(pytester):
    specs = pytester.path / "specs"
    specs.mkdir()
    for name in ("control_character", "deep_nesting", "alias_bomb", "not_utf8"):
        text, _ = HOSTILE[name]
        (specs / f"{name}.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    (specs / "good.yaml").write_text("optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\nchecks: [parity]\n")
    result = pytester.runpytest_inprocess("--optim-spec", "specs", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["specs/alias_bomb.yaml::spec-error", "specs/good.yaml::sgd-default-cpu::parity",
                                 "*5 tests collected*"])
    assert "Interrupted" not in result.stdout.str()


def test_check_command_reports_every_file(tmp_path, capsys):
    from pytest_optimtest.__main__ import main

    for name in ("control_character", "deep_nesting", "huge_digits"):
        (tmp_path / f"{name}.yaml").write_text(HOSTILE[name][0])
    (tmp_path / "good.yaml").write_text("optimizer: torch.optim.SGD\nkwargs: {lr: 0.1}\n")
    assert main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["error", "error", "ok", "error"], out

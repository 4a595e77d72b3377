"""The hostile-input corpus of workloads, launch settings, params and CLI options (issues 16, 17).

Every case goes through the command line (click's CliRunner) and must end in a usage
error (exit 2) whose message names what was wrong (the file, the request or generator
field, the field; "did you mean" where a name was expected), before anything runs,
with no Python exception text. The tables are the documented errors of
docs/workloads.md; `test_corpus_size` counts them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from xlgen.cli import main

REPO = Path(__file__).resolve().parent.parent
PIPE = REPO / "tests" / "cli_inputs" / "inputs.xl"  # every kind of field and param
BUNDLED = REPO / "stages" / "xl_spec.xl"
BIG = 10 ** 400  # an integer beyond binary64
I32_MIN, I32_MAX, U32_MAX = -(1 << 31), (1 << 31) - 1, (1 << 32) - 1

# The marks of a Python exception reaching the user.
EXCEPTION_TEXT = ("Traceback", "internal compiler error", "Error: Exception", "object has no attribute",
                  "unexpected keyword", "invalid literal for int", "NoneType")


@pytest.fixture(autouse=True)
def empty_working_directory(tmp_path_factory, monkeypatch):
    """Each case runs in an empty directory, which a refused command must leave empty
    (a relative output path such as `--kv-plot kv.png` would land there)."""
    cwd = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(cwd)
    yield
    assert sorted(p.name for p in cwd.iterdir()) == [], "a refused command wrote files"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def assert_usage_error(result, *fragments):
    out = result.output
    assert result.exit_code == 2, out
    assert isinstance(result.exception, SystemExit), repr(result.exception)  # click's usage error, nothing else
    for fragment in fragments:
        assert fragment in out, f"{fragment!r} not in:\n{out}"
    for text in EXCEPTION_TEXT:
        assert text not in out, out
    assert " req " not in out and "records:" not in out  # nothing ran


def run_workload(tmp_path, content, *extra):
    """`xlgen sim PIPE -w FILE` with FILE holding `content`: raw text or bytes, or anything
    else as JSON (NaN and Infinity written as Python's json module writes them)."""
    path = tmp_path / "w.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content))
    before = path.read_bytes()
    result = invoke("sim", PIPE, "-w", path, *extra)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["w.json"]
    return path, result


# ---- request field values: (field, value, what the message says) --------------------------

FIELD_CASES = [
    # i32
    ("steps", 5.5, "5.5 is a number; i32 takes an integer"),
    ("steps", -5.9, "-5.9 is a number; i32 takes an integer"),
    ("steps", 5.0, "write 5"),
    ("steps", True, "true is a bool; i32 takes an integer"),
    ("steps", False, "false is a bool; i32 takes an integer"),
    ("steps", "3", '"3" is a string; i32 takes an integer'),
    ("steps", "FAST", '"FAST" is a string; i32 takes an integer'),
    ("steps", None, "null; i32 takes an integer"),
    ("steps", [1], "[1] is a list; i32 takes an integer"),
    ("steps", {"a": 1}, "is an object; i32 takes an integer"),
    ("steps", I32_MAX + 1, f"{I32_MAX + 1} does not fit in i32 ({I32_MIN}..{I32_MAX})"),
    ("steps", I32_MIN - 1, f"{I32_MIN - 1} does not fit in i32"),
    ("steps", 1 << 64, "does not fit in i32"),
    ("steps", float("nan"), "nan is a number; i32 takes an integer"),
    ("steps", float("inf"), "inf is a number; i32 takes an integer"),
    ("bound", 1e10, "is a number; i32 takes an integer"),
    ("divisor", 1e-3, "0.001 is a number; i32 takes an integer"),
    # u32
    ("word", -1, f"-1 does not fit in u32 (0..{U32_MAX})"),
    ("word", U32_MAX + 1, f"{U32_MAX + 1} does not fit in u32"),
    ("word", 1.5, "1.5 is a number; u32 takes an integer"),
    ("word", False, "false is a bool; u32 takes an integer"),
    ("word", "0x10", '"0x10" is a string; u32 takes an integer'),
    # f32
    ("rate", 1e40, "1e+40 overflows f32 (largest finite 3.4028235e+38)"),
    ("rate", -1e39, "-1e+39 overflows f32"),
    ("rate", 3.5e38, "overflows f32"),
    ("rate", BIG, "overflows f32"),
    ("rate", "0.5", '"0.5" is a string; f32 takes a number'),
    ("rate", "inf", '"inf" is a string; f32 takes a number'),
    ("rate", True, "true is a bool; f32 takes a number"),
    ("rate", None, "null; f32 takes a number"),
    ("rate", [0.5], "is a list; f32 takes a number"),
    # bool
    ("enabled", 1, "1 is an integer; a bool takes true or false"),
    ("enabled", 0, "0 is an integer; a bool takes true or false"),
    ("enabled", "true", '"true" is a string; a bool takes true or false'),
    ("enabled", None, "null; a bool takes true or false"),
    ("enabled", 1.0, "1.0 is a number; a bool takes true or false"),
    ("forever", [], "[] is a list; a bool takes true or false"),
    # enum
    ("mode", 0, "0 is an integer; enum Mode takes a member name (FAST, SLOW, OFF)"),
    ("mode", 1.0, "1.0 is a number; enum Mode takes a member name"),
    ("mode", "READ", "'READ' is not a member of enum Mode (FAST, SLOW, OFF)"),
    ("mode", "FAS", "'FAS' is not a member of enum Mode (FAST, SLOW, OFF); did you mean 'FAST'?"),
    ("mode", "SLOWW", "did you mean 'SLOW'?"),
    ("mode", "", "'' is not a member of enum Mode"),
    ("mode", True, "true is a bool; enum Mode takes a member name"),
    ("mode", None, "null; enum Mode takes a member name"),
    ("mode", ["FAST"], "is a list; enum Mode takes a member name"),
    # flag set
    ("caps", 8, "8 sets bits that flag set Caps does not have (READ, WRITE, EXEC"),
    ("caps", -1, "-1 sets bits that flag set Caps does not have"),
    ("caps", "FAST", "'FAST' is not a member of flag set Caps (READ, WRITE, EXEC)"),
    ("caps", "WRIT", "did you mean 'WRITE'?"),
    ("caps", 1.0, "1.0 is a number; flag set Caps takes a member name (READ, WRITE, EXEC) or the members' bits"),
    ("caps", True, "true is a bool; flag set Caps takes a member name"),
    # arrays
    ("history", 5, "5 is an integer; the field is i32[4]: give a list of at most 4 values"),
    ("history", [1, 2, 3, 4, 5], "a list of 5 values; the field is i32[4]: at most 4"),
    ("history", [1, 2.5], "element 1: 2.5 is a number; i32 takes an integer"),
    ("history", ["a"], 'element 0: "a" is a string'),
    ("history", {"0": 1}, "is an object; the field is i32[4]"),
    ("history", [I32_MAX + 1], "element 0: 2147483648 does not fit in i32"),
    ("modes", ["FAST", "NOPE"], "element 1: 'NOPE' is not a member of enum Mode"),
    ("modes", [0], "element 0: 0 is an integer; enum Mode takes a member name"),
    ("modes", "FAST", '"FAST" is a string; the field is enum Mode[2]'),
    # names
    ("stepz", 1, "not a request field of pipeline inputs; did you mean 'steps'?"),
    ("Steps", 1, "not a request field of pipeline inputs; did you mean 'steps'?"),
    ("xyz", 1, "requests[0].xyz: not a request field of pipeline inputs"),
    ("", 1, "requests[0].: not a request field"),
]


@pytest.mark.parametrize("field, value, message", FIELD_CASES,
                         ids=[f"{f or 'empty'}={v!r}"[:40] for f, v, _ in FIELD_CASES])
def test_request_field_values(tmp_path, field, value, message):
    path, result = run_workload(tmp_path, {"requests": [{}, {"steps": 1}, {field: value}]})
    assert_usage_error(result, str(path), f"requests[2].{field}" if field else "requests[2].", message.replace(
        "requests[0]", "requests[2]"))


REQUESTS_SHAPE_CASES = [
    ({"requests": {}}, "requests: {} is an object; give a list of request objects"),
    ({"requests": "all"}, 'requests: "all" is a string; give a list'),
    ({"requests": 3}, "requests: 3 is an integer; give a list"),
    ({"requests": None}, "requests: null; give a list"),
    ({"requests": [1]}, "requests[0]: 1 is an integer; a request is an object of field values"),
    ({"requests": [[]]}, "requests[0]: [] is a list; a request is an object"),
    ({"requests": [{}, "x"]}, 'requests[1]: "x" is a string; a request is an object'),
    ({"requests": [None]}, "requests[0]: null; a request is an object"),
]


# ---- params: (name, value, message) -----------------------------------------------------

PARAM_CASES = [
    ("limt", 1, "params.limt: not a launch parameter of pipeline inputs; did you mean 'limit'?"),
    ("nope", 1, "(its parameters: limit, mask, gain, verbose, start_mode)"),
    ("limit", 1.5, "params.limit: 1.5 is a number; i32 takes an integer"),
    ("limit", 3.0, "write 3"),
    ("limit", "3", '"3" is a string; i32 takes an integer'),
    ("limit", "FAST", '"FAST" is a string; i32 takes an integer'),  # no enum name for an integer
    ("limit", "SLOW", '"SLOW" is a string; i32 takes an integer'),
    ("limit", True, "true is a bool; i32 takes an integer"),
    ("limit", None, "null; i32 takes an integer"),
    ("limit", I32_MAX + 1, "does not fit in i32"),
    ("limit", [3], "is a list; i32 takes an integer"),
    ("mask", -1, "-1 does not fit in u32"),
    ("mask", U32_MAX + 1, "does not fit in u32"),
    ("mask", "READ", '"READ" is a string; u32 takes an integer'),
    ("gain", 1e40, "params.gain: 1e+40 overflows f32"),
    ("gain", -BIG, "overflows f32"),
    ("gain", "0.5", '"0.5" is a string; f32 takes a number'),
    ("gain", True, "true is a bool; f32 takes a number"),
    ("verbose", 1, "1 is an integer; a bool takes true or false"),
    ("verbose", "true", '"true" is a string; a bool takes true or false'),
    ("start_mode", 1, "params.start_mode: 1 is an integer; enum Mode takes a member name"),
    ("start_mode", "FAS", "did you mean 'FAST'?"),
    ("start_mode", "READ", "'READ' is not a member of enum Mode"),
]

PARAMS_SHAPE_CASES = [
    ({"params": []}, "params: [] is a list; give an object {...}"),
    ({"params": "limit=3"}, 'params: "limit=3" is a string; give an object'),
    ({"params": 3}, "params: 3 is an integer; give an object"),
]


@pytest.mark.parametrize("name, value, message", PARAM_CASES,
                         ids=[f"{n}={v!r}"[:40] for n, v, _ in PARAM_CASES])
def test_param_values(tmp_path, name, value, message):
    path, result = run_workload(tmp_path, {"params": {name: value}})
    assert_usage_error(result, str(path), f"params.{name}", message)


# ---- launch settings: one range for every backend ---------------------------------------

LAUNCH_CASES = [
    ({"max_active": 0}, "launch.max_active: 0 is out of range; the batch capacity is an integer in 1..2147483647"),
    ({"max_active": -1}, "launch.max_active: -1 is out of range"),
    ({"max_active": I32_MAX + 1}, "launch.max_active: 2147483648 is out of range"),
    ({"max_active": (1 << 32) + 1}, "launch.max_active: 4294967297 is out of range"),  # was 1 in the CPU build
    ({"max_active": 1 << 64}, "is out of range"),
    ({"max_active": 1.5}, "launch.max_active: 1.5 is a number; the batch capacity is an integer"),
    ({"max_active": 4.0}, "write 4"),
    ({"max_active": "4"}, 'launch.max_active: "4" is a string'),
    ({"max_active": True}, "launch.max_active: true is a bool"),
    ({"max_active": None}, "launch.max_active: null"),
    ({"max_active": float("nan")}, "launch.max_active: nan is a number"),
    ({"max_active": float("inf")}, "launch.max_active: inf is a number"),
    ({"max_active": [4]}, "launch.max_active: [4] is a list"),
    ({"max_rounds": 0}, "launch.max_rounds: 0 is out of range; the watchdog's round limit is an integer in 1..2147483647"),
    ({"max_rounds": -5}, "launch.max_rounds: -5 is out of range"),
    ({"max_rounds": 1 << 40}, "launch.max_rounds: 1099511627776 is out of range"),
    ({"max_rounds": 1e3}, "launch.max_rounds: 1000.0 is a number"),
    ({"max_rounds": "forever"}, 'launch.max_rounds: "forever" is a string'),
    ({"max_round": 5}, "launch: unknown launch setting 'max_round'; did you mean 'max_rounds'?"),
    ({"maxActive": 5}, "unknown launch setting 'maxActive'"),
    ({"batch": 5}, "(expected max_active, max_rounds)"),
]

LAUNCH_SHAPE_CASES = [
    ({"launch": []}, "launch: [] is a list; give an object {...}"),
    ({"launch": [4, 100]}, "launch: [4, 100] is a list; give an object"),
    ({"launch": 4}, "launch: 4 is an integer; give an object"),
    ({"launch": "fast"}, 'launch: "fast" is a string'),
]


@pytest.mark.parametrize("launch, message", LAUNCH_CASES, ids=[json.dumps(c)[:40] for c, _ in LAUNCH_CASES])
def test_launch_settings(tmp_path, launch, message):
    path, result = run_workload(tmp_path, {"launch": launch})
    assert_usage_error(result, str(path), message)


# ---- seeds ---------------------------------------------------------------------------------

SEED_CASES = [
    ("7", 'seed: "7" is a string; the generator\'s seed is an integer in 0..18446744073709551615'),
    (-1, "seed: -1 is out of range; the generator's seed is an integer in 0..18446744073709551615"),
    (1 << 64, "seed: 18446744073709551616 is out of range"),
    (BIG, "seed: 1000000000000000000000000000000000000... is out of range"),
    (1.5, "seed: 1.5 is a number"),
    (7.0, "write 7"),
    (float("nan"), "seed: nan is a number"),
    (float("inf"), "seed: inf is a number"),
    (float("-inf"), "seed: -inf is a number"),
    (True, "seed: true is a bool"),
    (None, "seed: null"),
    ([1], "seed: [1] is a list"),
]


@pytest.mark.parametrize("seed, message", SEED_CASES, ids=[repr(s) for s, _ in SEED_CASES])
def test_seeds(tmp_path, seed, message):
    path, result = run_workload(tmp_path, {"seed": seed, "generate": {"count": 2, "fields": {}}})
    assert_usage_error(result, str(path), message)


# ---- generator specs -------------------------------------------------------------------------

def gen(fields=None, count=3, **extra):
    return {"generate": {"count": count, "fields": fields or {}, **extra}}


GENERATE_CASES = [
    # the generate object and its count
    ({"generate": []}, 'generate: [] is a list; give an object {"count": N, "fields": {...}}'),
    ({"generate": 5}, "generate: 5 is an integer; give an object"),
    ({"generate": [{"count": 1}]}, "generate: [{\"count\": 1}] is a list"),
    (gen(count="10"), 'generate.count: "10" is a string; the number of requests is an integer in 0..2147483647'),
    (gen(count=-1), "generate.count: -1 is out of range"),
    (gen(count=1.5), "generate.count: 1.5 is a number"),
    (gen(count=10.0), "write 10"),
    (gen(count=True), "generate.count: true is a bool"),
    (gen(count=None), "generate.count: null"),
    (gen(count=10 ** 12), "generate.count: 1000000000000 is out of range; the number of requests is an integer "
                          "in 0..2147483647"),
    (gen(count=2_000_000_000), "generate.count: 2000000000 requests need about"),
    ({"generate": {"cnt": 3}}, "generate: unknown key 'cnt'; did you mean 'count'?"),
    ({"generate": {"count": 3, "field": {}}}, "did you mean 'fields'?"),
    ({"generate": {"count": 3, "fields": []}}, "generate.fields: [] is a list; give an object {...}"),
    ({"generate": {"count": 3, "fields": [["steps", 1]]}}, "generate.fields: [[\"steps\", 1]] is a list"),
    ({"generate": {"count": 3, "fields": "steps"}}, 'generate.fields: "steps" is a string'),
    # field names
    (gen({"stepz": 1}), "generate.fields.stepz: not a request field of pipeline inputs; did you mean 'steps'?"),
    (gen({"nothing_like_it": 1}), "generate.fields.nothing_like_it: not a request field"),
    # the distribution object
    (gen({"steps": {}}), "generate.fields.steps: an object with 0 keys; give exactly one of constant, uniform, "
                         "choice, cycle, counter"),
    (gen({"steps": {"uniform": [1, 2], "counter": 1}}), "an object with 2 keys"),
    (gen({"steps": {"uniformm": [1, 2]}}), "unknown distribution 'uniformm'; did you mean 'uniform'?"),
    (gen({"steps": {"range": [1, 2]}}), "unknown distribution 'range'"),
    # uniform
    (gen({"steps": {"uniform": [5, 1]}}), "generate.fields.steps: uniform: [5, 1] is reversed; write [1, 5]"),
    (gen({"rate": {"uniform": [0.9, 0.1]}}), "uniform: [0.9, 0.1] is reversed"),
    (gen({"steps": {"uniform": "1..5"}}), 'uniform: "1..5"; give [LO, HI], two numbers'),
    (gen({"steps": {"uniform": 5}}), "uniform: 5; give [LO, HI]"),
    (gen({"steps": {"uniform": [1]}}), "uniform: [1]; give [LO, HI]"),
    (gen({"steps": {"uniform": [1, 2, 3]}}), "uniform: [1, 2, 3]; give [LO, HI]"),
    (gen({"steps": {"uniform": {"lo": 1, "hi": 2}}}), "give [LO, HI], two numbers"),
    (gen({"steps": {"uniform": [True, 2]}}), "give [LO, HI], two numbers"),
    (gen({"steps": {"uniform": ["1", "2"]}}), "give [LO, HI], two numbers"),
    (gen({"steps": {"uniform": None}}), "uniform: null; give [LO, HI]"),
    (gen({"rate": {"uniform": [0.0, float("nan")]}}), "both ends must be finite"),
    (gen({"rate": {"uniform": [0.0, float("inf")]}}), "both ends must be finite"),
    (gen({"rate": {"uniform": [0, 1]}}), "uniform [0, 1] draws integers, but the field is f32: write [0.0, 1.0]"),
    (gen({"steps": {"uniform": [0.5, 4.5]}}), "uniform [0.5, 4.5] draws floats, but the field is i32: give two "
                                              "integers"),
    (gen({"steps": {"uniform": [0, I32_MAX + 1]}}), "2147483648 does not fit in i32"),
    (gen({"steps": {"uniform": [0, BIG]}}), "1000000000000000000000000000000000000... does not fit in i32"),
    (gen({"rate": {"uniform": [0.0, BIG]}}), "overflows f32"),
    (gen({"steps": {"counter": BIG}}), "does not fit in i32"),
    (gen({"word": {"uniform": [-1, 5]}}), "-1 does not fit in u32"),
    (gen({"rate": {"uniform": [0.0, 1e39]}}), "1e+39 overflows f32"),
    (gen({"mode": {"uniform": [0, 2]}}), "uniform draws numbers, but the field is enum Mode: use choice or cycle "
                                         "with member names"),
    (gen({"caps": {"uniform": [0, 7]}}), "the field is flag set Caps: use choice or cycle"),
    (gen({"enabled": {"uniform": [0, 1]}}), "uniform draws numbers, but the field is bool: use constant, choice"),
    (gen({"history": {"uniform": [0, 1]}}), "uniform draws numbers, but the field is i32[4]"),
    # choice and cycle
    (gen({"steps": {"choice": []}}), "generate.fields.steps: choice: [] is an empty list; give a non-empty list"),
    (gen({"steps": {"cycle": []}}), "cycle: [] is an empty list; give a non-empty list"),
    (gen({"steps": {"choice": "abc"}}), 'choice: "abc" is a string; give a non-empty list'),
    (gen({"steps": {"cycle": 5}}), "cycle: 5 is an integer; give a non-empty list"),
    (gen({"steps": {"choice": {"a": 1}}}), "choice: {\"a\": 1} is an object"),
    (gen({"steps": {"cycle": None}}), "cycle: null; give a non-empty list"),
    (gen({"steps": {"choice": [1, "x"]}}), 'choice[1]: "x" is a string; i32 takes an integer'),
    (gen({"steps": {"cycle": [1, 2.5]}}), "cycle[1]: 2.5 is a number; i32 takes an integer"),
    (gen({"mode": {"cycle": ["FAST", "NOPE"]}}), "cycle[1]: 'NOPE' is not a member of enum Mode"),
    (gen({"mode": {"choice": ["FAST", 2]}}), "choice[1]: 2 is an integer; enum Mode takes a member name"),
    (gen({"mode": {"cycle": ["READ"]}}), "cycle[0]: 'READ' is not a member of enum Mode"),
    (gen({"rate": {"choice": [0.5, 1e40]}}), "choice[1]: 1e+40 overflows f32"),
    (gen({"enabled": {"cycle": [True, 1]}}), "cycle[1]: 1 is an integer; a bool takes true or false"),
    (gen({"history": {"cycle": [[1], [1, 2, 3, 4, 5]]}}), "cycle[1]: a list of 5 values; the field is i32[4]"),
    # counter
    (gen({"steps": {"counter": "10"}}), 'counter: "10" is a string; give the integer to start from'),
    (gen({"steps": {"counter": 1.5}}), "counter: 1.5 is a number; give the integer to start from"),
    (gen({"steps": {"counter": True}}), "counter: true is a bool"),
    (gen({"steps": {"counter": None}}), "counter: null"),
    (gen({"steps": {"counter": [1]}}), "counter: [1] is a list"),
    (gen({"steps": {"counter": I32_MAX}}, count=2), "counter 2147483647..2147483648 does not fit in i32"),
    (gen({"word": {"counter": -1}}), "counter -1..1 does not fit in u32"),
    (gen({"rate": {"counter": 1}}), "counter counts integers, but the field is f32"),
    (gen({"mode": {"counter": 0}}), "counter draws numbers, but the field is enum Mode: use choice or cycle"),
    (gen({"enabled": {"counter": 0}}), "counter draws numbers, but the field is bool"),
    # constant and plain values
    (gen({"steps": {"constant": 5.5}}), "generate.fields.steps: 5.5 is a number; i32 takes an integer"),
    (gen({"steps": 5.5}), "generate.fields.steps: 5.5 is a number; i32 takes an integer"),
    (gen({"steps": [1, 2]}), "generate.fields.steps: [1, 2] is a list; i32 takes an integer"),
    (gen({"mode": "DONE"}), "'DONE' is not a member of enum Mode"),
    (gen({"mode": {"constant": 1}}), "1 is an integer; enum Mode takes a member name"),
    (gen({"rate": {"constant": "0.5"}}), '"0.5" is a string; f32 takes a number'),
    (gen({"enabled": {"constant": "yes"}}), '"yes" is a string; a bool takes true or false'),
]


@pytest.mark.parametrize("workload, message", GENERATE_CASES, ids=[json.dumps(c)[:60] for c, _ in GENERATE_CASES])
def test_generator_specs(tmp_path, workload, message):
    path, result = run_workload(tmp_path, workload)
    assert_usage_error(result, str(path), message)


# ---- the workload as a whole ---------------------------------------------------------------

TOP_CASES = [
    ([], "a workload is a JSON object {...}, not a list"),
    ([{"steps": 1}], "a workload is a JSON object {...}, not a list"),
    ("requests", "a workload is a JSON object {...}, not a string"),
    (5, "not an integer"),
    (None, "not null"),
    ({"nope": 1}, "unknown key 'nope' (expected name, description, seed, launch, params, requests, generate)"),
    ({"sed": 1}, "unknown key 'sed'; did you mean 'seed'?"),
    ({"request": []}, "unknown key 'request'; did you mean 'requests'?"),
    ({"generator": {}}, "did you mean 'generate'?"),
    ({"parms": {}}, "did you mean 'params'?"),
    ({"name": 5}, "name: 5 is an integer; give a string"),
    ({"description": ["a"]}, 'description: ["a"] is a list; give a string'),
] + REQUESTS_SHAPE_CASES + PARAMS_SHAPE_CASES + LAUNCH_SHAPE_CASES


@pytest.mark.parametrize("workload, message", TOP_CASES, ids=[json.dumps(c)[:40] for c, _ in TOP_CASES])
def test_workload_shapes(tmp_path, workload, message):
    path, result = run_workload(tmp_path, json.dumps(workload))
    assert_usage_error(result, str(path), message)


# ---- the file itself ----------------------------------------------------------------------------

FILE_CASES = [
    (b'{"name": "caf\xe9"}', ":1: not UTF-8 text (byte 0xe9 at offset 13); save the workload as UTF-8"),
    (b"\xff\xfe{\x00}\x00", "not UTF-8 text (byte 0xff at offset 0)"),
    (b'{\n"seed": 1,\n"name": "\x80"}', ":3: not UTF-8 text (byte 0x80"),
    ("", ":1:1: invalid JSON: Expecting value"),
    ("   \n", "invalid JSON: Expecting value"),
    ('{"seed": 1,}', ":1:12: invalid JSON: Expecting property name enclosed in double quotes"),
    ("{'seed': 1}", "invalid JSON"),
    ('{"seed": 1} {"seed": 2}', "invalid JSON: Extra data"),
    ('{"seed": 1, "seed": 2}', "the key 'seed' appears twice in one object"),
    ('{"requests": [{"steps": 1, "steps": 2}]}', "the key 'steps' appears twice"),
    ("\ufeff{}", "invalid JSON: Unexpected UTF-8 BOM"),
    ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
    ('{"seed": ' + "9" * 5000 + "}", "invalid JSON: Exceeds the limit"),
    ('{"requests": [{"steps": 1e400}]}', "the number 1e400 overflows; write Infinity for an infinite value"),
    ('{"requests": [{"rate": -1e400}]}', "the number -1e400 overflows"),  # not silently -inf
    ('{"seed": \u0663}', "invalid JSON"),  # ٣: JSON numbers are ASCII digits
    ('{"requests": [{"steps": \u0663}]}', "invalid JSON"),
]


@pytest.mark.parametrize("content, message", FILE_CASES, ids=[repr(c)[:40] for c, _ in FILE_CASES])
def test_workload_files(tmp_path, content, message):
    path, result = run_workload(tmp_path, content)
    assert_usage_error(result, str(path), message)


# The bundled pipeline, through every command that takes a workload (the silent cases of issue 16).
BUNDLED_CASES = [
    (["sim"], {"requests": [{"profile": "DONE"}]}, "requests[0].profile: 'DONE' is not a member of enum Profile "
                                                   "(CONSTANT, STRUCTURED, BURSTY)"),
    (["sim"], {"requests": [{"out_len": 5}]}, "requests[0].out_len: not a request field of pipeline xl_spec"),
    (["sim"], {"requests": [{"prompt_len": 5.5}]}, "requests[0].prompt_len: 5.5 is a number; i32 takes an integer"),
    (["sim"], {"requests": [{"max_new_tokens": -5.9}]}, "-5.9 is a number; i32 takes an integer"),
    (["sim"], {"requests": [{"priority": True}]}, "requests[0].priority: true is a bool; i32 takes an integer"),
    (["sim"], {"requests": [{"req_flags": 8}]}, "8 sets bits that flag set ReqFlag does not have"),
    (["sim"], {"requests": [{"req_flags": "BURSTY"}]}, "'BURSTY' is not a member of flag set ReqFlag"),
    (["sim"], {"requests": [{"base_acceptance": 1e40}]}, "1e+40 overflows f32"),
    (["sim"], {"params": {"eviction_policy": "LRU"}}, 'params.eviction_policy: "LRU" is a string; i32 takes an integer'),
    (["sim"], {"params": {"kv_cache": 1}}, "params.kv_cache: 1 is an integer; a bool takes true or false"),
    (["sim"], {"params": {"asbs_alpha": 1e39}}, "params.asbs_alpha: 1e+39 overflows f32"),
    (["sim"], {"launch": {"max_round": 10}}, "did you mean 'max_rounds'?"),
    (["diff", "--backend", "cpu"], {"launch": {"max_active": (1 << 32) + 1}}, "launch.max_active: 4294967297 is out "
                                                                              "of range"),
    (["diff", "--backend", "cpu"], {"generate": {"count": 2, "fields": {"profile": {"cycle": []}}}},
     "generate.fields.profile: cycle: [] is an empty list"),
    (["run"], {"generate": {"count": 2, "fields": {"profile": {"uniform": [0, 2]}}}},
     "uniform draws numbers, but the field is enum Profile"),
    (["bench"], {"seed": "7"}, 'seed: "7" is a string'),
]


@pytest.mark.parametrize("command, workload, message", BUNDLED_CASES,
                         ids=[f"{c[0]} {json.dumps(w)[:40]}" for c, w, _ in BUNDLED_CASES])
def test_bundled_pipeline_workloads(tmp_path, command, workload, message):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(workload))
    assert_usage_error(invoke(command[0], BUNDLED, "-w", path, *command[1:]), str(path), message)


def test_a_directory_as_the_workload(tmp_path):
    assert_usage_error(invoke("sim", PIPE, "-w", tmp_path), f"{tmp_path}: is a directory; give a workload JSON file")


def test_a_missing_workload():
    assert_usage_error(invoke("sim", PIPE, "-w", "no_such_workload"),
                       "no such workload file: no_such_workload (bundled workloads: small, mixed, kv_pressure)")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_as_the_workload_does_not_block(tmp_path):
    fifo = tmp_path / "w.json"
    os.mkfifo(fifo)
    assert_usage_error(invoke("sim", PIPE, "-w", fifo), "not a regular file; give a workload JSON file")


def test_a_device_as_the_workload():
    assert_usage_error(invoke("sim", PIPE, "-w", "/dev/zero"), "/dev/zero: not a regular file")


def test_an_unreadable_workload(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    path = tmp_path / "w.json"
    path.write_text("{}")
    path.chmod(0)
    assert_usage_error(invoke("sim", PIPE, "-w", path), "cannot read: Permission denied")


def test_all_errors_of_a_workload_are_reported_together(tmp_path):
    path, result = run_workload(tmp_path, {"seed": -1, "launch": {"max_active": 0},
                                           "requests": [{"steps": 1.5}, {"mode": "FAS"}],
                                           "generate": {"count": 2, "fields": {"word": {"uniform": [5, 1]}}}})
    assert_usage_error(result, "seed: -1 is out of range", "launch.max_active: 0 is out of range",
                       "requests[0].steps: 1.5 is a number", "requests[1].mode: 'FAS' is not a member",
                       "generate.fields.word: uniform: [5, 1] is reversed")
    assert result.output.count(str(path)) == 5  # each line names the file


# ---- options of the command line ------------------------------------------------------------------

OPTION_CASES = [
    # --count
    (["--count", "-1"], "Invalid value for '--count': -1 is out of range 0..2147483647"),
    (["--count", "abc"], "Invalid value for '--count': 'abc' is not an integer"),
    (["--count", "\u0663"], "'\u0663' is not an integer (ASCII digits"),  # ٣
    (["--count", "1.5"], "'1.5' is not an integer"),
    (["--count", "1e3"], "'1e3' is not an integer"),
    (["--count", "10_000"], "'10_000' is not an integer"),
    (["--count", ""], "'' is not an integer"),
    (["--count", "0x10"], "'0x10' is not an integer"),
    (["--count", "3000000000"], "3000000000 is out of range 0..2147483647"),
    (["--count", str(10 ** 12)], "is out of range 0..2147483647"),
    (["--count", "2000000000"], "--count 2000000000: 2000000000 requests need about"),
    (["--count", "2147483647"], "requests need about"),
    # --max-active
    (["--max-active", "0"], "Invalid value for '--max-active': 0 is out of range 1..2147483647"),
    (["--max-active", "-4"], "-4 is out of range 1..2147483647"),
    (["--max-active", str(1 << 31)], "2147483648 is out of range"),
    (["--max-active", str((1 << 32) + 1)], "4294967297 is out of range"),
    (["--max-active", "\u0663"], "is not an integer (ASCII digits"),
    (["--max-active", "4.0"], "'4.0' is not an integer"),
    (["--max-active", "four"], "'four' is not an integer"),
    # --param
    (["--param", "limit"], "--param 'limit': expected NAME=VALUE"),
    (["--param", "=3"], "expected NAME=VALUE"),
    (["--param", "limit="], "expected NAME=VALUE"),
    (["--param", "limt=3"], "--param limt: not a launch parameter of pipeline inputs; did you mean 'limit'?"),
    (["--param", "nope=3"], "(its parameters: limit, mask, gain, verbose, start_mode)"),
    (["--param", "limit=1.5"], "--param limit=1.5: limit is i32; give an integer (ASCII digits, or 0x hex)"),
    (["--param", "limit=\u0663"], "limit is i32; give an integer (ASCII digits"),
    (["--param", "limit=1_0"], "limit is i32; give an integer"),
    (["--param", "limit=FAST"], "--param limit=FAST: limit is i32; give an integer"),  # not an enum name
    (["--param", "limit=2147483648"], "--param limit=2147483648: 2147483648 does not fit in i32"),
    (["--param", "limit=0x80000000"], "2147483648 does not fit in i32"),
    (["--param", "limit=true"], "limit is i32; give an integer"),
    (["--param", "mask=-1"], "--param mask=-1: -1 does not fit in u32"),
    (["--param", "mask=4294967296"], "4294967296 does not fit in u32"),
    (["--param", "gain=1e40"], "--param gain=1e40: 1e+40 overflows f32"),
    (["--param", "gain=-1e39"], "overflows f32"),
    (["--param", "gain=abc"], "--param gain=abc: gain is f32; give a number (ASCII"),
    (["--param", "gain=\u0663.5"], "gain is f32; give a number (ASCII"),
    (["--param", "gain=1_0.5"], "gain is f32; give a number"),
    (["--param", "gain=0x10"], "gain is f32; give a number"),
    (["--param", "verbose=maybe"], "--param verbose=maybe: verbose is a bool; give true or false"),
    (["--param", "verbose=2"], "verbose is a bool; give true or false"),
    (["--param", "start_mode=GREN"], "--param start_mode=GREN: 'GREN' is not a member of enum Mode"),
    (["--param", "start_mode=FAS"], "did you mean 'FAST'?"),
    (["--param", "start_mode=1"], "--param start_mode=1: 1 is an integer; enum Mode takes a member name"),
    (["--param", "start_mode=READ"], "'READ' is not a member of enum Mode"),
    # --show
    (["--show", "nope"], "--show: 'nope' is not a request field of pipeline inputs"),
    (["--show", "stepz"], "did you mean 'steps'?"),
    (["--show", "steps,quotinet"], "'quotinet' is not a request field of pipeline inputs; did you mean 'quotient'?"),
    (["--show", "history"], "--show: 'history' is an array (i32[4]); --show prints scalar fields"),
    (["--show", "steps,,quotient"], "give comma-separated request field names"),
    (["--show", ","], "give comma-separated request field names"),
    (["--show", ""], "give comma-separated request field names"),
    # KV options on a pipeline without the KV cache (read from the program)
    (["--kv-report"], "--kv-report: pipeline inputs has no companion module, so no report 'kv'"),
    (["--kv-plot", "kv.png"], "--kv-plot: pipeline inputs has no companion module, so no plot 'kv'"),
    (["--report", "kv"], "--report kv: pipeline inputs has no companion module, so no report 'kv'"),
    (["--plot", "kv"], "--plot 'kv': expected NAME=PATH, e.g. --plot kv=kv.png"),
    (["--plot", "kv=x.png"], "--plot kv: pipeline inputs has no companion module, so no plot 'kv'"),
    # unknown options and arguments (click)
    (["--max_active", "4"], "Did you mean '--max-active'?"),
    (["--workload"], "Option '--workload' requires an argument"),
]


@pytest.mark.parametrize("args, message", OPTION_CASES, ids=[" ".join(a)[:40] for a, _ in OPTION_CASES])
def test_sim_options(args, message):
    assert_usage_error(invoke("sim", PIPE, *args), message)


OTHER_COMMAND_CASES = [
    (["diff", PIPE, "--backend", "nope"], "--backend: unknown nope (choose from cpu, gpu, gpu-fast)"),
    (["diff", PIPE, "--backend", "cpu,sim"], "--backend: unknown sim"),
    (["diff", PIPE, "--backend", ","], "--backend ',': give one or more of cpu, gpu, gpu-fast"),
    (["diff", PIPE, "--max-active", "0"], "0 is out of range 1..2147483647"),
    (["diff", PIPE, "--param", "gain=1e40"], "overflows f32"),
    (["diff", PIPE, "--count", "\u0663"], "is not an integer"),
    (["run", PIPE, "--max-active", str((1 << 32) + 1)], "4294967297 is out of range"),
    (["run", PIPE, "--timeout", "0"], "Invalid value for '--timeout': 0: give a positive number of seconds"),
    (["run", PIPE, "--timeout", "\u0663"], "is not a number (ASCII"),
    (["run", PIPE, "--timeout", "soon"], "'soon' is not a number"),
    (["run", PIPE, "--timeout", "-3"], "give a positive number of seconds"),
    (["run", PIPE, "--timeout", "nan"], "give a positive number of seconds"),
    (["run", PIPE, "--timeout", "inf"], "give a positive number of seconds"),
    (["run", PIPE, "--kv-report"], "--kv-report: pipeline inputs has no companion module, so no report 'kv'"),
    (["run", PIPE, "--mode", "fast", "--kv-plot", "x.png"],
     "--report and --plot (and --kv-report, --kv-plot) need --mode deterministic"),
    (["bench", PIPE, "--repeats", "0"], "Invalid value for '--repeats': 0 is out of range 1..10000"),
    (["bench", PIPE, "--repeats", "many"], "'many' is not an integer"),
    (["bench", PIPE, "--json", "/no/such/dir/b.json"], "--json /no/such/dir/b.json: no such directory /no/such/dir"),
    (["bench", PIPE, "--markdown", "/no/such/dir/b.md"], "--markdown /no/such/dir/b.md: no such directory"),
    (["bench", PIPE, "--json", "/"], "--json /: is a directory; give a file name"),
    (["bench", PIPE, "--max-active", "0"], "0 is out of range"),
    (["demo", "-w", "no_such_workload", "-o", "/nonexistent/demo"], "no such workload file: no_such_workload"),
    (["demo", "-w", "/", "-o", "/nonexistent/demo"], "/: is a directory"),
]


def test_demo_asked_for_a_gpu_without_one(tmp_path):
    from xlgen.runtime import gpu

    if gpu.available():
        pytest.skip("this machine has a GPU")
    assert_usage_error(invoke("demo", "--gpu", "-w", "small", "-o", tmp_path / "demo"),
                       "--gpu needs CuPy and an NVIDIA GPU")
    assert not (tmp_path / "demo").exists()


@pytest.mark.parametrize("args, message", OTHER_COMMAND_CASES, ids=[" ".join(map(str, a[:1] + a[2:]))[:40]
                                                                    for a, _ in OTHER_COMMAND_CASES])
def test_other_commands(args, message):
    assert_usage_error(invoke(*args), message)


def test_gpu_backends_without_a_gpu_are_refused_before_the_simulator_runs():
    from xlgen.runtime import gpu

    if gpu.available():
        pytest.skip("this machine has a GPU")
    for backends in ("gpu", "cpu,gpu-fast"):
        assert_usage_error(invoke("diff", PIPE, "--backend", backends), "the gpu backends need CuPy and an NVIDIA GPU")
    assert_usage_error(invoke("run", PIPE), "needs CuPy and an NVIDIA GPU")


def test_kv_plot_paths_are_checked_before_the_run(tmp_path):
    assert_usage_error(invoke("sim", BUNDLED, "-w", "kv_pressure", "--kv-plot", tmp_path / "no" / "kv.png"),
                       "no such directory")
    assert_usage_error(invoke("sim", BUNDLED, "-w", "kv_pressure", "--kv-plot", tmp_path), "is a directory")
    assert_usage_error(invoke("sim", BUNDLED, "-w", "small", "--param", "kv_cache=false",
                              "--kv-plot", tmp_path / "kv.png"),
                       "--kv-plot: the KV cache is off in this run")
    assert not (tmp_path / "kv.png").exists()


def test_corpus_size():
    """The totals the closing report quotes (issue 17 asks for >= 200 hostile cases in all)."""
    tables = {"request field values": FIELD_CASES, "params": PARAM_CASES, "launch": LAUNCH_CASES,
              "seeds": SEED_CASES, "generator specs": GENERATE_CASES, "workload shapes": TOP_CASES,
              "files": FILE_CASES, "sim options": OPTION_CASES, "bundled pipeline": BUNDLED_CASES,
              "other commands": OTHER_COMMAND_CASES}
    total = sum(len(t) for t in tables.values()) + 8  # + the single-case tests of this file
    assert total >= 300, {k: len(v) for k, v in tables.items()}

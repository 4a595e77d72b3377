"""Workloads: which requests a run starts with (JSON, see docs/workloads.md).

    {
      "name": "chat", "seed": 7,
      "launch": {"max_active": 32, "max_rounds": 20000},
      "params": {"budget": 64},
      "requests": [{"prompt": 12, "max_tokens": 40}],             # explicit, and/or
      "generate": {"count": 64, "fields": {
          "prompt": {"uniform": [16, 128]},                          # integers if both ends are
          "temperature": {"uniform": [0.3, 0.95]},
          "max_tokens": {"choice": [64, 128, 256]},
          "tier": {"cycle": ["INTERACTIVE", "BATCH"]},               # enum members by name
          "seed": {"counter": 1000}}}                                # 1000, 1001, ...
    }

Field names are the pipeline's request fields; anything not given keeps the
field's declared initial value. Generation is seeded, so a workload always
yields the same requests.

Everything is checked against the pipeline's types before anything is generated
or run, and nothing is coerced: an integer field takes only a JSON integer that
fits, a bool only true/false, an enum only one of its own member names. Every
error names the file, the request (or generator field) and the field, and all
of a workload's errors are reported together.
"""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...core.diagnostics import did_you_mean
from ...runtime.sim import LAUNCH_MAX, LaunchConfig

TOP_KEYS = ("name", "description", "seed", "launch", "params", "requests", "generate")
LAUNCH_KEYS = ("max_active", "max_rounds")
GENERATE_KEYS = ("count", "fields")
DISTRIBUTIONS = ("constant", "uniform", "choice", "cycle", "counter")
MAX_FILE_BYTES = 64 << 20  # a workload is a description, not data: refuse /dev/zero and the like
MAX_ERRORS = 20  # reported at once; the rest are counted
INT_RANGE = {"i32": (-(1 << 31), (1 << 31) - 1), "u32": (0, (1 << 32) - 1)}
F32_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
SEED_MAX = (1 << 64) - 1


class WorkloadError(ValueError):
    pass


@dataclass
class Workload:
    name: str
    inputs: list[dict]
    params: dict = field(default_factory=dict)
    config: LaunchConfig = field(default_factory=LaunchConfig)
    description: str = ""


# ---- types: what a request field or a launch parameter can hold -------------------------

@dataclass(frozen=True)
class FieldType:
    kind: str  # "i32" | "u32" | "f32" | "bool" | "enum" | "flags"
    enum: str = ""  # the enum's or flag set's name
    members: tuple[str, ...] = ()
    length: int | None = None  # arrays: the number of elements

    def __str__(self) -> str:
        base = f"{'flag set' if self.kind == 'flags' else 'enum'} {self.enum}" if self.enum else self.kind
        return f"{base}[{self.length}]" if self.length is not None else base

    @property
    def element(self) -> FieldType:
        return FieldType(self.kind, self.enum, self.members)


def _ir_field_type(t) -> FieldType:
    from ...core import ir

    length = None
    if isinstance(t, ir.ArrayType):
        t, length = t.elem, t.length
    if isinstance(t, ir.EnumType):
        return FieldType("flags" if t.is_flags else "enum", t.name, t.members, length)
    return FieldType(t.name, length=length)


def request_types(module) -> dict[str, FieldType]:
    """The pipeline's request fields by name, from its typed IR (xlgen.build sets XL_PROGRAM on
    the simulator module it loads). A generated module imported some other way has only its
    storage words: its enum fields then take numbers, not member names."""
    program = getattr(module, "XL_PROGRAM", None)
    if program is not None:
        return {f.name: _ir_field_type(f.type) for f in program.request_fields}
    kinds = {"i": "i32", "u": "u32", "f": "f32"}
    return {name: FieldType(kinds[word], length=count if is_array else None)
            for name, _attr, word, count, is_array in module.REQUEST_LAYOUT}


def param_types(module) -> dict[str, FieldType]:
    """The pipeline's launch parameters by name (a parameter may be of an enum type)."""
    program = getattr(module, "XL_PROGRAM", None)
    if program is not None:
        return {p.name: _ir_field_type(p.type) for p in program.params}
    return {name: FieldType(t) if t in ("i32", "u32", "f32", "bool") else _module_enum(module, t)
            for name, t in module.Params.TYPES.items()}


def _module_enum(module, name: str) -> FieldType:
    """An enum or flag set as a generated module declares it: a class of members in declaration
    order, valued 0, 1, 2, ... (an enum) or 1, 2, 4, ... (a flag set)."""
    cls = getattr(module, name)
    members = tuple(k for k in vars(cls) if not k.startswith("_"))
    is_flags = bool(members) and getattr(cls, members[0]) == 1
    return FieldType("flags" if is_flags else "enum", name, members)


class _Invalid(Exception):
    """One value a type cannot hold; the caller says where it was."""


def _json_kind(value) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null" if value is None else type(value).__name__


def _what(value) -> str:
    """`5.5 is a number`, `"x" is a string`, `null`: the value and its JSON kind."""
    return "null" if value is None else f"{_show(value)} is {_json_kind(value)}"


def _show(value) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_f32(value: float) -> float:
    """A finite number that rounds to binary32 infinity is refused; NaN and ±inf pass
    (written as NaN, Infinity, -Infinity)."""
    if not math.isfinite(value):
        return value
    try:
        struct.pack("<f", value)
    except OverflowError:
        raise _Invalid(f"{_show(value)} overflows f32 (largest finite {F32_MAX:.8g}); "
                       "an infinite value is written Infinity in JSON, inf in --param") from None
    return value


def check_value(value, t: FieldType):
    """`value` as the run stores it (enum names to numbers), or _Invalid saying why not."""
    if t.length is not None:
        if not isinstance(value, list):
            raise _Invalid(f"{_what(value)}; the field is {t}: give a list of at most "
                           f"{t.length} values")
        if len(value) > t.length:
            raise _Invalid(f"a list of {len(value)} values; the field is {t}: at most {t.length}")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(check_value(v, t.element))
            except _Invalid as exc:
                raise _Invalid(f"element {i}: {exc}") from None
        return out
    if t.kind in INT_RANGE:
        if isinstance(value, bool) or not isinstance(value, int):
            hint = f"; write {int(value)}" if isinstance(value, float) and value.is_integer() else ""
            raise _Invalid(f"{_what(value)}; {t} takes an integer{hint}")
        lo, hi = INT_RANGE[t.kind]
        if not lo <= value <= hi:
            raise _Invalid(f"{_show(value)} does not fit in {t} ({lo}..{hi})")
        return value
    if t.kind == "f32":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _Invalid(f"{_what(value)}; f32 takes a number")
        try:
            check_f32(float(value))
        except OverflowError:  # an integer beyond binary64
            raise _Invalid(f"{_show(value)} overflows f32 (largest finite {F32_MAX:.8g})") from None
        return value
    if t.kind == "bool":
        if not isinstance(value, bool):
            raise _Invalid(f"{_what(value)}; a bool takes true or false")
        return value
    # enum or flag set: a member name of this very type (a flag set also takes its bits as a number)
    members = ", ".join(t.members)
    if isinstance(value, str):
        if value in t.members:
            index = t.members.index(value)
            return 1 << index if t.kind == "flags" else index
        raise _Invalid(f"'{value}' is not a member of {t} ({members}){did_you_mean(value, t.members)}")
    if t.kind == "flags" and isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < 1 << len(t.members):
            raise _Invalid(f"{value} sets bits that {t} does not have ({members}: the bits 1, 2, 4, ...)")
        return value
    also = " or the members' bits as a number" if t.kind == "flags" else ""
    raise _Invalid(f"{_what(value)}; {t} takes a member name ({members}){also}")


# ---- request counts: refused before anything is allocated ------------------------------

def _available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 34


def bytes_per_request(module) -> int:
    """A rough lower bound of a request's memory: its state as numpy words (the run's
    input, the result and one backend's copy) and as the simulator's Python object
    (a pointer per word), plus the workload's dict of values."""
    words = sum(count for _name, _attr, _word, count, _arr in module.REQUEST_LAYOUT)
    return words * (3 * 4 + 8) + 512


def _gib(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / 1024:.1f} KiB"


def check_request_count(n: int, module) -> None:
    """Refuse a count the backends cannot index (32-bit signed) or this machine cannot hold."""
    if n > LAUNCH_MAX:
        raise WorkloadError(f"{n} requests: at most {LAUNCH_MAX} (the CPU build and the GPU count requests "
                            "in 32 bits)")
    need, have = n * bytes_per_request(module), _available_bytes()
    if need > have // 2:
        raise WorkloadError(f"{n} requests need about {_gib(need)} of memory before the run starts "
                            f"({_gib(bytes_per_request(module))} each); this machine has {_gib(have)} available: "
                            "use fewer requests")


# ---- the loader ------------------------------------------------------------------------

class _Errors:
    """Collects a workload's errors, each as `where: message`, to report them together."""

    def __init__(self, source: str):
        self.source = source
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}" if where else message)

    def raise_if_any(self) -> None:
        if not self.items:
            return
        shown = self.items[:MAX_ERRORS]
        more = len(self.items) - len(shown)
        lines = [f"{self.source}: {item}" for item in shown] + ([f"... and {more} more"] if more else [])
        raise WorkloadError("\n".join(lines))


def _unknown_keys(obj: dict, known, where: str, what: str, errors: _Errors) -> None:
    for key in obj:
        if key not in known:
            errors.add(where, f"unknown {what} '{key}'{did_you_mean(key, known)} (expected {', '.join(known)})")


def _object(data: dict, key: str, errors: _Errors, where: str = "") -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        errors.add(where + key, f"{_what(value)}; give an object {{...}}")
        return {}
    return value


def _check_int(value, lo: int, hi: int, where: str, what: str, errors: _Errors) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        hint = f"; write {int(value)}" if isinstance(value, float) and value.is_integer() else ""
        errors.add(where, f"{_what(value)}; {what} is an integer in {lo}..{hi}{hint}")
        return None
    if not lo <= value <= hi:
        errors.add(where, f"{_show(value)} is out of range; {what} is an integer in {lo}..{hi}")
        return None
    return value


def _launch(data: dict, errors: _Errors) -> LaunchConfig:
    launch = _object(data, "launch", errors)
    _unknown_keys(launch, LAUNCH_KEYS, "launch", "launch setting", errors)
    config = LaunchConfig()
    what = {"max_active": "the batch capacity", "max_rounds": "the watchdog's round limit"}
    for key in LAUNCH_KEYS:
        if key in launch:
            value = _check_int(launch[key], 1, LAUNCH_MAX, f"launch.{key}", what[key], errors)
            if value is not None:
                setattr(config, key, value)
    return config


def _params(data: dict, module, errors: _Errors) -> dict:
    params = _object(data, "params", errors)
    types = param_types(module)
    out = {}
    for name, value in params.items():
        if name not in types:
            errors.add(f"params.{name}", f"not a launch parameter of pipeline {module.PIPELINE}"
                                         f"{did_you_mean(name, types)} (its parameters: {', '.join(types) or 'none'})")
            continue
        try:
            out[name] = check_value(value, types[name])
        except _Invalid as exc:
            errors.add(f"params.{name}", str(exc))
    return out


def _requests(data: dict, types: dict[str, FieldType], module, errors: _Errors) -> list[dict]:
    requests = data.get("requests", [])
    if not isinstance(requests, list):
        errors.add("requests", f"{_what(requests)}; give a list of request objects")
        return []
    out = []
    for i, request in enumerate(requests):
        if not isinstance(request, dict):
            errors.add(f"requests[{i}]", f"{_what(request)}; a request is an object "
                                         "of field values")
            continue
        values = {}
        for name, value in request.items():
            where = f"requests[{i}].{name}"
            if name not in types:
                errors.add(where, f"not a request field of pipeline {module.PIPELINE}{did_you_mean(name, types)}")
                continue
            try:
                values[name] = check_value(value, types[name])
            except _Invalid as exc:
                errors.add(where, str(exc))
        out.append(values)
    return out


@dataclass
class _Spec:
    """A checked distribution: `kind` and its argument with values already converted."""
    kind: str
    arg: object


def _spec(spec, t: FieldType, count: int) -> _Spec:
    """Check one generator entry against its field's type; raises _Invalid."""
    if not isinstance(spec, dict):
        return _Spec("constant", check_value(spec, t))
    if len(spec) != 1:
        raise _Invalid(f"an object with {len(spec)} keys; give exactly one of {', '.join(DISTRIBUTIONS)}")
    kind, arg = next(iter(spec.items()))
    if kind not in DISTRIBUTIONS:
        raise _Invalid(f"unknown distribution '{kind}'{did_you_mean(kind, DISTRIBUTIONS)} "
                       f"({', '.join(DISTRIBUTIONS)})")
    if kind == "constant":
        return _Spec(kind, check_value(arg, t))
    if kind in ("choice", "cycle"):
        if not isinstance(arg, list) or not arg:
            raise _Invalid(f"{kind}: {'[] is an empty list' if arg == [] else _what(arg)}; "
                           "give a non-empty list of values")
        values = []
        for i, v in enumerate(arg):
            try:
                values.append(check_value(v, t))
            except _Invalid as exc:
                raise _Invalid(f"{kind}[{i}]: {exc}") from None
        return _Spec(kind, values)
    if t.length is not None or t.kind not in ("i32", "u32", "f32"):
        use = "choice or cycle with member names" if t.enum else "constant, choice or cycle"
        raise _Invalid(f"{kind} draws numbers, but the field is {t}: use {use}")
    if kind == "counter":
        if t.kind == "f32":
            raise _Invalid("counter counts integers, but the field is f32: use uniform, choice or cycle")
        if isinstance(arg, bool) or not isinstance(arg, int):
            raise _Invalid(f"counter: {_what(arg)}; give the integer to start from")
        lo, hi = INT_RANGE[t.kind]
        last = arg + max(count - 1, 0)
        if not (lo <= arg and last <= hi):
            raise _Invalid(f"counter {_show(arg)}..{_show(last)} does not fit in {t} ({lo}..{hi})")
        return _Spec(kind, arg)
    # uniform
    if (not isinstance(arg, list) or len(arg) != 2
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in arg)):
        raise _Invalid(f"uniform: {_show(arg)}; give [LO, HI], two numbers")
    lo, hi = arg
    if any(isinstance(v, float) and not math.isfinite(v) for v in arg):
        raise _Invalid(f"uniform: {_show(arg)}; both ends must be finite")
    if lo > hi:
        raise _Invalid(f"uniform: [{lo}, {hi}] is reversed; write [{hi}, {lo}]")
    both_ints = isinstance(lo, int) and isinstance(hi, int)
    if both_ints and t.kind == "f32":
        raise _Invalid(f"uniform [{lo}, {hi}] draws integers, but the field is f32: write [{float(lo)}, {float(hi)}]")
    if not both_ints and t.kind != "f32":
        raise _Invalid(f"uniform [{lo}, {hi}] draws floats, but the field is {t}: give two integers")
    for v in arg:
        check_value(v, t)
    return _Spec(kind, (lo, hi))


def _draw(spec: _Spec, i: int, rng: np.random.Generator):
    """The i-th generated request's value (the rng consumed exactly as docs/workloads.md says)."""
    if spec.kind == "uniform":
        lo, hi = spec.arg
        if isinstance(lo, int) and isinstance(hi, int):
            return int(rng.integers(lo, hi + 1))
        return float(rng.uniform(lo, hi))
    if spec.kind == "choice":
        return spec.arg[int(rng.integers(0, len(spec.arg)))]
    if spec.kind == "cycle":
        return spec.arg[i % len(spec.arg)]
    if spec.kind == "counter":
        return spec.arg + i
    return spec.arg


def _generator(data: dict, types: dict[str, FieldType], module, n_explicit: int,
               errors: _Errors) -> tuple[int, dict[str, _Spec]]:
    gen = data.get("generate")
    if gen is None:
        return 0, {}
    if not isinstance(gen, dict):
        errors.add("generate", f"{_what(gen)}; give an object {{\"count\": N, \"fields\": {{...}}}}")
        return 0, {}
    _unknown_keys(gen, GENERATE_KEYS, "generate", "key", errors)
    count = _check_int(gen.get("count", 0), 0, LAUNCH_MAX, "generate.count", "the number of requests", errors)
    if count is not None:
        try:
            check_request_count(n_explicit + count, module)
        except WorkloadError as exc:
            errors.add("generate.count", str(exc))
            count = None
    fields = _object(gen, "fields", errors, "generate.")
    specs = {}
    for name, spec in fields.items():
        where = f"generate.fields.{name}"
        if name not in types:
            errors.add(where, f"not a request field of pipeline {module.PIPELINE}{did_you_mean(name, types)}")
            continue
        try:
            specs[name] = _spec(spec, types[name], count or 0)
        except _Invalid as exc:
            errors.add(where, f"{exc}")
    return count or 0, specs  # a bad count is in `errors`, raised before anything is drawn


def from_dict(data: dict, module, name: str = "workload", source: str | None = None) -> Workload:
    """A workload from parsed JSON, checked against `module`'s pipeline; WorkloadError names
    `source` (the file), the request or generator field, and the field."""
    errors = _Errors(source or name)
    if not isinstance(data, dict):
        errors.add("", f"a workload is a JSON object {{...}}, not {_json_kind(data)}")
        errors.raise_if_any()
    _unknown_keys(data, TOP_KEYS, "", "key", errors)
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            errors.add(key, f"{_what(data[key])}; give a string")
    seed = _check_int(data.get("seed", 0), 0, SEED_MAX, "seed", "the generator's seed", errors)
    config = _launch(data, errors)
    params = _params(data, module, errors)
    types = request_types(module)
    inputs = _requests(data, types, module, errors)
    count, specs = _generator(data, types, module, len(inputs), errors)
    errors.raise_if_any()
    rng = np.random.default_rng(seed)
    for i in range(count):
        inputs.append({f: _draw(spec, i, rng) for f, spec in specs.items()})
    title = data.get("name", name)
    return Workload(title, inputs, params, config, data.get("description", ""))


def _no_duplicate_keys(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise WorkloadError(f"the key '{key}' appears twice in one object")
        seen[key] = value
    return seen


def _parse_float(text: str) -> float:
    """JSON numbers beyond binary64 would parse as ±inf: refused (Infinity is written so)."""
    value = float(text)
    if math.isinf(value):
        raise WorkloadError(f"the number {text} overflows; write Infinity for an infinite value")
    return value


def read_json(path: Path):
    """The parsed JSON of a workload file; WorkloadError (naming the path) for anything
    that is not a readable, regular, UTF-8 JSON file of sane size."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise WorkloadError(f"no such workload file: {path} (bundled workloads: small, mixed, kv_pressure)") from None
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise WorkloadError(f"{path}: is a directory; give a workload JSON file")
    if not stat.S_ISREG(info.st_mode):
        raise WorkloadError(f"{path}: not a regular file; give a workload JSON file")
    if info.st_size > MAX_FILE_BYTES:
        raise WorkloadError(f"{path}: {_gib(info.st_size)}; a workload file is at most {_gib(MAX_FILE_BYTES)} "
                            "(describe many requests with generate)")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise WorkloadError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                            "save the workload as UTF-8") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_float=_parse_float)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except WorkloadError as exc:
        raise WorkloadError(f"{path}: {exc}") from None
    except RecursionError:
        raise WorkloadError(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise WorkloadError(f"{path}: invalid JSON: {exc}") from None


def load(path: str | Path, module) -> Workload:
    path = Path(path)
    return from_dict(read_json(path), module, path.stem, source=str(path))


def resolve(path_or_name: str) -> Path:
    """A workload path, or the name of a bundled one (workloads/NAME.json)."""
    from ...core.resources import data_dir

    p = Path(path_or_name)
    if p.exists():
        return p
    bundled = data_dir("workloads") / f"{path_or_name}.json"
    return bundled if bundled.exists() else p

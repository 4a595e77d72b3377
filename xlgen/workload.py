"""Workloads: which requests a run starts with (JSON, see docs/workloads.md).

    {
      "name": "mixed", "seed": 7,
      "launch": {"max_active": 32, "max_rounds": 20000},
      "params": {"vocab": 32000},
      "requests": [{"prompt_len": 12, "max_new_tokens": 40}],      # explicit, and/or
      "generate": {"count": 64, "fields": {
          "prompt_len": {"uniform": [16, 128]},                      # integers if both ends are
          "base_acceptance": {"uniform": [0.3, 0.95]},
          "max_new_tokens": {"choice": [64, 128, 256]},
          "profile": {"cycle": ["CONSTANT", "STRUCTURED", "BURSTY"]},  # enum members by name
          "seed": {"counter": 1000}}}                                # 1000, 1001, ...
    }

Field names are the pipeline's request fields; anything not given keeps the
field's declared initial value. Generation is seeded, so a workload always
yields the same requests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .runtime.sim import LaunchConfig


class WorkloadError(ValueError):
    pass


@dataclass
class Workload:
    name: str
    inputs: list[dict]
    params: dict = field(default_factory=dict)
    config: LaunchConfig = field(default_factory=LaunchConfig)
    description: str = ""


def _enum_value(module, value):
    """`"STRUCTURED"` -> the member's value, looked up in the module's enums."""
    if not isinstance(value, str):
        return value
    for obj in vars(module).values():
        if isinstance(obj, type) and hasattr(obj, value) and not value.startswith("_"):
            member = getattr(obj, value)
            if isinstance(member, int):
                return member
    raise WorkloadError(f"'{value}' is not an enum member of pipeline {module.PIPELINE}")


def _draw(spec, i: int, rng: np.random.Generator, module, where: str):
    if not isinstance(spec, dict):
        return _enum_value(module, spec)
    if len(spec) != 1:
        raise WorkloadError(f"{where}: give one of constant, uniform, choice, cycle, counter")
    kind, arg = next(iter(spec.items()))
    if kind == "uniform":
        lo, hi = arg
        if isinstance(lo, int) and isinstance(hi, int):
            return int(rng.integers(lo, hi + 1))
        return float(rng.uniform(lo, hi))
    if kind == "choice":
        return _enum_value(module, arg[int(rng.integers(0, len(arg)))])
    if kind == "cycle":
        return _enum_value(module, arg[i % len(arg)])
    if kind == "counter":
        return int(arg) + i
    if kind == "constant":
        return _enum_value(module, arg)
    raise WorkloadError(f"{where}: unknown distribution '{kind}' (constant, uniform, choice, cycle, counter)")


def from_dict(data: dict, module, name: str = "workload") -> Workload:
    if not isinstance(data, dict):
        raise WorkloadError("a workload is a JSON object")
    known = {"name", "description", "seed", "launch", "params", "requests", "generate"}
    unknown = set(data) - known
    if unknown:
        raise WorkloadError(f"unknown key(s): {', '.join(sorted(unknown))} (expected {', '.join(sorted(known))})")
    rng = np.random.default_rng(int(data.get("seed", 0)))
    inputs = [{k: _enum_value(module, v) for k, v in r.items()} for r in data.get("requests", [])]
    gen = data.get("generate")
    if gen is not None:
        count = int(gen.get("count", 0))
        fields = gen.get("fields", {})
        for i in range(count):
            inputs.append({f: _draw(spec, i, rng, module, f"generate.fields.{f}") for f, spec in fields.items()})
    _validate(module, inputs, data.get("params", {}))
    launch = dict(data.get("launch", {}))
    try:
        config = LaunchConfig(**launch)
    except TypeError as exc:
        raise WorkloadError(f"launch: {exc}") from None
    params = {k: _enum_value(module, v) for k, v in data.get("params", {}).items()}
    return Workload(data.get("name", name), inputs, params, config, data.get("description", ""))


def _validate(module, inputs: list[dict], params: dict) -> None:
    """Unknown names and out-of-range values are the workload's error, said before anything runs."""
    from .runtime.sim import coerce

    layout = {e[0]: e for e in module.REQUEST_LAYOUT}
    for i, request in enumerate(inputs):
        for name, value in request.items():
            if name not in layout:
                from .diagnostics import did_you_mean

                raise WorkloadError(f"request {i}: '{name}' is not a request field of pipeline "
                                    f"{module.PIPELINE}{did_you_mean(name, layout)}")
            _, _, word, count, is_array = layout[name]
            values = value if is_array else [value]
            if is_array and (not isinstance(value, list) or len(value) > count):
                raise WorkloadError(f"request {i}: '{name}' takes a list of at most {count} values")
            for v in values:
                try:
                    coerce(v, word)
                except (TypeError, ValueError) as exc:
                    raise WorkloadError(f"request {i}: '{name}': {exc}") from None
    for name in params:
        if name not in module.Params.TYPES:
            from .diagnostics import did_you_mean

            raise WorkloadError(f"params: '{name}' is not a launch parameter of pipeline "
                                f"{module.PIPELINE}{did_you_mean(name, module.Params.TYPES)}")


def load(path: str | Path, module) -> Workload:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise WorkloadError(f"no such workload file: {path}") from None
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    return from_dict(data, module, path.stem)


def resolve(path_or_name: str) -> Path:
    """A workload path, or the name of a bundled one (workloads/NAME.json)."""
    from .resources import data_dir

    p = Path(path_or_name)
    if p.exists():
        return p
    bundled = data_dir("workloads") / f"{path_or_name}.json"
    return bundled if bundled.exists() else p

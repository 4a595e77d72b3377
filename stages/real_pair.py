"""The bundled real model pair (models/bytes_pair/, docs/models.md) as launches of a pipeline
(stages/byte_spec.xl), and a run's answers against PyTorch's.

xlgen names no pipeline's fields: which request fields take a prompt, which launch parameters
select plain greedy or speculative decoding, and which trace holds a verify step come from the
pair's binding file, models/bytes_pair/pipeline.json (`Binding`).

- inputs: the bundled prompts (`prompts.json`: text as UTF-8, or hex) as per-request field
  overrides: the prompt's bytes (then zeros), its length, the new tokens asked for;
  `select_prompts` picks some by name, kind or index;
- weights: the stacked pair file (`pair.safetensors`, checked by models/byte_lm.py's loader)
  as launch parameters, only the tensors a pipeline declares;
- the reference: `reference_tokens.json`, PyTorch's greedy tokens of the target with every
  step's top-1 logit margin; `compare_tokens` says per prompt how far a run's committed
  tokens agree (the equal prefix and the count of equal tokens), the smallest recorded margin,
  and where a prompt disagrees, the position and the recorded margin there;
- a run's speculation per request, from its traces: accepted prefix and block size per
  verify step, tokens per verify round; per prompt kind; the block-size plot.

Pure Python and NumPy: nothing here runs a pipeline (real_demo.py and
scripts/real_bench.py do).
"""

from __future__ import annotations

import importlib.util
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from xlgen.core.resources import data_dir

KIND_COLOURS = {"code": "tab:blue", "prose": "tab:green", "random": "tab:red"}
# A disagreement with PyTorch at a recorded top-1 margin below this is float32 noise (the order of
# additions is not part of the models' contract; docs/models.md), not a wrong implementation.
NOISE_MARGIN = 1e-4


class RealPairError(ValueError):
    """A prompt selection, a token count or a file that does not fit (the message says what)."""


def models_dir() -> Path:
    """models/ of the checkout (or of the installed package, xlgen/data/models)."""
    return data_dir("models")


def pair_dir() -> Path:
    return models_dir() / "bytes_pair"


def binding_file() -> Path:
    return pair_dir() / "pipeline.json"


def pair_file() -> Path:
    return pair_dir() / load_binding().weights


def prompts_file() -> Path:
    return pair_dir() / load_binding().prompts


def reference_file() -> Path:
    return pair_dir() / load_binding().reference


# ---- the binding: how a pipeline takes the pair --------------------------------------------

@dataclass(frozen=True)
class Binding:
    """models/bytes_pair/pipeline.json: the pipeline and the names it gives the pair's inputs,
    launch parameters and verify steps (its "about" says what each entry is)."""
    pipeline: str  # a file of the bundled stages, or a path
    weights: str
    prompts: str
    reference: str
    reference_model: str
    tokens: str  # request field: the prompt's bytes, then zeros
    length: str  # request field: the prompt's length
    new_tokens: str  # request field: new tokens asked for
    positions: int  # the models' max_len: the length of `tokens`
    headroom: int  # room a verify step needs past the last token asked for
    every: dict  # launch parameters of every launch
    plain: dict  # ... of plain greedy decoding
    speculative: dict  # ... of speculative decoding with ASBS
    block_param: str  # the launch parameter of a fixed block size
    verify_stage: str
    accepted: str  # traced at verify_stage: the accepted prefix
    block: str  # traced at verify_stage: the block size chosen
    proposed: str | None = None  # traced at verify_stage (when it is): drafted tokens of the step
    proposed_total: str | None = None  # request field: drafted tokens in all
    accepted_total: str | None = None  # request field: accepted drafted tokens in all
    cost: dict = field(default_factory=dict)  # launch parameters of the cost policy (none: no such policy)
    block_costs: dict = field(default_factory=dict)  # block size -> the launch parameter of a step's cost at it
    catchup_param: str | None = None  # the launch parameter of the draft's cost to catch up a position
    prior_param: str | None = None  # the launch parameter of a new request's acceptance estimate (its EMA's start)
    pool_param: str | None = None  # the launch parameter of the KV pool's size, in pages
    pool_page_size: int = 16  # tokens per page of that pool

    def params(self, mode: str, block: int = 0) -> dict:
        """Launch parameters of `mode`: "plain", "speculative" (ASBS), "cost" (the cost policy, at
        its default costs: add cost_params), or "fixed" (block > 0)."""
        if mode == "plain":
            return {**self.every, **self.plain}
        if mode == "speculative":
            return {**self.every, **self.speculative}
        if mode == "cost" and self.cost:
            return {**self.every, **self.cost}
        if mode == "fixed" and block > 0:
            return {**self.every, **self.speculative, self.block_param: block}
        raise ValueError(f"mode {mode!r} (block {block}): plain, speculative, cost (when the binding has it), or "
                         "fixed with a block >= 1")

    def cost_params(self, costs: dict[int, float], catchup: float | None = None,
                    prior: float | None = None) -> dict:
        """The cost policy's launch parameters for `costs` (block size -> cost of a step),
        `catchup` (the draft's cost to catch up a position) and `prior` (the draft's acceptance,
        where a request's estimate starts; None: the pipeline's defaults)."""
        unknown = sorted(set(costs) - set(self.block_costs))
        if unknown:
            raise RealPairError(f"costs for block sizes {unknown}: the binding's cost policy takes "
                                f"{sorted(self.block_costs)}")
        out = {self.block_costs[b]: float(c) for b, c in costs.items()}
        if catchup is not None and self.catchup_param:
            out[self.catchup_param] = float(catchup)
        if prior is not None and self.prior_param:
            out[self.prior_param] = float(prior)
        return out

    def pipeline_path(self) -> Path:
        path = Path(self.pipeline)
        return path if path.is_absolute() or path.parent != Path(".") else data_dir("stages") / path


def parse_binding(doc: dict, source: str = "the binding") -> Binding:
    try:
        req, launch, verify = doc["request"], doc["launch"], doc["verify"]
        return Binding(pipeline=str(doc["pipeline"]), weights=str(doc["weights"]), prompts=str(doc["prompts"]),
                       reference=str(doc["reference"]["file"]), reference_model=str(doc["reference"]["model"]),
                       tokens=str(req["tokens"]), length=str(req["length"]), new_tokens=str(req["new_tokens"]),
                       positions=int(req["positions"]), headroom=int(req["headroom"]),
                       every=dict(launch["every"]), plain=dict(launch["plain"]),
                       speculative=dict(launch["speculative"]), block_param=str(launch["block_param"]),
                       verify_stage=str(verify["stage"]), accepted=str(verify["accepted"]),
                       block=str(verify["block"]), proposed=verify.get("proposed"),
                       proposed_total=verify.get("proposed_total"), accepted_total=verify.get("accepted_total"),
                       cost=dict(launch.get("cost", {})),
                       block_costs={int(b): str(n) for b, n in launch.get("block_costs", {}).items()},
                       catchup_param=launch.get("catchup_cost"), prior_param=launch.get("accept_prior"),
                       pool_param=launch.get("pool", {}).get("param"),
                       pool_page_size=int(launch.get("pool", {}).get("tokens_per_page", 16)))
    except (KeyError, TypeError, ValueError) as exc:
        what = f"no key {exc}" if isinstance(exc, KeyError) else f"a value of the wrong kind ({exc})"
        raise RealPairError(f"{source}: not a binding of the pair to a pipeline ({what}); restore "
                            "models/bytes_pair/pipeline.json from the checkout (git checkout models/)") from None


@lru_cache(maxsize=8)
def _binding(path: str) -> Binding:
    return parse_binding(_read_json(Path(path)), path)


def load_binding(path: str | Path | None = None) -> Binding:
    return _binding(str(path if path is not None else binding_file()))


def check_binding(program, binding: Binding) -> None:
    """Every name the binding gives exists in the pipeline (one message listing what does not)."""
    fields = {f.name for f in program.request_fields}
    params = {p.name for p in program.params}
    problems = [f"request field '{n}'" for n in (binding.tokens, binding.length, binding.new_tokens) if n not in fields]
    launch = {**binding.every, **binding.plain, **binding.speculative, binding.block_param: 1, **binding.cost,
              **{name: 1 for name in binding.block_costs.values()}, **({binding.pool_param: 1} if binding.pool_param else {}),
              **({binding.catchup_param: 1} if binding.catchup_param else {}),
              **({binding.prior_param: 1} if binding.prior_param else {})}
    problems += [f"launch parameter '{n}'" for n in launch if n not in params]
    trace = next((t for t in program.traces if t.stage == binding.verify_stage), None)
    if trace is None:
        problems.append(f"a trace of stage '{binding.verify_stage}'")
    else:
        problems += [f"'{n}' in the trace of {binding.verify_stage}" for n in (binding.accepted, binding.block)
                     if n not in trace.fields]
    if program.tooling.output is None:
        problems.append("an `output` declaration (the answer)")
    if problems:
        raise RealPairError(f"pipeline {program.name} does not have what the pair's binding names: "
                            + ", ".join(problems))


@lru_cache(maxsize=1)
def byte_lm():
    """models/byte_lm.py (the models' reference and loader; not a module of the package)."""
    path = models_dir() / "byte_lm.py"
    if not path.is_file():
        raise RealPairError(f"{path}: not found (the real model pair lives in models/ of an xlgen checkout)")
    import sys

    name = "xlgen_models_byte_lm"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: its dataclasses look themselves up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


# ---- prompts and launch inputs --------------------------------------------------------------

@dataclass(frozen=True)
class Prompt:
    name: str
    kind: str
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="backslashreplace")


def parse_prompts(doc: dict, source: str = "prompts") -> list[Prompt]:
    """{"prompts": [{"name", "kind", "text" | "hex"}, ...]} as Prompts, checked."""
    out, problems = [], []
    listed = doc.get("prompts", []) if isinstance(doc, dict) else None
    if not isinstance(listed, list):
        raise RealPairError(f"{source}: expected {{\"prompts\": [{{\"name\", \"kind\", \"text\" or \"hex\"}}, ...]}}; "
                            "restore it from the checkout (git checkout models/)")
    for i, p in enumerate(listed):
        where = f"prompt {i}" + (f" ('{p['name']}')" if isinstance(p, dict) and "name" in p else "")
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not isinstance(p.get("kind"), str):
            problems.append(f"{where}: needs a 'name' and a 'kind' (strings)")
            continue
        if ("text" in p) == ("hex" in p):
            problems.append(f"{where}: give exactly one of 'text' (UTF-8) and 'hex'")
            continue
        try:
            data = bytes.fromhex(p["hex"]) if "hex" in p else p["text"].encode("utf-8")
        except (ValueError, TypeError, AttributeError) as exc:
            problems.append(f"{where}: {exc}")
            continue
        if not data:
            problems.append(f"{where}: empty (a prompt needs at least one byte)")
            continue
        out.append(Prompt(p["name"], p["kind"], data))
    if not out and not problems:
        problems.append("no prompts (expected {\"prompts\": [{\"name\", \"kind\", \"text\" or \"hex\"}, ...]})")
    names = [p.name for p in out]
    problems += [f"prompt name '{n}' appears twice" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise RealPairError(f"{source}:\n  " + "\n  ".join(problems))
    return out


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise RealPairError(f"{path}: {(exc.strerror or str(exc)).lower()}; the real model pair lives in "
                            "models/bytes_pair/ of an xlgen checkout") from None
    except UnicodeDecodeError:
        raise RealPairError(f"{path}: not valid UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise RealPairError(f"{path}: not JSON ({exc})") from None


def load_prompts(path: str | Path | None = None) -> list[Prompt]:
    path = Path(path) if path is not None else prompts_file()
    doc = _read_json(path)
    return parse_prompts(doc, str(path))


def select_prompts(prompts: list[Prompt], selection: str | None) -> list[Prompt]:
    """`selection`: None or "all", or a comma-separated list of prompt names, kinds (every prompt
    of that kind) and 0-based indices, in the order given, each prompt once."""
    if selection is None or selection.strip() in ("", "all"):
        return list(prompts)
    by_name = {p.name: p for p in prompts}
    chosen: dict[str, Prompt] = {}
    for item in (s.strip() for s in selection.split(",")):
        if not item:
            continue
        if item in by_name:
            picked = [by_name[item]]
        elif any(p.kind == item for p in prompts):
            picked = [p for p in prompts if p.kind == item]
        elif item.isdigit() and int(item) < len(prompts):
            picked = [prompts[int(item)]]
        else:
            from xlgen.core.diagnostics import did_you_mean

            kinds = list(dict.fromkeys(p.kind for p in prompts))
            raise RealPairError(f"no prompt, kind or index '{item}'{did_you_mean(item, list(by_name) + kinds)} "
                                f"(prompts: {', '.join(by_name)}; kinds: {', '.join(kinds)}; "
                                f"indices 0..{len(prompts) - 1})")
        for p in picked:
            chosen.setdefault(p.name, p)
    if not chosen:
        raise RealPairError(f"the selection '{selection}' names no prompt")
    return list(chosen.values())


def request_inputs(prompts: list[Prompt], n_new: int, binding: Binding | None = None) -> list[dict]:
    """One request per prompt, as the binding names its fields: the prompt's bytes at
    0..length-1 of the token field (the rest 0), its length, and n_new new tokens. Refused where
    the prompt, the new tokens and the headroom would not fit the models' positions."""
    b = binding or load_binding()
    if isinstance(n_new, bool) or not isinstance(n_new, (int, np.integer)) or n_new < 1:
        raise RealPairError(f"new tokens = {n_new!r}: give an integer >= 1")
    out = []
    for p in prompts:
        if len(p.data) + n_new + b.headroom > b.positions:
            raise RealPairError(f"prompt '{p.name}' ({len(p.data)} bytes) + {n_new} new tokens + a block of "
                                f"{b.headroom} exceeds the models' {b.positions} positions: at most "
                                f"{b.positions - b.headroom - len(p.data)} new tokens for it")
        tokens = [0] * b.positions
        tokens[: len(p.data)] = p.data
        out.append({b.tokens: tokens, b.length: len(p.data), b.new_tokens: int(n_new)})
    return out


# ---- weights and launch parameters ----------------------------------------------------------

def load_weights(path: str | Path | None = None) -> dict[str, np.ndarray]:
    """The pair file's tensors under their stacked names (`target_wq` [4, 128, 128], ...),
    checked name by name (byte_lm.split_pair) before anything is launched."""
    from safetensors.numpy import load_file

    path = Path(path) if path is not None else pair_file()
    if not path.is_file():
        why = "is not a regular file" if path.exists() or path.is_symlink() else "no such file"
        raise RealPairError(f"{path}: {why} (python3 models/byte_lm.py pair writes it)")
    try:
        arrays = dict(load_file(str(path)))
    except Exception as exc:  # safetensors' own error types for a bad header
        raise RealPairError(f"{path}: not a readable .safetensors file ({exc})") from None
    lm = byte_lm()
    try:
        lm.split_pair(arrays, str(path))
    except lm.ModelError as exc:
        raise RealPairError(str(exc)) from None
    return arrays


def launch_params(module, weights: dict[str, np.ndarray] | None = None, params: dict | None = None) -> dict:
    """Launch parameters: the weights the pipeline declares as tensors (a pair file has both
    models; a pipeline may bind fewer), then `params` by name (Binding.params gives them)."""
    params = dict(params or {})
    declared = getattr(module.Params, "TENSORS", {})
    types = module.Params.TYPES
    out = {name: weights[name] for name in declared if weights is not None and name in weights}
    unknown = sorted(set(params) - set(types))
    if unknown:
        raise RealPairError(f"launch parameter(s) {', '.join(unknown)}: the pipeline has no such parameter "
                            f"(it has: {', '.join(types)})")
    if any(isinstance(v, str) for v in params.values()):  # an enum parameter by member name
        from xlgen.tools.pipeline.workload import _Invalid, check_value, param_types

        kinds = param_types(module)
        for name, value in params.items():
            try:
                params[name] = check_value(value, kinds[name]) if isinstance(value, str) else value
            except _Invalid as exc:
                raise RealPairError(f"launch parameter {name} = {value!r}: {exc}") from None
    out.update(params)
    return out


# ---- the reference ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Recorded:
    """One prompt's greedy tokens as PyTorch recorded them (reference_tokens.json)."""
    name: str
    tokens: tuple[int, ...]
    min_margin: float
    margins: tuple[float, ...] | None = None  # margins[k]: top-1 minus top-2 logit where token k was chosen


def parse_reference(doc: dict, model: str = "target", source: str = "the reference") -> dict[str, Recorded]:
    try:
        rows = doc["models"][model]
        out = {}
        for r in rows:
            margins = tuple(float(m) for m in r["margins"]) if "margins" in r else None
            if margins is not None and len(margins) != len(r["tokens"]):
                raise ValueError(f"'{r['name']}': {len(margins)} margins for {len(r['tokens'])} tokens")
            out[r["name"]] = Recorded(r["name"], tuple(int(t) for t in r["tokens"]), float(r["min_margin"]), margins)
        return out
    except (KeyError, TypeError, ValueError) as exc:
        what = f"no key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise RealPairError(f"{source}: not a reference of model '{model}' ({what}); restore it from the checkout "
                            "(git checkout models/)") from None


def load_reference(path: str | Path | None = None, model: str | None = None) -> dict[str, Recorded]:
    """PyTorch's recorded tokens of `model` (the binding's reference model by default)."""
    path = Path(path) if path is not None else reference_file()
    model = model or load_binding().reference_model
    doc = _read_json(path)
    return parse_reference(doc, model, str(path))


@dataclass(frozen=True)
class Agreement:
    """A run's committed tokens of one prompt against PyTorch's recorded greedy tokens."""
    name: str
    kind: str
    compared: int  # positions compared: min(tokens the run committed, recorded), at most `asked`
    expected: int  # positions that should be compared: min(asked, recorded)
    prefix: int  # tokens equal up to the first difference
    equal: int  # positions with equal tokens among the compared
    min_margin: float  # smallest recorded margin over the expected positions (the whole run's without margins)
    first_diff: int | None = None  # position of the first difference (or of the first missing token)
    margin_at_diff: float | None = None  # the recorded margin there (None: not recorded)
    got: int | None = None  # the run's token there (None: the run committed none)
    want: int | None = None  # PyTorch's token there

    @property
    def agrees(self) -> bool:
        return self.first_diff is None

    @property
    def within_noise(self) -> bool:
        """Disagrees only where PyTorch's own top-1 margin is float32 noise (NOISE_MARGIN)."""
        return self.agrees or (self.margin_at_diff is not None and self.margin_at_diff < NOISE_MARGIN
                               and self.got is not None)

    def describe(self) -> str:
        head = f"{self.prefix}/{self.expected} equal prefix, {self.equal}/{self.expected} equal tokens"
        if self.agrees:
            return f"agrees: {head}; smallest recorded margin {self.min_margin:.4g}"
        margin = "not recorded" if self.margin_at_diff is None else f"{self.margin_at_diff:.4g}"
        if self.got is None:
            what = f"the run committed only {self.compared} tokens"
        else:
            what = f"token {self.got} ({_byte(self.got)}) where PyTorch has {self.want} ({_byte(self.want)})"
        noise = " (within float32 noise)" if self.within_noise else ""
        return (f"DIFFERS at position {self.first_diff}: {what}; recorded margin there {margin}{noise}; {head}; "
                f"smallest recorded margin {self.min_margin:.4g}")


def _byte(token: int | None) -> str:
    if token is None:
        return "-"
    return repr(bytes([token]))[1:] if 0 <= token < 256 else str(token)


def compare_tokens(name: str, got: list[int], recorded: Recorded, asked: int | None = None,
                   kind: str = "") -> Agreement:
    """`got` (a run's committed tokens for the prompt `name`, asked for `asked` new tokens, all
    recorded ones by default) against PyTorch's."""
    want = recorded.tokens
    expected = min(len(want), asked if asked is not None else len(want))
    compared = min(len(got), expected)
    pairs = list(zip(got[:compared], want[:compared]))
    prefix = next((i for i, (a, b) in enumerate(pairs) if a != b), compared)
    equal = sum(a == b for a, b in pairs)
    margins = recorded.margins
    min_margin = min(margins[:expected]) if margins and expected else recorded.min_margin
    diff = prefix if prefix < expected else None
    return Agreement(name, kind, compared, expected, prefix, equal, min_margin, diff,
                     margins[diff] if diff is not None and margins else None,
                     got[diff] if diff is not None and diff < len(got) else None,
                     want[diff] if diff is not None else None)


def compare_run(answers: list[list[int]], prompts: list[Prompt], reference: dict[str, Recorded],
                asked: int) -> list[Agreement]:
    """Every prompt's answer against the reference (a prompt the reference lacks is an error)."""
    missing = [p.name for p in prompts if p.name not in reference]
    if missing:
        raise RealPairError(f"no recorded tokens for prompt(s) {', '.join(missing)} "
                            f"(recorded: {', '.join(reference)}; python3 models/byte_lm.py record)")
    return [compare_tokens(p.name, list(a), reference[p.name], asked, p.kind) for a, p in zip(answers, prompts)]


def format_agreement(rows: list[Agreement]) -> str:
    width = max([len(r.name) for r in rows] + [6])
    lines = [f"{'prompt':<{width}} {'kind':<6} {'prefix':>7} {'equal':>7} {'min margin':>10}  first difference"]
    for r in rows:
        if r.agrees:
            diff = "-"
        else:
            margin = "?" if r.margin_at_diff is None else f"{r.margin_at_diff:.4g}"
            diff = (f"position {r.first_diff}: {_byte(r.got)} vs {_byte(r.want)}, recorded margin {margin}"
                    + (" (noise)" if r.within_noise else ""))
        lines.append(f"{r.name:<{width}} {r.kind:<6} {r.prefix:>3}/{r.expected:<3} {r.equal:>3}/{r.expected:<3} "
                     f"{r.min_margin:>10.4g}  {diff}")
    total = sum(r.expected for r in rows)
    lines.append(f"{'all':<{width}} {'':<6} {sum(r.agrees for r in rows)}/{len(rows)} prompts agree, "
                 f"{sum(r.equal for r in rows)}/{total} tokens equal")
    return "\n".join(lines)


# ---- a run: answers and speculation -------------------------------------------------------------

def committed_tokens(program, result) -> list[list[int]]:
    """Each request's answer: the first COUNT elements of the pipeline's `output FIELD[COUNT]`."""
    out = program.tooling.output
    if out is None:
        raise RealPairError(f"pipeline {program.name} declares no `output` (its answer: output FIELD[COUNT])")
    reqs = result.requests
    length = reqs.dtype[out.field].shape[0]
    counts = np.clip(reqs[out.count].astype(np.int64), 0, length)
    return [[int(t) for t in reqs[out.field][i][: counts[i]]] for i in range(len(reqs))]


@dataclass
class Speculation:
    """One request's verify steps, from the trace of the binding's verify stage (in round order)."""
    name: str
    kind: str
    tokens: int  # committed
    accepted: np.ndarray  # the accepted prefix of every verify step
    blocks: np.ndarray  # the block size traced at every verify step (a per-request policy's choice for the next step, or the step's own)
    proposed: int | None = None  # drafted tokens in all (per step in the trace, or the final state's total)

    @property
    def steps(self) -> int:
        return len(self.accepted)

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else float("nan")

    @property
    def acceptance(self) -> float:
        """Accepted over proposed draft tokens (nan when none was proposed)."""
        return float(self.accepted.sum()) / self.proposed if self.proposed else float("nan")

    @property
    def mean_block(self) -> float:
        return float(self.blocks.mean()) if len(self.blocks) else float("nan")


def speculation(program, result, prompts: list[Prompt], binding: Binding | None = None) -> list[Speculation]:
    """Per request (= per prompt, in order): accepted prefix and block size at every verify step;
    drafted tokens from the trace when it holds them, else from the final state."""
    from xlgen.tools.pipeline.metrics import trace_series

    b = binding or load_binding()
    answers = committed_tokens(program, result)
    traced = next(t for t in program.traces if t.stage == b.verify_stage).fields
    accepted = trace_series(program, result, b.verify_stage, b.accepted)
    blocks = trace_series(program, result, b.verify_stage, b.block)
    drafted = trace_series(program, result, b.verify_stage, b.proposed) if b.proposed in traced else None
    names = result.requests.dtype.names
    out = []
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int32))
    for i, p in enumerate(prompts):
        acc = accepted.get(i, empty)[1].astype(np.int64)
        if drafted is not None:
            proposed = int(drafted.get(i, empty)[1].astype(np.int64).sum())
        elif b.proposed_total in names:
            proposed = int(result.requests[b.proposed_total][i])
        else:
            proposed = None
        out.append(Speculation(p.name, p.kind, len(answers[i]), acc, blocks.get(i, empty)[1].astype(np.int64),
                               proposed))
    return out


@dataclass
class KindSummary:
    kind: str
    prompts: int
    tokens: int
    steps: int
    accepted: int
    proposed: int | None

    @property
    def acceptance(self) -> float:
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def tokens_per_step(self) -> float:
        return self.tokens / self.steps if self.steps else float("nan")


def by_kind(rows: list[Speculation]) -> list[KindSummary]:
    out = []
    for kind in dict.fromkeys(r.kind for r in rows):
        rs = [r for r in rows if r.kind == kind]
        proposed = None if any(r.proposed is None for r in rs) else sum(r.proposed for r in rs)
        out.append(KindSummary(kind, len(rs), sum(r.tokens for r in rs), sum(r.steps for r in rs),
                               int(sum(r.accepted.sum() for r in rs)), proposed))
    return out


def format_speculation(rows: list[Speculation]) -> str:
    width = max([len(r.name) for r in rows] + [6])
    lines = [f"{'prompt':<{width}} {'kind':<6} {'tokens':>6} {'verify steps':>12} {'tokens/step':>11} "
             f"{'acceptance':>10} {'mean block':>10}"]
    for r in rows:
        lines.append(f"{r.name:<{width}} {r.kind:<6} {r.tokens:>6} {r.steps:>12} {r.tokens_per_step:>11.2f} "
                     f"{_pct(r.acceptance):>10} {r.mean_block:>10.2f}")
    for k in by_kind(rows):
        lines.append(f"{'kind ' + k.kind:<{width + 7}} {k.tokens:>6} {k.steps:>12} {k.tokens_per_step:>11.2f} "
                     f"{_pct(k.acceptance):>10}   ({k.prompts} prompt{'s' if k.prompts != 1 else ''})")
    return "\n".join(lines)


def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f}%"


def plot_block_sizes(rows: list[Speculation], path: str | Path, title: str = "") -> Path:
    """ASBS block size against verify step, one line per prompt coloured by its kind: one panel
    per prompt, stacked, sharing the step axis (trajectories that swing between sizes every few
    steps hide each other on one axes). A PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(rows), 1)
    fig, axes = plt.subplots(n, 1, figsize=(9, 0.9 + 0.8 * n), dpi=110, sharex=True, squeeze=False)
    top = max([int(r.blocks.max()) for r in rows if len(r.blocks)] + [1])
    ticks = sorted({1, 4, 8, top} & set(range(1, top + 1)))
    extra: list[str] = []
    for ax, r in zip(axes[:, 0], rows):
        if r.kind not in KIND_COLOURS and r.kind not in extra:
            extra.append(r.kind)
        colour = KIND_COLOURS.get(r.kind) or f"C{(3 + extra.index(r.kind)) % 10}"
        steps = np.arange(1, len(r.blocks) + 1)
        ax.step(steps, r.blocks, where="post", color=colour, linewidth=1.4)
        ax.fill_between(steps, r.blocks, step="post", color=colour, alpha=0.15)
        ax.set_ylim(0, top + 0.8)
        ax.set_yticks(ticks)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(alpha=0.3)
        ax.text(1.01, 0.5, f"{r.name}\n{r.kind}: {r.tokens_per_step:.2f} tok/step, acc. {_pct(r.acceptance)}",
                transform=ax.transAxes, fontsize=7.5, va="center", color=colour)
    axes[-1, 0].set_xlabel("verify step")
    fig.supylabel("block size chosen (ASBS)", fontsize=9)
    fig.suptitle(title or "ASBS block size per verify step, real byte-level model pair", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.80, 1))
    from xlgen.core.files import ensure_directory, write_with

    path = Path(path)
    ensure_directory(path.parent)
    try:
        write_with(path, fig.savefig)  # atomically, never through a link
    finally:
        plt.close(fig)
    return path


def plot_policy_trajectories(variants: dict[str, list[Speculation]], path: str | Path, title: str = "") -> Path:
    """Block-size trajectories side by side: a column per variant (e.g. ASBS and the cost policy,
    each with and without KV pressure), a row per prompt (the same prompts in every variant,
    coloured by kind); B = 0 is a plain step (the cost policy's). A PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(variants)
    if not names or not variants[names[0]]:
        raise RealPairError("no trajectories to plot")
    prompts = [(r.name, r.kind) for r in variants[names[0]]]
    fig, axes = plt.subplots(len(prompts), len(names), figsize=(2.6 * len(names) + 0.8, 0.5 + 1.05 * len(prompts)),
                             dpi=110, sharex=True, sharey=True, squeeze=False)
    steps_max = max(len(r.blocks) for rows in variants.values() for r in rows)
    kinds = list(dict.fromkeys(k for _, k in prompts))
    for col, name in enumerate(names):
        axes[0, col].set_title(name, fontsize=8.5)
        for row, r in enumerate(variants[name]):
            ax = axes[row, col]
            colour = KIND_COLOURS.get(r.kind) or f"C{(3 + kinds.index(r.kind)) % 10}"
            steps = np.arange(1, len(r.blocks) + 1)
            ax.step(steps, r.blocks, where="post", color=colour, linewidth=1.2)
            ax.fill_between(steps, r.blocks, step="post", color=colour, alpha=0.15)
            ax.set_xlim(1, max(steps_max, 2))
            ax.set_ylim(-0.3, 8.8)
            ax.set_yticks([0, 1, 2, 4, 8])
            ax.tick_params(labelsize=6.5)
            ax.grid(alpha=0.3)
            ax.text(0.98, 0.93, f"{r.tokens_per_step:.2f} tok/step, acc. {_pct(r.acceptance)}", transform=ax.transAxes,
                    fontsize=6.3, ha="right", va="top")
            if col == 0:
                ax.set_ylabel(f"{r.name}\n({r.kind})", fontsize=7, color=colour)
    for ax in axes[-1]:
        ax.set_xlabel("verify step", fontsize=7.5)
    fig.suptitle(title or "Block size chosen per verify step (0: a plain step, no draft)", fontsize=9.5)
    fig.tight_layout()
    from xlgen.core.files import ensure_directory, write_with

    path = Path(path)
    ensure_directory(path.parent)
    try:
        write_with(path, fig.savefig)
    finally:
        plt.close(fig)
    return path


# ---- everything one run of the pair gives ---------------------------------------------------

@dataclass
class PairRun:
    """What `xlgen demo --real` and scripts/real_bench.py report of one run."""
    prompts: list[Prompt]
    n_new: int
    answers: list[list[int]]
    agreement: list[Agreement] = field(default_factory=list)
    speculation: list[Speculation] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(len(a) for a in self.answers)


def summarise(program, result, prompts: list[Prompt], n_new: int,
              reference: dict[str, Recorded] | None = None, binding: Binding | None = None) -> PairRun:
    answers = committed_tokens(program, result)
    return PairRun(prompts, n_new, answers,
                   compare_run(answers, prompts, reference, n_new) if reference is not None else [],
                   speculation(program, result, prompts, binding))


def finite(x: float) -> float | None:
    """For JSON: nan/inf as null."""
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None

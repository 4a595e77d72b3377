"""Data-parallel serving over several GPUs of a host: `xlgen run|bench --gpus N`.

The workload's requests are split over N shards **round-robin by request id**
(request i goes to shard i mod N), so every shard gets the same mix of a
workload whose fields cycle or drift with the id. Requests linked to another
request (through the fields the companion names in `REQUEST_ID_FIELDS`; the
bundled pipeline's prefix grafting) stay in one shard with it: each linked group, in the order of its
first request, goes to the shard with the fewest requests so far (the lowest
numbered on a tie), which is round-robin when there are no links. Inside a shard requests keep their relative
order, renumbered 0..k-1 (and the links with them).

Each shard runs in a Ray actor that holds one GPU (`num_gpus=1`): one launch of
the mega-kernel per shard, each with its own shared state (for the bundled
pipeline, its own KV pool of the workload's size) and its own batch capacity (the
workload's `max_active` per GPU). The results are merged by request id: the requests'
final state and records in global ids; `shared` holds one element per shard;
`rounds` is the longest shard's. The same actors run the simulator or the CPU
build on CPU slots (`backend="sim"` / `"cpu"`), which is how CI checks the
sharding without a GPU.

A pipeline's output (its `output` declaration) must not depend on which requests
share a GPU when its models are per request: `bench_sharded` checks it against
the single-GPU run's for every request, and against the companion's `@reference`
(for the bundled pipeline, plain greedy decoding).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from ...runtime.sim import REC_HEADER, LaunchConfig, RunResult

# A pipeline's request fields that hold another request's id are named by its companion module
# (docs/language.md: `REQUEST_ID_FIELDS = ("field", ...)`): linked requests share a shard, and
# these values are renumbered with the requests.


class ShardError(RuntimeError):
    """The sharded run cannot start (too few GPUs) or a shard failed; the message says which."""

    def __init__(self, message: str, hang: bool = False):
        super().__init__(message)
        self.hang = hang


@dataclass
class Shard:
    index: int
    ids: np.ndarray  # the requests' global ids, ascending
    inputs: list[dict]  # their inputs, links renumbered to shard-local ids


def reference_fields(program) -> list[str]:
    from ..pipeline.companion import of_program

    companion = of_program(program)
    declared = tuple(getattr(companion.module, "REQUEST_ID_FIELDS", ())) if companion is not None else ()
    names = {f.name for f in program.request_fields}
    unknown = [f for f in declared if f not in names]
    if unknown:
        raise ShardError(f"{companion.path}: REQUEST_ID_FIELDS names {', '.join(unknown)}, not request fields of "
                         f"pipeline {program.name}")
    return list(declared)


def plan(inputs: list[dict], shards: int, links: list[str] = ()) -> list[Shard]:
    """Split requests over `shards`, round-robin by request id (linked requests together)."""
    n = len(inputs)
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, inp in enumerate(inputs):
        for name in links:
            v = inp.get(name)
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n and v != i:
                a, b = root(i), root(v)
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    members: list[list[int]] = [[] for _ in range(shards)]
    for group in groups.values():  # in order of their first request, each to the emptiest shard
        min(members, key=len).extend(group)
    out = []
    for s, ids in enumerate(members):
        ids = np.array(sorted(ids), dtype=np.int64)
        local = {int(g): i for i, g in enumerate(ids)}
        shard_inputs = []
        for g in ids:
            inp = dict(inputs[int(g)])
            for name in links:
                v = inp.get(name)
                if isinstance(v, int) and not isinstance(v, bool) and v in local:
                    inp[name] = local[v]
            shard_inputs.append(inp)
        out.append(Shard(s, ids, shard_inputs))
    return out


def merge(program, shards: list[Shard], results: list[RunResult], backend: str) -> RunResult:
    """One RunResult in global request ids from the shards' results."""
    used = [(s, r) for s, r in zip(shards, results) if r is not None]
    n = sum(len(s.ids) for s in shards)
    dtype = used[0][1].requests.dtype
    requests = np.zeros(n, dtype=dtype)
    links = reference_fields(program)
    traced = _traced_links(program, links)
    parts = []
    for s, r in used:
        reqs = r.requests.copy()
        for name in links:
            vals = reqs[name]
            mask = (vals >= 0) & (vals < len(s.ids))
            vals[mask] = s.ids[vals[mask]]
        requests[s.ids] = reqs
        rec = r.records.copy()
        if len(rec):
            for kind, column in traced:
                rows = rec[:, 2] == kind
                vals = rec[rows, column].astype(np.int64)
                vals = np.where(vals >= 0x80000000, vals - (1 << 32), vals)  # an i32 word
                mask = (vals >= 0) & (vals < len(s.ids))
                vals[mask] = s.ids[vals[mask]]
                rec[rows, column] = (vals & 0xFFFFFFFF).astype(np.uint32)
            rec[:, 0] = s.ids[rec[:, 0].astype(np.int64)].astype(np.uint32)
        parts.append(rec)
    records = np.concatenate(parts) if parts else np.zeros((0, REC_HEADER), np.uint32)
    records = records[np.argsort(records[:, 0], kind="stable")]
    shared = np.concatenate([r.shared for _s, r in used])
    pools = {name: np.stack([r.pools[name] for _s, r in used]) for name in used[0][1].pools}  # one per shard, as shared
    merged = RunResult(records=records, requests=requests, shared=shared,
                       rounds=max(r.rounds for _s, r in used), backend=f"{backend}x{len(shards)}", pools=pools)
    merged.extra["shards"] = [r.extra for _s, r in used]
    return merged


def _traced_links(program, links: list[str]) -> list[tuple[int, int]]:
    """(trace index, record column) of every traced reference field."""
    from ...core import ir

    out = []
    for trace in program.traces:
        offset = 0
        for name in trace.fields:
            t = program.field(name).type
            if name in links:
                out.append((trace.index, REC_HEADER + offset))
            offset += t.length if isinstance(t, ir.ArrayType) else 1
    return out


# ---- the workers -------------------------------------------------------------------------

class ShardWorker:
    """One per GPU (or CPU slot): keeps the compiled pipeline (and its loaded CUDA module) warm."""

    def __init__(self, pipeline: str, code: str):
        from .sweep import _compiled

        self.compiled = _compiled(pipeline, code)

    def device(self) -> str:
        import os
        import socket

        try:
            from ...runtime import gpu

            if gpu.available():
                import cupy

                name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
                name = name.decode() if isinstance(name, bytes) else str(name)
                return f"{name} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')})"
        except Exception:  # noqa: BLE001 - a name is all this is for
            pass
        return f"{socket.gethostname()} pid {os.getpid()}"

    def run(self, backend: str, params: dict, inputs: list[dict], max_active: int, max_rounds: int,
            timeout: float) -> dict:
        from ...runtime import cpu, sim

        config = LaunchConfig(max_active, max_rounds)
        t0 = time.perf_counter()
        try:
            if backend == "sim":
                result = sim.run_stoppable(self.compiled.sim_module(), params, inputs, config, timeout)
            elif backend == "cpu":
                result = cpu.run(self.compiled, params, inputs, config)
            else:
                from ...runtime import gpu

                mode = "fast" if backend == "gpu-fast" else "deterministic"
                result = gpu.run(self.compiled, params, inputs, config, mode=mode, timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - returned, so the driver names the shard
            report = getattr(exc, "report", None)  # a GPU hang or a stopped simulator: where each request was
            return {"error": f"{type(exc).__name__}: {report or exc}", "hang": report is not None}
        wall_ms = (time.perf_counter() - t0) * 1e3
        timing = result.extra.get("timing")
        return {"result": result, "wall_ms": timing.wall_ms if timing is not None else wall_ms,
                "kernel_ms": timing.kernel_ms if timing is not None else None, "call_ms": wall_ms}


@dataclass
class ShardReport:
    shard: int
    device: str
    requests: int
    tokens: int
    rounds: int
    wall_ms: float  # GPU: host time from launch to completion seen; sim/cpu: the run call
    kernel_ms: float | None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / (self.wall_ms / 1e3) if self.wall_ms else 0.0


@dataclass
class ShardedRun:
    result: RunResult
    shards: list[ShardReport]
    e2e_ms: float  # from handing the shards to Ray to holding every result (transfers and Ray included)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.shards)

    @property
    def wall_ms(self) -> float:
        """The slowest shard's: the GPUs run at once."""
        return max(s.wall_ms for s in self.shards)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / (self.wall_ms / 1e3) if self.wall_ms else 0.0

    def table(self) -> str:
        lines = [f"{'shard':>5} {'requests':>8} {'tokens':>9} {'rounds':>6} {'wall ms':>10} {'kernel ms':>10} "
                 f"{'tokens/s':>12}  device"]
        for s in self.shards:
            kernel = f"{s.kernel_ms:.3f}" if s.kernel_ms is not None else "-"
            lines.append(f"{s.shard:>5} {s.requests:>8} {s.tokens:>9} {s.rounds:>6} {s.wall_ms:>10.3f} {kernel:>10} "
                         f"{s.tokens_per_s:>12,.0f}  {s.device}")
        lines.append(f"{'total':>5} {sum(s.requests for s in self.shards):>8} {self.tokens:>9} "
                     f"{self.result.rounds:>6} {self.wall_ms:>10.3f} {'':>10} {self.tokens_per_s:>12,.0f}  "
                     f"(slowest shard's wall; end to end through Ray {self.e2e_ms:.1f} ms)")
        return "\n".join(lines)


def _tokens(program, result: RunResult) -> int:
    """Output elements: the sum of the declared output's count (0 without an `output`)."""
    out = program.tooling.output
    return int(result.requests[out.count].sum()) if out is not None else 0


class ShardPool:
    """N Ray actors, one GPU each (CPU slots for sim/cpu), started once and reused by every run."""

    def __init__(self, compiled, pipeline_path, workers: int, backend: str = "gpu", address: str | None = None,
                 cpus: int | None = None):
        from .sweep import RayStartError, start_ray

        self.compiled = compiled
        self.backend = backend
        gpu = backend.startswith("gpu")
        try:
            ray = self.ray = start_ray(address, cpus)
        except RayStartError as exc:
            raise ShardError(str(exc)) from None
        have = ray.cluster_resources().get("GPU" if gpu else "CPU", 0)
        if have < workers:
            what = "GPUs" if gpu else "CPU slots"
            raise ShardError(f"--gpus {workers}: the Ray cluster has {have:g} {what}")
        actor = ray.remote(ShardWorker).options(num_gpus=1 if gpu else 0, num_cpus=0 if gpu else 1)
        self.actors = [actor.remote(str(pipeline_path), compiled.key) for _ in range(workers)]
        self.devices = ray.get([a.device.remote() for a in self.actors])

    def run(self, workload, shards: int | None = None, timeout: float = 120.0) -> ShardedRun:
        """The workload over the first `shards` workers (all by default), merged by request id."""
        shards = shards or len(self.actors)
        parts = plan(workload.inputs, shards, reference_fields(self.compiled.program))
        t0 = time.perf_counter()
        refs = [self.actors[s.index].run.remote(self.backend, workload.params, s.inputs, workload.config.max_active,
                                               workload.config.max_rounds, timeout)
                for s in parts if len(s.ids)]
        outs = self.ray.get(refs)
        e2e_ms = (time.perf_counter() - t0) * 1e3
        live = [s for s in parts if len(s.ids)]
        for s, out in zip(live, outs):
            if "error" in out:
                raise ShardError(f"shard {s.index} ({self.devices[s.index]}, {len(s.ids)} requests): {out['error']}",
                                 hang=out.get("hang", False))
        results = {s.index: out["result"] for s, out in zip(live, outs)}
        merged = merge(self.compiled.program, live, [results[s.index] for s in live], self.backend)
        reports = [ShardReport(s.index, self.devices[s.index], len(s.ids), _tokens(self.compiled.program, out["result"]),
                               out["result"].rounds, out["wall_ms"], out["kernel_ms"]) for s, out in zip(live, outs)]
        return ShardedRun(merged, reports, e2e_ms)

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)


def run_sharded(compiled, pipeline_path, workload, workers: int, backend: str = "gpu", timeout: float = 120.0,
                address: str | None = None, cpus: int | None = None) -> ShardedRun:
    pool = ShardPool(compiled, pipeline_path, workers, backend, address, cpus)
    try:
        return pool.run(workload, timeout=timeout)
    finally:
        pool.close()


# ---- checks and the benchmark ----------------------------------------------------------------

def committed_differences(program, a: RunResult, b: RunResult) -> list[int]:
    """Requests whose output differs between two runs (the declared `output FIELD[COUNT]`: its
    first COUNT elements; without one, the whole final request state)."""
    out = program.tooling.output
    if out is None:
        names = a.requests.dtype.names
        return [i for i in range(len(a.requests))
                if any(not np.array_equal(a.requests[f][i], b.requests[f][i]) for f in names)]
    differ = []
    for i in range(len(a.requests)):
        na, nb = int(a.requests[out.count][i]), int(b.requests[out.count][i])
        if na != nb or not np.array_equal(a.requests[out.field][i][:na], b.requests[out.field][i][:nb]):
            differ.append(i)
    return differ


def greedy_differences(compiled, params: dict, result: RunResult) -> list[int] | None:
    """Requests whose output differs from the companion's @reference (for the bundled pipeline:
    plain greedy decoding); None for a pipeline without an output or a reference."""
    from ..pipeline.companion import of_program, params_by_name

    program = compiled.program
    companion = of_program(program)
    out = program.tooling.output
    refs = companion.of("reference") if companion is not None else []
    if out is None or not refs:
        return None
    by_name = params_by_name(compiled.sim_module(), params)
    reqs = result.requests
    differ = []
    for i in range(len(reqs)):
        want = [int(v) for v in companion.call(refs[0], reqs[i], by_name)]
        n = int(reqs[out.count][i])
        if n != len(want) or reqs[out.field][i][:n].tolist() != want:
            differ.append(i)
    return differ


@dataclass
class ShardedBench:
    workload: str
    requests: int
    max_active: int
    gpus: int
    backend: str
    single: list[ShardedRun] = field(default_factory=list)
    sharded: list[ShardedRun] = field(default_factory=list)
    differ_from_single: list[int] = field(default_factory=list)
    differ_from_greedy: list[int] | None = None

    @property
    def unit(self) -> str:
        return "GPU" if self.backend.startswith("gpu") else "worker"

    @staticmethod
    def _median(runs: list[ShardedRun], attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in runs)

    def speedup(self) -> float:
        return self._median(self.single, "wall_ms") / self._median(self.sharded, "wall_ms")

    def e2e_speedup(self) -> float:
        return self._median(self.single, "e2e_ms") / self._median(self.sharded, "e2e_ms")

    def to_json(self) -> dict:
        def runs(rs):
            return [{"wall_ms": r.wall_ms, "e2e_ms": r.e2e_ms, "tokens": r.tokens, "tokens_per_s": r.tokens_per_s,
                     "shards": [s.__dict__ | {"tokens_per_s": s.tokens_per_s} for s in r.shards]} for r in rs]

        return {"workload": self.workload, "requests": self.requests, "max_active_per_gpu": self.max_active,
                "gpus": self.gpus, "backend": self.backend, "single": runs(self.single), "sharded": runs(self.sharded),
                "speedup_wall": self.speedup(), "speedup_e2e": self.e2e_speedup(),
                "committed_tokens_differ_from_single": self.differ_from_single,
                "committed_tokens_differ_from_greedy": self.differ_from_greedy}

    def table(self) -> str:
        one, many = self.single, self.sharded
        lines = [f"{self.workload}: {self.requests} requests, batch capacity {self.max_active} per {self.unit}, "
                 f"{self.backend}, median of {len(many)} runs after a warm-up",
                 f"{'run':<10} {'wall ms':>10} {'tokens/s':>13} {'end-to-end ms':>14}"]
        for label, rs in ((f"1 {self.unit}", one), (f"{self.gpus} {self.unit}s", many)):
            lines.append(f"{label:<10} {self._median(rs, 'wall_ms'):>10.3f} {self._median(rs, 'tokens_per_s'):>13,.0f} "
                         f"{self._median(rs, 'e2e_ms'):>14.1f}")
        lines.append(f"speedup: {self.speedup():.2f}x tokens/s (by the slowest {self.unit}'s wall), "
                     f"{self.e2e_speedup():.2f}x end to end through Ray")
        last = many[-1]
        lines.append(f"per {self.unit} (last run):")
        lines.extend("  " + ln for ln in last.table().splitlines())
        same = "every request" if not self.differ_from_single else f"{len(self.differ_from_single)} requests DIFFER"
        lines.append(f"committed tokens equal to the 1-{self.unit} run's: {same}")
        if self.differ_from_greedy is not None:
            g = "every request" if not self.differ_from_greedy else f"{len(self.differ_from_greedy)} requests DIFFER"
            lines.append(f"committed tokens equal to plain greedy decoding's: {g}")
        return "\n".join(lines)

    def markdown(self) -> str:
        rows = ["| run | wall ms (median) | tokens/s | end-to-end ms |", "| --- | --- | --- | --- |"]
        for label, rs in ((f"1 {self.unit}", self.single), (f"{self.gpus} {self.unit}s", self.sharded)):
            rows.append(f"| {label} | {self._median(rs, 'wall_ms'):.3f} | {self._median(rs, 'tokens_per_s'):,.0f} | "
                        f"{self._median(rs, 'e2e_ms'):.1f} |")
        return "\n".join(rows)

    @property
    def identical(self) -> bool:
        return not self.differ_from_single and not self.differ_from_greedy


def bench_sharded(pool: ShardPool, workload, repeats: int = 3, timeout: float = 120.0,
                  check_greedy: bool = True) -> ShardedBench:
    """One worker against all of the pool's, on the same workload: a warm-up each, then `repeats`
    timed runs each; committed tokens compared with each other and with greedy decoding."""
    n = len(pool.actors)
    bench = ShardedBench(workload.name, len(workload.inputs), workload.config.max_active, n, pool.backend)
    pool.run(workload, shards=n, timeout=timeout)  # warm-up: every worker compiles and loads the kernel
    for _ in range(repeats + 1):
        bench.single.append(pool.run(workload, shards=1, timeout=timeout))
    bench.single = bench.single[1:]
    for _ in range(repeats):
        bench.sharded.append(pool.run(workload, shards=n, timeout=timeout))
    program = pool.compiled.program
    bench.differ_from_single = committed_differences(program, bench.single[-1].result, bench.sharded[-1].result)
    if check_greedy:
        bench.differ_from_greedy = greedy_differences(pool.compiled, workload.params, bench.sharded[-1].result)
    return bench

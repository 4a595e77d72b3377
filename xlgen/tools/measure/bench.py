"""`xlgen bench`: the mega-kernel against the baselines generated from the same IR.

Every variant runs the same stage code on the same workload in one process:
- mega-deterministic / mega-fast: the persistent kernel, one launch;
- host-loop: one kernel per stage per round, host sync and flag read-back each round;
- graph: one round captured as a CUDA graph and replayed, host check between replays.
Variants must produce identical output (checked: the declared `output`, or the whole
final request state, for fast mode; traces and state for the others). Times are host wall-clock from
the first launch to the host seeing completion (what a serving loop waits),
median over repeats after a warm-up, with min and max.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from dataclasses import asdict, dataclass, field


from ..check.diff import committed_output_fields, compare, compare_results
from ..pipeline.metrics import output_count
from ...runtime.sim import RunResult

VARIANTS = ("mega-deterministic", "mega-fast", "host-loop", "graph")
_MODE = {"mega-deterministic": "deterministic", "mega-fast": "fast", "host-loop": "host-loop", "graph": "graph",
         "mega-timeline": "deterministic"}  # mega-timeline: the deterministic kernel's timeline build


@dataclass
class VariantResult:
    variant: str
    wall_ms_median: float
    wall_ms_min: float
    wall_ms_max: float
    kernel_ms_median: float
    launches: int
    rounds: int
    tokens: int | None  # elements of the declared `output` (None: the pipeline declares none)
    identical: bool  # produces the reference's output (and, except fast mode, its traces)

    @property
    def tokens_per_s(self) -> float | None:
        if self.tokens is None:
            return None
        return self.tokens / (self.wall_ms_median / 1e3) if self.wall_ms_median else 0.0

    @property
    def launches_per_token(self) -> float | None:
        if self.tokens is None:
            return None
        return self.launches / self.tokens if self.tokens else 0.0


@dataclass
class BenchReport:
    workload: str
    requests: int
    max_active: int
    device: str
    variants: list[VariantResult]
    metrics: dict = field(default_factory=dict)
    repeats: int = 0

    def speedup(self, baseline: str, over: str = "mega-deterministic") -> float:
        by = {v.variant: v for v in self.variants}
        return by[baseline].wall_ms_median / by[over].wall_ms_median

    def to_json(self) -> dict:
        out = asdict(self)
        for v, d in zip(self.variants, out["variants"]):
            d["tokens_per_s"] = v.tokens_per_s
            d["launches_per_token"] = v.launches_per_token
        return out

    def timeline_cost(self) -> str:
        """What the timeline build costs against the kernel without it (medians of the same runs)."""
        by = {v.variant: v for v in self.variants}
        plain, timed = by["mega-deterministic"], by["mega-timeline"]
        return (f"timeline cost: wall {timed.wall_ms_median:.3f} ms against {plain.wall_ms_median:.3f} ms "
                f"({100 * (timed.wall_ms_median / plain.wall_ms_median - 1):+.1f}%), kernel "
                f"{timed.kernel_ms_median:.3f} ms against {plain.kernel_ms_median:.3f} ms "
                f"({100 * (timed.kernel_ms_median / plain.kernel_ms_median - 1):+.1f}%), medians of {self.repeats} runs")

    def table(self) -> str:
        ref = {v.variant: v for v in self.variants}.get("mega-deterministic")
        lines = [f"{self.workload}: {self.requests} requests, batch capacity {self.max_active}, {self.device}",
                 f"{'variant':<19} {'wall ms (min-max)':>22} {'vs mega':>8} {'tokens/s':>11} {'launch/tok':>10} "
                 f"{'rounds':>6} {'same':>5}"]
        for v in self.variants:
            ratio = v.wall_ms_median / ref.wall_ms_median if ref else float("nan")
            lines.append(f"{v.variant:<19} {v.wall_ms_median:>9.3f} ({v.wall_ms_min:.3f}-{v.wall_ms_max:.3f})"
                         f" {ratio:>7.1f}x {_num(v.tokens_per_s, '.0f'):>11} {_num(v.launches_per_token, '.4f'):>10} "
                         f"{v.rounds:>6} {'yes' if v.identical else 'NO':>5}")
        for key, value in self.metrics.items():
            lines.append(f"  {key}: {value}")
        return "\n".join(lines)

    def markdown(self) -> str:
        ref = {v.variant: v for v in self.variants}.get("mega-deterministic")
        rows = ["| variant | wall ms median (min–max) | × mega-kernel | tokens/s | launches/token | rounds | identical |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for v in self.variants:
            ratio = v.wall_ms_median / ref.wall_ms_median if ref else float("nan")
            rows.append(f"| {v.variant} | {v.wall_ms_median:.3f} ({v.wall_ms_min:.3f}–{v.wall_ms_max:.3f}) | "
                        f"{ratio:.1f} | {_num(v.tokens_per_s, ',.0f')} | {_num(v.launches_per_token, '.4f')} | {v.rounds} | "
                        f"{'yes' if v.identical else 'NO'} |")
        return "\n".join(rows)


def _num(value, spec: str) -> str:
    """A number in a table; '-' for one the pipeline's declarations do not give (no `output`)."""
    return "-" if value is None else format(value, spec)


def run_metrics(result: RunResult, max_active: int) -> dict:
    """Outcomes, records by kind and slot utilisation of a deterministic run (xlgen.tools.pipeline.metrics)."""
    from ..pipeline.metrics import run_counts, slot_utilisation

    c = run_counts(result)
    u = slot_utilisation(result, max_active)
    return {"slot_utilisation": u.fraction, "busy_request_rounds": u.busy, "failed_requests": c.failed,
            "runtime_errors": c.runtime_errors, "watchdog_stops": c.watchdog, "trace_records": c.trace_records,
            "done_records": c.done_records, "error_records": c.error_records}


def pipeline_metrics(compiled, workload, result: RunResult) -> dict:
    """What the pipeline's declarations and companion give for a run: its declared metrics,
    output elements, trace-based timing (latency; TTFT and inter-token latency with `output`
    and `progress`, in rounds and, from the GPU's round timestamps, in µs) and the
    companion's @metrics."""
    from ..pipeline.companion import Run, params_by_name
    from ..pipeline.metrics import collect_metrics

    run = Run(compiled.program, result, params_by_name(compiled.sim_module(), workload.params), workload.name)
    return collect_metrics(compiled.program, result, workload.config.max_active, run,
                           result.extra.get("round_end_ns"))


def run_bench(compiled, workload, repeats: int = 5, variants=VARIANTS, timeout: float = 120.0,
              timeline: bool = False) -> BenchReport:
    """Every variant in turn, `repeats` timed runs each after a warm-up. With `timeline`,
    mega-timeline too, right after mega-deterministic (report.timeline_result: its last run)."""
    import cupy

    from ...runtime import gpu

    if timeline:
        variants = tuple(variants)
        at = variants.index("mega-deterministic") + 1 if "mega-deterministic" in variants else 0
        variants = variants[:at] + ("mega-timeline",) + variants[at:]
    reference = None
    timeline_result = None
    results = []
    for variant in variants:
        walls, kernels, last = [], [], None
        for i in range(repeats + 1):
            extra = {"timeline": True} if variant == "mega-timeline" else {}
            last = gpu.run(compiled, workload.params, workload.inputs, workload.config, mode=_MODE[variant],
                           timeout=timeout, **extra)
            if i > 0:  # the first run is a warm-up (module load, graph capture, allocator)
                walls.append(last.extra["timing"].wall_ms)
                kernels.append(last.extra["timing"].kernel_ms)
        if reference is None:
            reference = last
        if variant == "mega-timeline":
            timeline_result = last
        same = (compare_results(compiled.program, reference, last, committed_output_fields(compiled.program))
                if variant == "mega-fast"
                else compare(compiled.program, reference, last)) is None
        tokens = output_count(compiled.program, last)  # the declared output's elements (None: none declared)
        results.append(VariantResult(variant, statistics.median(walls), min(walls), max(walls),
                                     statistics.median(kernels), last.extra["timing"].launches, last.rounds,
                                     tokens, same))
    metrics = {}
    if reference is not None:
        metrics.update(run_metrics(reference, workload.config.max_active))
        metrics.update(pipeline_metrics(compiled, workload, reference))
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    device = name.decode() if isinstance(name, bytes) else str(name)
    report = BenchReport(workload.name, len(workload.inputs), workload.config.max_active, device, results, metrics,
                         repeats)
    report.reference_result = reference  # the deterministic run the others are compared with (not in to_json)
    report.timeline_result = timeline_result  # mega-timeline's last run (not in to_json)
    return report


def save(report: BenchReport, path) -> None:
    from ...core.files import write_atomically

    write_atomically(Path(path), json.dumps(report.to_json(), indent=2))

"""Commands that run a pipeline: sim, diff, run, bench, demo."""

from __future__ import annotations
import sys
from pathlib import Path
import click
from ..tools.progress import progress_bar
from ..tools.pipeline import tool_options as tools
from ..tools.pipeline.tool_options import INVARIANTS_OPTION, report_options
from .group import BACKENDS, SourceFile, EXIT_HANG, EXIT_MISMATCH, EXIT_OK, EXIT_REQUESTS_FAILED, _friendly, main
from .launch import AsciiInt, Seconds, _GPUS_OPTIONS, _SIM_TIMEOUT, _check_output_path, _check_show, _check_timeline_path, _json_doc, _json_results, _prepare, _print_metrics, _requests_failed, _run_backend, _sharded, _show_value, _summary, _timeline_option, _workload_options, _write_timeline


@main.command(epilog="""\b
Examples:
  xlgen sim stages/xl_spec.xl -w small              # a bundled workload
  xlgen sim my.xl -w my_requests.json --trace      # print every trace record
  xlgen sim examples/token_budget/token_budget.xl -w examples/token_budget/requests.json --show tier,waited
  xlgen sim examples/token_budget/token_budget.xl --param budget=16 --report budget
  xlgen sim stages/xl_spec.xl -w kv_pressure --report kv               # the KV cache's residency report
  xlgen sim stages/xl_spec.xl -w kv_pressure --plot kv=kv.png          # KV occupancy per round
  xlgen sim xl_spec -w small --json sim.json       # the bundled pipeline by name; results as JSON
""")
@click.argument("file", type=SourceFile(bundled=True))
@_workload_options
@click.option("--show", default=None, help="Comma-separated request fields to print per request.")
@click.option("--trace", "show_trace", is_flag=True, help="Print every trace record.")
@report_options
@INVARIANTS_OPTION
@_SIM_TIMEOUT
@_friendly
@_json_results("sim")
def sim(file, workload_name, count, max_active, param_overrides, show, show_trace, reports, plots, kv_report,
        kv_plot, check_invariants, sim_timeout=None):
    """Run FILE's simulator (the executable specification) on a workload.

    One line per request: its status (done, error, watchdog), `ended` (the round in
    which it finished or failed) and the --show fields; then a summary: requests by
    outcome, records by kind (trace, done, error) and the batch's slot utilisation
    (busy request-rounds over max_active x rounds); then the metrics (those the
    pipeline declares, its output count, latency in rounds, TTFT and inter-token
    latency with `progress`, and its companion's) and the companion's invariants,
    checked after every round. Options and the workload are checked before the run.
    Exit codes: 0 every request finished without error, 1 a violated invariant, 2 usage, 3
    stopped at --timeout, 4 a request failed (docs/workloads.md, "Exit codes"). --json FILE
    writes the results as data (docs/results_json.md).
    """
    import numpy as np

    from ..tools.check.diff import describe_record
    from ..runtime import sim as engine
    from ..semantics.ops import ERR_WATCHDOG
    from ..runtime.sim import KIND_DONE, KIND_ERROR

    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    fields = _check_show(compiled, show)
    want = tools.wanted(reports, plots, kv_report, kv_plot)
    tools.check_wanted(compiled, module, workload, want, _check_output_path)
    checker = tools.invariant_checker(compiled, module, workload, check_invariants)
    observer = checker.observer if checker is not None and checker.per_round else None
    total = len(workload.inputs)
    with progress_bar(total, f"simulating {total} requests") as bar:
        last = [0]

        def progress(done, _n):
            bar.update(done - last[0])
            last[0] = done

        result = engine.run_stoppable(module, workload.params, workload.inputs, workload.config, sim_timeout,
                                      progress=progress, observer=observer)
    click.echo(f"{'req':>5} {'status':>8} {'ended':>6} " + " ".join(f"{f:>14}" for f in fields))
    table = result.record_table  # grouped by request id: each group's last row is how it ended
    ends = np.flatnonzero(np.r_[table["req_id"][1:] != table["req_id"][:-1], True]) if len(table) else []
    last_row = {int(table["req_id"][k]): int(k) for k in ends}
    for i in range(len(result.requests)):
        rec = table[last_row[i]] if i in last_row else None
        kind = None if rec is None else int(rec["kind"])
        status = {KIND_DONE: "done", KIND_ERROR: "error"}.get(kind, "?")
        if status == "error" and int(rec["words"][0]) == ERR_WATCHDOG:
            status = "watchdog"
        values = " ".join(f"{_show_value(compiled, f, result.requests[f][i]):>14}" for f in fields)
        click.echo(f"{i:>5} {status:>8} {int(rec['round']) if rec is not None else -1:>6} {values}")
        if status in ("error", "watchdog"):
            click.echo("      " + describe_record(compiled.program, result.records[last_row[i]]))
    if show_trace:
        for rec in result.records:
            click.echo(describe_record(compiled.program, rec))
    click.echo(_summary(compiled, result, workload.config.max_active))
    _print_metrics(compiled, module, workload, result)
    held = tools.finish_invariants(checker, [tools.make_run(compiled, module, workload, result)])
    tools.produce(compiled, module, workload, result, want)
    doc = _json_doc()
    if doc is not None:
        from ..tools.measure import results

        results.describe_launch(doc, compiled, module, workload)
        doc["runs"].append(results.run_entry(compiled, module, workload, result))
        doc["checks"]["invariants"] = held if checker is not None else None
    if not held:
        sys.exit(EXIT_MISMATCH)
    sys.exit(EXIT_REQUESTS_FAILED if _requests_failed(result) else EXIT_OK)


@main.command(epilog="""\b
Examples:
  xlgen diff stages/xl_spec.xl -w small                 # simulator vs CPU build (and GPU if present)
  xlgen diff stages/xl_spec.xl -w mixed --backend cpu
  xlgen diff my.xl -w my_requests.json --backend gpu,gpu-fast
  xlgen diff examples/token_budget/token_budget.xl --param budget=8 --count 40
  xlgen diff xl_spec -w small --backend cpu --json diff.json   # the bundled pipeline; results as JSON
""")
@click.argument("file", type=SourceFile(bundled=True))
@_workload_options
@click.option("--backend", "backends", default=None,
              help="Comma-separated backends to compare against the simulator: cpu, gpu, gpu-fast "
                   "(default: cpu, plus gpu when a GPU is present).")
@INVARIANTS_OPTION
@_SIM_TIMEOUT
@_friendly
@_json_results("diff")
def diff(file, workload_name, count, max_active, param_overrides, backends, check_invariants, sim_timeout=None):
    """Run FILE on the simulator and other backends and compare their traces bit for bit.

    Deterministic backends must match the simulator's traces and final state
    exactly. gpu-fast (no rounds) is compared on the output the pipeline declares
    (`output FIELD[COUNT]`), or on the whole final request state. The companion's
    invariants are checked after every simulator round and on every backend's final
    state, and its reference decoder against every finished request's output.
    Exit code 0 only when everything agrees and every request finished without
    error; 1 when backends disagree, an invariant is violated or an output differs
    from the reference; 2 usage; 3 the simulator stopped at --timeout; 4 when all agree
    but a request failed (docs/workloads.md, "Exit codes"). --json FILE writes every
    backend's results and the comparisons as data (docs/results_json.md).
    """
    from ..tools.check.diff import committed_output_fields, compare, compare_results

    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    if backends is None:
        from ..runtime import gpu

        chosen = ["cpu"] + (["gpu"] if gpu.available() else [])
    else:
        chosen = [b.strip() for b in backends.split(",") if b.strip()]
        if not chosen:
            raise click.UsageError(f"--backend {backends!r}: give one or more of {', '.join(BACKENDS[1:])}")
        bad = [b for b in chosen if b not in BACKENDS[1:]]
        if bad:
            raise click.UsageError(f"--backend: unknown {', '.join(bad)} (choose from {', '.join(BACKENDS[1:])})")
        if any(b.startswith("gpu") for b in chosen):  # before the simulator runs, not after
            from ..runtime import gpu

            if not gpu.available():
                raise click.UsageError(f"--backend {backends}: the gpu backends need CuPy and an NVIDIA GPU "
                                       "(`xlgen doctor` says how to install them)")
    checker = tools.invariant_checker(compiled, module, workload, check_invariants)
    observer = checker.observer if checker is not None and checker.per_round else None
    doc = _json_doc()
    if doc is not None:
        from ..tools.measure import results

        results.describe_launch(doc, compiled, module, workload)
    reference = _run_backend("sim", compiled, workload, sim_timeout=sim_timeout, observer=observer)
    click.echo(_summary(compiled, reference, workload.config.max_active))
    runs = [tools.make_run(compiled, module, workload, reference)]
    if doc is not None:
        doc["runs"].append(results.run_entry(compiled, module, workload, reference))
    failed = False
    for backend in chosen:
        other = _run_backend(backend, compiled, workload)
        runs.append(tools.make_run(compiled, module, workload, other))
        if doc is not None:
            doc["runs"].append(results.run_entry(compiled, module, workload, other))
        click.echo(_summary(compiled, other, workload.config.max_active))
        if backend == "gpu-fast":  # schedule-dependent traces: compare the committed result
            divergence = compare_results(compiled.program, reference, other, committed_output_fields(compiled.program))
        else:
            divergence = compare(compiled.program, reference, other)
        if divergence is None:
            click.echo(f"  identical: sim == {backend}")
        else:
            failed = True
            click.echo(divergence.render())
        if doc is not None:
            doc["comparisons"].append({"reference": "sim", "backend": backend,
                                       "compared": "output" if backend == "gpu-fast" else "traces and state",
                                       "identical": divergence is None,
                                       "divergence": None if divergence is None else divergence.render()})
    invariants_held = tools.finish_invariants(checker, runs)
    reference_held = tools.reference_check(compiled, runs[0])
    if doc is not None:
        doc["checks"] = {"invariants": invariants_held if checker is not None else None,
                         "reference": reference_held}
    if not invariants_held or not reference_held:
        failed = True
    if failed:
        sys.exit(EXIT_MISMATCH)
    sys.exit(EXIT_REQUESTS_FAILED if _requests_failed(reference) else EXIT_OK)


@main.command(name="run", epilog="""\b
Examples:
  xlgen run stages/xl_spec.xl -w mixed                  # deterministic mode
  xlgen run stages/xl_spec.xl -w mixed --mode fast --timeout 30
  xlgen run stages/xl_spec.xl -w kv_pressure --report kv --plot kv=kv.png
  xlgen run stages/xl_spec.xl -w mixed --count 10000 --gpus 2       # data-parallel over 2 GPUs (Ray)
  xlgen run examples/gemv/gemv.xl --weights w.npz --team-warps 8      # 8 warps per request
  xlgen run examples/gemv/gemv.xl --weights w.npz --team-warps 16 --team-blocks 4   # 4 SMs per request
  xlgen run xl_spec -w mixed --json run.json           # the bundled pipeline; results as JSON
  xlgen run xl_spec -w mixed --timeline t.json         # the kernel's timeline: t.json (Perfetto), t.png
""")
@click.argument("file", type=SourceFile(bundled=True))
@_workload_options
@click.option("--mode", type=click.Choice(["deterministic", "fast"]), default="deterministic", show_default=True)
@click.option("--timeout", type=Seconds(), default=120.0, show_default=True,
              help="Seconds to wait for the kernel before aborting it and printing a hang report.")
@click.option("--team-warps", type=click.Choice(["1", "2", "4", "8", "16", "32"]), default=None,
              help="Warps per request (deterministic mode): a block of W warps serves each request, its lanes "
                   "loops spread over them (docs/gpu.md). Default $XLGEN_TEAM_WARPS, else the runtime's choice: "
                   "16 at small batches for programs whose lanes loops hold reductions, else 1.")
@click.option("--team-blocks", type=click.Choice(["1", "2", "4", "8"]), default=None,
              help="Blocks per request (deterministic mode, with --team-warps of 2 or more): a thread-block "
                   "cluster on as many SMs serves each request (docs/gpu.md). Default $XLGEN_TEAM_BLOCKS, else the "
                   "runtime's choice: 8 where the batch's clusters fit half the SMs, for programs whose lanes loops "
                   "hold reductions, else 1.")
@report_options
@_timeline_option
@_GPUS_OPTIONS
@_friendly
@_json_results("run")
def run_gpu(file, workload_name, count, max_active, param_overrides, mode, timeout, team_warps, team_blocks, reports, plots,
            kv_report, kv_plot, timeline_path, gpus=None, address=None):
    """Run FILE's persistent mega-kernel on the GPU (one launch for the whole workload).

    --report and --plot (the companion's) need deterministic mode: in fast mode a
    trace record carries its request's own iteration, not a round of the whole batch.
    --gpus N shards the requests over N GPUs (round-robin by request id; a
    mega-kernel and a KV pool per GPU; docs/sweep.md) and prints per-GPU and
    total tokens/s. --timeline FILE.json records where the kernel's time went (docs/gpu.md,
    "Timeline"; one GPU). Exit codes: 0 every request finished without error, 2 usage,
    3 stopped at --timeout (a hang), 4 a request failed (docs/workloads.md, "Exit codes").
    """
    want = tools.wanted(reports, plots, kv_report, kv_plot)
    if mode == "fast" and want:
        raise click.UsageError("--report and --plot (and --kv-report, --kv-plot) need --mode deterministic "
                               "(fast-mode traces have no batch-wide rounds)")
    if gpus is not None and want:
        raise click.UsageError("--report and --plot report one run's state; with --gpus each GPU has its own")
    if gpus is None and address is not None:
        raise click.UsageError("--address joins a Ray cluster for --gpus; give --gpus N too")
    for flag, value in (("--team-warps", team_warps), ("--team-blocks", team_blocks)):
        if value is not None and (mode != "deterministic" or gpus is not None):
            raise click.UsageError(f"{flag} runs in --mode deterministic on one GPU (not with --mode fast or --gpus)")
    if team_blocks not in (None, "1") and team_warps == "1":
        raise click.UsageError("--team-blocks needs blocks of several warps: give --team-warps 2 or more")
    if timeline_path is not None and gpus is not None:
        raise click.UsageError("--timeline records one kernel on one GPU; leave out --gpus")
    _check_timeline_path(timeline_path)
    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    if gpus is not None:
        run = _sharded(lambda pool: pool.run(workload, timeout=timeout), compiled, file, gpus,
                       "gpu" if mode == "deterministic" else "gpu-fast", address)
        click.echo(_summary(compiled, run.result))
        click.echo(run.table())
        _json_run(compiled, module, workload, run.result)
        sys.exit(EXIT_REQUESTS_FAILED if _requests_failed(run.result) else EXIT_OK)
    tools.check_wanted(compiled, module, workload, want, _check_output_path)
    result = _run_backend("gpu" if mode == "deterministic" else "gpu-fast", compiled, workload, timeout,
                          team_warps=int(team_warps) if team_warps is not None else None,
                          timeline=timeline_path is not None,
                          team_blocks=int(team_blocks) if team_blocks is not None else None)
    timing = result.extra["timing"]
    click.echo(_summary(compiled, result, workload.config.max_active))
    click.echo(f"kernel: {timing.kernel_ms:.3f} ms, grid {timing.grid} x {timing.threads} threads, "
               f"{timing.barriers} grid barriers" + (" (timeline build)" if timeline_path is not None else ""))
    if timeline_path is not None:
        _write_timeline(timeline_path, compiled, workload, result)
    _print_metrics(compiled, module, workload, result, result.extra.get("round_end_ns"))
    tools.produce(compiled, module, workload, result, want)
    _json_run(compiled, module, workload, result)
    sys.exit(EXIT_REQUESTS_FAILED if _requests_failed(result) else EXIT_OK)


def _json_run(compiled, module, workload, result) -> None:
    """With --json: the pipeline, the workload and this run."""
    doc = _json_doc()
    if doc is not None:
        from ..tools.measure import results

        results.describe_launch(doc, compiled, module, workload)
        doc["runs"].append(results.run_entry(compiled, module, workload, result))


DEFAULT_DEMO = "xl_spec"  # `xlgen demo`: the bundled pipeline's demo
REAL_DEMO = "byte_spec"  # `xlgen demo --real`: the bundled real model pair's (the README's command)


def _name_value(ctx, param, values):
    out = []
    for item in values:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise click.BadParameter(f"{item!r}: give NAME=VALUE", ctx, param)
        out.append((name.strip(), value))
    return out


@main.command(epilog="""\b
Examples:
  xlgen demo                          # the bundled pipeline's demo: writes xlgen-demo/block_sizes.png
  xlgen demo -w small -o /tmp/demo    # a quicker run (-w W is --arg workload=W)
  xlgen demo --no-gpu
  xlgen demo byte_spec                # the real model pair: writes xlgen-demo/real_block_sizes.png
  xlgen demo --real                   # the same (--real names byte_spec)
  xlgen demo --real --prompts code,random_0 -n 32     # some prompts (names, kinds, indices), fewer tokens
  xlgen demo my_pipeline.xl --arg rounds=8            # your pipeline's demo (its companion's @demo)
""")
@click.argument("pipeline", type=SourceFile(bundled=True), required=False)
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("xlgen-demo"),
              show_default=True, help="Where the demo writes its plots.")
@click.option("--gpu/--no-gpu", "use_gpu", default=None, help="Also run the GPU (default: when one is present).")
@click.option("-a", "--arg", "demo_args", multiple=True, metavar="NAME=VALUE", callback=_name_value,
              help="An argument of the pipeline's demo (a parameter of its @demo function; repeatable).")
@click.option("--real", is_flag=True,
              help="PIPELINE = byte_spec: the real byte-level model pair (models/bytes_pair/, docs/models.md): "
                   "diff-test the backends on a short run, then plain greedy and speculative decoding (ASBS) of the "
                   "bundled prompts on the GPU (else the CPU build), compared with PyTorch's greedy tokens; "
                   "acceptance per prompt kind; real_block_sizes.png, and real_policy_trajectories.png (ASBS and "
                   "the cost policy, with and without KV pressure).")
@click.option("-w", "--workload", "workload_name", default=None, metavar="W",
              help="= --arg workload=W: a workload JSON file or a bundled workload name (the bundled demo: mixed).")
@click.option("--prompts", "prompt_selection", default=None, metavar="LIST",
              help="= --arg prompts=LIST: the real pair's prompts, by name, kind or index, comma-separated "
                   "(default: all 8).")
@click.option("-n", "--new-tokens", "n_new", default=None, metavar="N",
              help="= --arg new_tokens=N: the real pair's new tokens per prompt (default 128: PyTorch's recorded "
                   "128 are compared).")
@_friendly
def demo(pipeline, out_dir, use_gpu, demo_args, real, workload_name, prompt_selection, n_new):
    """Run PIPELINE's demo, the @demo function its companion module declares (docs/language.md,
    "The companion module"): PIPELINE is a file or a bundled pipeline's name; without one, the
    bundled speculative-decoding pipeline (xl_spec): build, simulate, diff-test, summarise, plot.

    --real runs byte_spec's demo instead: the real byte-level model pair, a 4-layer target
    verifying a 1-layer draft's blocks, both inside the mega-kernel. A pipeline whose companion
    declares no demo is a usage error. Exit codes: 0 what the demo checked agreed (for the
    real pair: backends identical, speculative = plain greedy, and PyTorch's tokens reproduced;
    a difference only where PyTorch's own top-1 margin is below 1e-4 is float32 noise and
    passes); 1 otherwise; 2 usage.
    """
    from ..core.resources import bundled_pipelines
    from ..tools.demo import declared

    if real and pipeline is not None:
        raise click.UsageError(f"--real names the bundled pipeline {REAL_DEMO}; give PIPELINE or --real, not both")
    if use_gpu:
        from ..runtime import gpu

        if not gpu.available():
            raise click.UsageError("--gpu needs CuPy and an NVIDIA GPU (`xlgen doctor` says how to install them); "
                                   "--no-gpu runs the simulator and the CPU build only")
    if pipeline is None:
        name = REAL_DEMO if real else DEFAULT_DEMO
        pipeline = bundled_pipelines().get(name)
        if pipeline is None:
            raise click.UsageError(f"the bundled pipeline {name} is not installed (stages/{name}.xl)")
    shorthands = [("workload", workload_name), ("prompts", prompt_selection), ("new_tokens", n_new)]
    given = [(name, value) for name, value in shorthands if value is not None] + list(demo_args)
    try:
        agreed = declared.run(pipeline, out_dir, use_gpu, given)
    except declared.DemoUsage as exc:
        raise click.UsageError(exc.message) from None
    sys.exit(EXIT_OK if agreed else EXIT_MISMATCH)


@main.command(epilog="""\b
Examples:
  xlgen bench stages/xl_spec.xl -w mixed
  xlgen bench stages/xl_spec.xl -w mixed --repeats 10 --markdown bench.md
  xlgen bench xl_spec -w mixed --json bench.json      # the bundled pipeline; results as JSON
  xlgen bench stages/xl_spec.xl -w kv_pressure          # with the companion's KV cache metrics
  xlgen bench stages/xl_spec.xl -w mixed --count 10000 --gpus 2 --json gpus.json   # 1 GPU vs 2
  xlgen bench xl_spec -w mixed --timeline t.json       # + the timeline build, its cost, its trace
""")
@click.argument("file", type=SourceFile(bundled=True))
@_workload_options
@click.option("--repeats", type=AsciiInt(1, 10_000), default=5, show_default=True,
              help="Timed runs per variant (after a warm-up), 1..10000.")
@click.option("--markdown", "md_path", type=click.Path(path_type=Path), default=None, help="Write a markdown table.")
@_timeline_option
@_GPUS_OPTIONS
@_friendly
@_json_results("bench")
def bench(file, workload_name, count, max_active, param_overrides, repeats, md_path, timeline_path, gpus=None,
          address=None):
    """Time the mega-kernel against a host-launched loop and CUDA-graph replay built from the same IR (GPU).

    The report includes the batch's slot utilisation (busy request-rounds over
    max_active x rounds) and the requests that failed. With --gpus N: the
    deterministic mega-kernel on one GPU against the requests sharded over N GPUs
    (per-GPU and total tokens/s; committed tokens checked equal to the 1-GPU run's
    and to plain greedy decoding's). --timeline FILE.json adds the variant
    mega-timeline (the deterministic kernel built with its timeline: the line after the
    table says what it costs) and writes its last run's timeline (docs/gpu.md, "Timeline").
    Exit codes: 0 all variants agree and every
    request finished, 1 a variant disagrees, 2 usage, 3 stopped at the timeout (a
    hang), 4 a request failed (docs/workloads.md, "Exit codes"). --json FILE writes
    the report, the reference run's per-request results and every metric as data
    (schema xlgen.result/1, docs/results_json.md; the report itself under "bench").
    """
    from ..tools.measure.bench import run_bench
    from ..core.files import write_atomically
    from ..runtime import gpu

    _check_output_path(md_path, "--markdown")
    if gpus is None and address is not None:
        raise click.UsageError("--address joins a Ray cluster for --gpus; give --gpus N too")
    if timeline_path is not None and gpus is not None:
        raise click.UsageError("--timeline records one kernel on one GPU; leave out --gpus")
    _check_timeline_path(timeline_path)
    compiled, module, workload = _prepare(file, workload_name, count, max_active, param_overrides)
    if gpus is not None:
        from ..tools.measure.multigpu import bench_sharded

        report = _sharded(lambda pool: bench_sharded(pool, workload, repeats=repeats), compiled, file, gpus, "gpu",
                          address)
        click.echo(report.table())
        _json_bench(compiled, module, workload, report, report.sharded[-1].result if report.sharded else None)
        if md_path:
            write_atomically(md_path, report.markdown() + "\n")
        if not report.identical:
            sys.exit(EXIT_MISMATCH)
        sys.exit(EXIT_REQUESTS_FAILED if _requests_failed(report.sharded[-1].result) else EXIT_OK)
    if not gpu.available():
        raise click.UsageError("xlgen bench needs CuPy and an NVIDIA GPU (`xlgen doctor` says how to install them)")
    try:
        report = run_bench(compiled, workload, repeats=repeats, timeline=timeline_path is not None)
    except gpu.HangError as exc:
        click.echo(exc.report, err=True)
        sys.exit(EXIT_HANG)
    click.echo(report.table())
    if timeline_path is not None:
        click.echo(report.timeline_cost())
        _write_timeline(timeline_path, compiled, workload, report.timeline_result, {"bench": report.timeline_cost()})
    _json_bench(compiled, module, workload, report, getattr(report, "reference_result", None))
    if md_path:
        write_atomically(md_path, report.markdown() + "\n")
    if not all(v.identical for v in report.variants):
        sys.exit(EXIT_MISMATCH)
    sys.exit(EXIT_REQUESTS_FAILED if report.metrics.get("failed_requests") else EXIT_OK)


def _json_bench(compiled, module, workload, report, result) -> None:
    """With --json: the bench report (every variant's timings, the metrics) and the reference run."""
    doc = _json_doc()
    if doc is not None:
        from ..tools.measure import results

        results.describe_launch(doc, compiled, module, workload)
        doc["bench"] = report.to_json()
        if result is not None:
            doc["runs"].append(results.run_entry(compiled, module, workload, result))
        if hasattr(report, "variants"):
            doc["comparisons"] = [{"reference": "mega-deterministic", "backend": v.variant, "identical": v.identical,
                                   "compared": "output" if v.variant == "mega-fast" else "traces and state",
                                   "divergence": None} for v in report.variants]
        else:  # --gpus N: the sharded run's committed tokens against the 1-GPU run's
            doc["comparisons"] = [{"reference": "1 GPU", "backend": f"{report.gpus} GPUs",
                                   "identical": report.identical, "compared": "output", "divergence": None}]


@main.command(epilog="""\b
Examples:
  xlgen run xl_spec -w mixed --timeline t.json      # record: t.json (Chrome trace) and t.png (SM by time)
  xlgen profile t.json                              # where the kernel's time went
  xlgen profile t.json --plot zoom.png --window 500:600     # the chart of 100 µs of it
""")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), default=None, metavar="PNG",
              help="Also draw the SM-by-time chart (of --window only, when given).")
@click.option("--window", default=None, metavar="FROM:TO",
              help="With --plot: the µs since the kernel's first event to draw, e.g. 500:600.")
@_friendly
def profile(file, plot_path, window):
    """Summarise a kernel timeline (from `xlgen run|bench --timeline FILE.json`) as a table.

    One row per kind of event, summed over every team (a warp, or a team of warps): each
    request's phase 1 and inside it each stage; the barrier wait (arrival to release:
    waiting for the slowest team, and for phase 2); phase 2 (block 0) and inside it each
    arbiter or collective stage, the retire checks and admission; in fast mode the lock wait;
    and idle, a team's share of the kernel's span that no event covers. The trace is checked
    first (valid, nested, monotonic). Exit codes: 0, 2 not a timeline (or unreadable).
    """
    from ..tools.measure import timeline

    span = None
    if window is not None:
        try:
            span = tuple(float(x) for x in window.split(":"))
        except ValueError:
            span = ()
        if plot_path is None or len(span) != 2 or not 0 <= span[0] < span[1] < float("inf"):
            raise click.UsageError(f"--window {window}: give FROM:TO in µs, FROM < TO, with --plot")
    _check_output_path(plot_path, "--plot")
    try:
        trace = timeline.read(file)
    except timeline.TimelineError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(timeline.profile(trace).table())
    if plot_path is not None:
        timeline.plot(trace, plot_path, window=span)
        click.echo(f"SM by time: {plot_path}")

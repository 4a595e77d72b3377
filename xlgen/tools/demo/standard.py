"""The standard demo: a pipeline end to end, in one command (`Demo.standard`, what the
bundled pipeline's `@demo` runs).

Builds the pipeline, simulates a workload, diff-tests the CPU build (and the GPU when
present) against the simulator, prints the metrics the pipeline declares (by group, e.g.
per request class) and writes every plot its companion module registers. Nothing here
knows the bundled pipeline: it is what it shows of any pipeline with declarations and a
companion.
"""

from __future__ import annotations

import time
from pathlib import Path

import click


def run_demo(out_dir: Path, workload_name: str = "mixed", use_gpu: bool | None = None, *, source: Path,
             compiled=None) -> bool:
    from ...backends.build import load
    from ..pipeline.companion import Run, Unavailable, of_program, params_by_name
    from ..check.diff import compare
    from ..pipeline.metrics import collect_metrics, format_metrics, run_counts, slot_utilisation
    from ...core.files import output_directory, write_with
    from ...runtime import cpu, sim
    from ..pipeline.workload import load as load_workload, resolve

    compiled = compiled if compiled is not None else load(source)
    module = compiled.sim_module()
    workload = load_workload(resolve(workload_name), module)
    companion = of_program(compiled.program)
    plots = companion.of("plot") if companion else []
    # after the workload (a bad one leaves nothing behind), before the run: every plot's name writable
    output_directory(out_dir, [f"{hook.name}.png" for hook in plots])
    n = len(workload.inputs)
    click.echo(f"pipeline {compiled.name} from {source}: generated code in {compiled.dir}")
    click.echo(f"workload {workload.name}: {n} requests, batch capacity {workload.config.max_active}")

    if use_gpu is None:
        from ...runtime import gpu

        use_gpu = gpu.available()
    backends = ["cpu"] + (["gpu"] if use_gpu else [])
    steps = n + len(backends) + len(plots)
    agreed = True
    results = {}
    written = []
    from ..progress import progress_bar

    with progress_bar(steps, "working", show_eta=False) as bar:
        last = [0]

        def progress(done, _total):
            bar.update(done - last[0])
            last[0] = done

        t0 = time.perf_counter()
        reference = sim.run(module, workload.params, workload.inputs, workload.config, progress=progress)
        sim_s = time.perf_counter() - t0
        bar.update(n - last[0])
        for backend in backends:
            t0 = time.perf_counter()
            if backend == "cpu":
                results[backend] = cpu.run(compiled, workload.params, workload.inputs, workload.config)
            else:
                from ...runtime import gpu

                results[backend] = gpu.run(compiled, workload.params, workload.inputs, workload.config)
            results[backend].extra["seconds"] = time.perf_counter() - t0
            bar.update(1)
        run = Run(compiled.program, reference, params_by_name(module, workload.params), workload.name)
        for hook in plots:
            path = out_dir / f"{hook.name}.png"
            try:  # atomically, never through a link
                write_with(path, lambda tmp, hook=hook: companion.call(hook, run, tmp))
                written.append(path)
            except Unavailable as why:
                click.echo(f"plot {hook.name}: {why}", err=True)
            bar.update(1)

    click.echo("")
    click.echo(f"metrics (declared by {compiled.name} and its companion):")
    click.echo(format_metrics(compiled.program, collect_metrics(compiled.program, reference,
                                                                workload.config.max_active, run)))
    click.echo("")
    c = run_counts(reference)
    click.echo(f"simulator: {reference.rounds} rounds, {c.done} of {c.requests} requests done, {c.failed} failed; "
               f"records: {c.trace_records} trace, {c.done_records} done, {c.error_records} error; "
               f"{slot_utilisation(reference, workload.config.max_active)} ({sim_s:.2f} s)")
    for backend, result in results.items():
        divergence = compare(compiled.program, reference, result)
        status = "identical to the simulator" if divergence is None else "DIFFERS from the simulator"
        click.echo(f"{backend}: {status} ({result.extra['seconds']:.2f} s)")
        if divergence is not None:
            agreed = False
            click.echo(divergence.render())
    if not use_gpu:
        click.echo("gpu: not run (no GPU found; on a machine with one, `xlgen doctor` says which CuPy to install)")
    for path in written:
        click.echo(f"plot: {path}")
    return agreed

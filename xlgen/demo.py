"""`xlgen demo`: the bundled pipeline end to end, in one command.

Builds stages/xl_spec.xl, simulates a mixed workload, diff-tests the CPU build
(and the GPU when present) against the simulator, prints a per-profile summary
and writes a plot of block-size trajectories.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np

PROFILE_COLORS = {"CONSTANT": "#1f77b4", "STRUCTURED": "#d62728", "BURSTY": "#2ca02c"}


def run_demo(out_dir: Path, workload_name: str = "mixed", use_gpu: bool | None = None) -> bool:
    from .build import load
    from .diff import compare
    from .metrics import format_summary, run_counts, slot_utilisation, speculation_summary
    from .resources import data_dir
    from .runtime import cpu, sim
    from .workload import load as load_workload, resolve

    source = data_dir("stages") / "xl_spec.xl"
    compiled = load(source)
    module = compiled.sim_module()
    workload = load_workload(resolve(workload_name), module)
    out_dir.mkdir(parents=True, exist_ok=True)  # after the workload: a bad one leaves nothing behind
    n = len(workload.inputs)
    click.echo(f"pipeline {compiled.name} from {source}: generated code in {compiled.dir}")
    click.echo(f"workload {workload.name}: {n} requests, batch capacity {workload.config.max_active}")

    if use_gpu is None:
        from .runtime import gpu

        use_gpu = gpu.available()
    backends = ["cpu"] + (["gpu"] if use_gpu else [])
    steps = n + len(backends) + 1
    agreed = True
    results = {}
    from .cli import progress_bar

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
                from .runtime import gpu

                results[backend] = gpu.run(compiled, workload.params, workload.inputs, workload.config)
            results[backend].extra["seconds"] = time.perf_counter() - t0
            bar.update(1)
        plot_path = out_dir / "block_sizes.png"
        plotted = plot_block_sizes(compiled.program, reference, plot_path)
        bar.update(1)

    click.echo("")
    click.echo(format_summary(speculation_summary(compiled.program, reference)))
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
        click.echo("gpu: not run (no GPU found; pip install -e '.[gpu]' on a machine with one)")
    if plotted:
        click.echo(f"plot: {plot_path}")
    return agreed


def plot_block_sizes(program, result, path: Path) -> bool:
    """Block size chosen at each speculation step, against answer progress, one panel
    per acceptance profile. Returns False (and says why) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        click.echo("plot skipped: matplotlib is not installed (pip install matplotlib)", err=True)
        return False
    from .metrics import block_size_trajectories

    profiles = program.field("profile").type.members
    reqs = result.requests
    longest = reqs["token_limit"] >= np.quantile(reqs["token_limit"], 0.5)
    fig, axes = plt.subplots(1, len(profiles), figsize=(5 * len(profiles), 4), sharey=True)
    for ax, (value, name) in zip(np.atleast_1d(axes), enumerate(profiles)):
        ids = [int(i) for i in np.nonzero((reqs["profile"] == value) & longest)[0]]
        chosen = _spread_by_acceptance(ids, reqs["base_acceptance"], 4)
        for k, (i, (x, b)) in enumerate(block_size_trajectories(program, result, chosen).items()):
            alpha = float(reqs["base_acceptance"][i])
            offset = 0.12 * (k - 1.5)  # a small vertical offset keeps overlapping lines apart
            ax.step(x, b + offset, where="post", lw=1.4, label=f"req {i}: agreement {alpha:.2f}",
                    color=plt.cm.plasma(0.85 * alpha))
        ax.set_title(name.lower())
        ax.set_xlabel("answer progress (tokens committed / limit)")
        ax.set_xlim(0, 1)
        ax.set_yticks([1, 2, 4, 8])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    np.atleast_1d(axes)[0].set_ylabel("block size B chosen by ASBS")
    fig.suptitle("Adaptive speculative block sizes per request, by acceptance profile (simulator trace; lines offset slightly)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _spread_by_acceptance(ids, base, k):
    """Up to k requests whose base acceptance rates are spread over the range."""
    ordered = sorted(ids, key=lambda i: float(base[i]))
    if len(ordered) <= k:
        return ordered
    picks = np.linspace(0, len(ordered) - 1, k).round().astype(int)
    return [ordered[p] for p in picks]


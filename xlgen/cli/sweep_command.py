"""`xlgen sweep SPEC`: a study's points as Ray tasks (xlgen/tools/measure/sweep.py)."""

from __future__ import annotations
import sys
import click
from ..tools.progress import progress_bar
from .group import EXIT_OK, EXIT_REQUESTS_FAILED, EXIT_USAGE, _friendly, _path, _shown, main
from .launch import AsciiInt


@main.command(epilog="""\b
Examples:
  xlgen sweep docs/sweep_example.toml                  # a local Ray on this machine's cores
  xlgen sweep docs/sweep_example.toml -o results/      # the same command again resumes
  xlgen sweep study.toml --address auto                # join a running Ray cluster
  xlgen sweep study.toml --dry-run                     # list the points, run nothing
  xlgen sweep study.toml --serial                      # one after another, in this process, no Ray
""")
@click.argument("spec_path", metavar="SPEC", type=_path())
@click.option("-o", "--out", "out_dir", type=_path(), default=None,
              help="Results directory (default: sweep-NAME). Points with a result there are not run again.")
@click.option("--address", default=None, metavar="ADDRESS",
              help="Join the Ray cluster at ADDRESS (auto, host:6379, ray://host:10001); default: start a "
                   "local Ray. Workers need xlgen and the pipeline's files at the same paths.")
@click.option("--cpus", type=AsciiInt(1, 1 << 16), default=None,
              help="CPU slots of a local Ray: simulator and CPU-build points run this many at once "
                   "(default: the machine's cores).")
@click.option("--serial", is_flag=True, help="Run the points one after another in this process, without Ray.")
@click.option("--retry-failed", is_flag=True, help="Run again the points recorded as failed.")
@click.option("--dry-run", is_flag=True, help="Count the points, list the first 50 and which are finished; run nothing.")
@_friendly
def sweep(spec_path, out_dir, address, cpus, serial, retry_failed, dry_run):
    """Run a policy sweep described in SPEC (TOML; docs/sweep.md) as Ray tasks.

    Every combination of the spec's grid (launch parameters, workloads, backends,
    max_active, ...) is a point; simulator and CPU-build points take a CPU slot
    each, GPU points one GPU each. Results stream into OUT/results.csv and
    results.md (results.parquet with pyarrow), with the plots the spec asks for.
    A failed point is reported with its parameters and the sweep goes on. Exit
    codes: 0 every point ok, 2 a spec error or no Ray, 4 a point failed, 130
    interrupted (run the same command again to resume).
    """
    from ..tools.measure import sweep as engine

    if address and serial:
        raise click.UsageError("--serial runs in this process; it does not take --address")
    if not serial and not dry_run:
        try:
            engine.require_ray()
        except engine.RayMissing as exc:
            click.echo(f"xlgen: error: {exc}", err=True)
            sys.exit(EXIT_USAGE)
    try:
        spec = engine.load_spec(spec_path, preview=engine.DRY_RUN_PREVIEW if dry_run else None)
    except engine.SpecError as exc:
        click.echo(f"xlgen: error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    out_dir = out_dir or engine.default_out_dir(spec)
    if out_dir.exists() and not out_dir.is_dir():
        raise click.UsageError(f"--out {out_dir}: is a file; give a directory")
    if dry_run:  # the first points (a grid of 10^9 is counted, not built), and which are finished
        store = engine.ResultStore(out_dir, read_only=True) if (out_dir / engine.RESULTS_FILE).exists() else None
        for problem in store.problems if store else []:
            click.echo(f"xlgen: warning: {_shown(problem)}", err=True)
        for p in spec.points:
            state = store.rows[p.key]["status"] if store and p.key in store.rows else "to run"
            click.echo(f"{p.index:>5} {state:>7}  {engine.describe_point(p, spec.columns)}")
        more = spec.total - len(spec.points)
        click.echo(f"{spec.total:,} points" + (f" (the first {len(spec.points)} listed)" if more > 0 else ""))
        if spec.total > engine.MAX_POINTS:
            click.echo(f"xlgen: error: more than the {engine.MAX_POINTS:,} points a sweep runs: split the spec",
                       err=True)
            sys.exit(EXIT_USAGE)
        return
    bar = [None]
    counter = [0]

    def start(outcome, todo):
        for problem in outcome.problems:
            click.echo(f"xlgen: warning: {_shown(problem)}", err=True)
        where = "in this process" if serial else (f"on Ray at {address}" if address else "on a local Ray")
        click.echo(f"{spec.name}: {outcome.total} points, {outcome.skipped} finished earlier, {len(todo)} to run "
                   f"{where}; results in {_shown(out_dir)}/", err=True)
        bar[0] = progress_bar(len(todo), "sweeping")
        bar[0].__enter__()

    def arrived(row, point):
        counter[0] += 1
        bar[0].update(1)
        what = engine.describe_point(point, spec.columns)
        if row["status"] != "ok":
            click.echo(f"{chr(10) if sys.stderr.isatty() else ''}point {point.index} failed ({what}): {row['error']}",
                       err=True)
        elif not sys.stderr.isatty():
            click.echo(f"[{counter[0]}] point {point.index} ok ({what}) {row.get('seconds', 0):.2f}s", err=True)

    try:
        outcome = engine.run_sweep(spec, out_dir, address=address, cpus=cpus, serial=serial,
                                   retry_failed=retry_failed, on_result=arrived, on_start=start)
    except engine.RayStartError as exc:
        click.echo(f"xlgen: error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    finally:
        if bar[0] is not None:
            bar[0].__exit__(None, None, None)
    missing = outcome.total - outcome.ok - outcome.failed
    click.echo(f"{outcome.ran} points run in {outcome.seconds:.1f} s, {outcome.skipped} finished earlier; of "
               f"{outcome.total}: {outcome.ok} ok, {outcome.failed} failed"
               + (f", {missing} without a result (run the same command again)" if missing else ""))
    for path in outcome.files:
        click.echo(f"wrote {_shown(path)}")
    if outcome.interrupted:
        click.echo("interrupted: run the same command again to finish the sweep (finished points are kept)",
                   err=True)
        sys.exit(130)
    sys.exit(EXIT_REQUESTS_FAILED if outcome.failed or missing else EXIT_OK)

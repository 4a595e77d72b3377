"""`xlgen demo --real`: the real byte-level model pair (models/bytes_pair/) in the mega-kernel.

Builds the pipeline the pair's binding names (models/bytes_pair/pipeline.json:
stages/byte_spec.xl) and, on the bundled prompts:
1. diff-tests the backends on a short run (one prompt of each kind, a few new tokens, ASBS):
   the simulator is the reference, the CPU build (and the GPU) must reproduce its traces bit
   for bit;
2. runs plain greedy decoding of the target (no draft) and speculative decoding with ASBS, every prompt in one batch, on the GPU when there is one, else on the CPU build;
3. checks that speculative decoding commits plain greedy's tokens, and compares both with
   PyTorch's recorded greedy tokens (reference_tokens.json: agreement and top-1 margins);
4. prints acceptance and tokens per verify step per prompt and per kind, and plots the ASBS
   block-size trajectories (block size against verify step, one line per prompt, coloured by
   kind) to real_block_sizes.png;
5. plots the block-size trajectories of ASBS and the cost policy (the binding's, at the
   pipeline's default costs), each with the binding's pool and with a pool small enough for KV
   pressure, side by side (real_policy_trajectories.png, `policy_trajectories`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from . import real_pair as rp

# The diff test's run: the simulator computes every position of every layer in Python and NumPy,
# attention over all earlier positions, so its time grows with the square of the sequence (measured,
# byte_spec, one request: 16-byte prompt + 4 new tokens ~3 s, a 154-byte prompt + 4 ~40-55 s).
DIFF_TOKENS = 4  # new tokens per prompt
DIFF_PROMPT_BYTES = 16  # each prompt's first bytes


@dataclass
class Timed:
    what: str
    backend: str
    seconds: float
    tokens: int

    def line(self) -> str:
        rate = f", {self.tokens / self.seconds:,.0f} tokens/s" if self.seconds > 0 else ""
        return f"{self.what} on {self.backend}: {self.tokens} tokens in {self.seconds:.2f} s{rate}"


@dataclass
class RealDemo:
    """What run_real_demo found (the CLI prints it as it goes; tests read it)."""
    backend: str = "cpu"
    diff: dict[str, bool] = field(default_factory=dict)  # backend -> identical to the simulator
    plain: rp.PairRun | None = None
    spec: rp.PairRun | None = None
    spec_equals_plain: bool = False
    timings: list[Timed] = field(default_factory=list)
    plot: Path | None = None
    policy_plot: Path | None = None

    failed: int = 0  # requests of the main runs that failed (runtime error, watchdog)

    @property
    def ok(self) -> bool:
        agree = all(a.within_noise for run in (self.plain, self.spec) if run for a in run.agreement)
        return all(self.diff.values()) and self.spec_equals_plain and agree and not self.failed


def pick_diff_prompts(prompts: list[rp.Prompt], prompt_bytes: int | None = DIFF_PROMPT_BYTES) -> list[rp.Prompt]:
    """One prompt of each kind (the first), in the order given, cut to its first `prompt_bytes`."""
    seen: dict[str, rp.Prompt] = {}
    for p in prompts:
        seen.setdefault(p.kind, p)
    return [rp.Prompt(p.name, p.kind, p.data[:prompt_bytes] if prompt_bytes else p.data) for p in seen.values()]


def run_real_demo(out_dir: Path, selection: str | None = None, n_new: int = 128, use_gpu: bool | None = None,
                  diff_tokens: int = DIFF_TOKENS, diff_prompt_bytes: int | None = DIFF_PROMPT_BYTES, source: Path | None = None, weights_path: Path | None = None,
                  prompts_path: Path | None = None, reference_path: Path | None = None,
                  binding_path: Path | None = None, echo=click.echo) -> RealDemo:
    from xlgen.backends.build import load
    from xlgen.runtime import cpu, sim
    from xlgen.runtime.sim import LaunchConfig
    from xlgen.tools.check.diff import compare
    from xlgen.tools.progress import progress_bar

    binding = rp.load_binding(binding_path)
    prompts = rp.select_prompts(rp.load_prompts(prompts_path), selection)
    inputs = rp.request_inputs(prompts, n_new, binding)
    diff_prompts = pick_diff_prompts(prompts, diff_prompt_bytes)
    diff_inputs = rp.request_inputs(diff_prompts, diff_tokens, binding)
    reference = rp.load_reference(reference_path, binding.reference_model)
    weights = rp.load_weights(weights_path)
    source = Path(source) if source is not None else binding.pipeline_path()
    compiled = load(source)
    module = compiled.sim_module()
    program = compiled.program
    rp.check_binding(program, binding)
    from xlgen.core.files import output_directory

    # after every input was checked (a bad one leaves nothing behind), before the runs
    output_directory(out_dir, ["real_block_sizes.png", POLICY_PLOT])

    if use_gpu is None:
        from xlgen.runtime import gpu

        use_gpu = gpu.available()
    demo = RealDemo(backend="gpu" if use_gpu else "cpu")
    main_name = "the GPU (mega-kernel, deterministic)" if use_gpu else "the CPU build (no GPU found)"
    echo(f"pipeline {compiled.name} from {source}: generated code in {compiled.dir}")
    echo(f"weights {weights_path or rp.pair_file()}; {len(prompts)} prompt{'s' if len(prompts) != 1 else ''} "
         f"({', '.join(f'{k} {n}' for k, n in _kind_counts(prompts).items())}), {n_new} new tokens each; "
         f"main runs on {main_name}")

    def run_on(backend: str, params: dict, reqs: list[dict], config: LaunchConfig):
        if backend == "sim":
            return sim.run(module, params, reqs, config)
        if backend == "cpu":
            return cpu.run(compiled, params, reqs, config)
        from xlgen.runtime import gpu

        return gpu.run(compiled, params, reqs, config)

    diff_backends = ["cpu"] + (["gpu"] if use_gpu else [])
    steps = 1 + len(diff_backends) + 2 + 2
    asbs = rp.launch_params(module, weights, binding.params("speculative"))
    plain_params = rp.launch_params(module, weights, binding.params("plain"))
    config = LaunchConfig(max_active=len(prompts))
    results = {}
    with progress_bar(steps, "real pair", show_eta=False, item_show_func=lambda item: item) as bar:
        def doing(what: str) -> None:  # what the next step does, shown beside the bar
            if hasattr(bar, "render_progress"):
                bar.current_item = what
                bar.render_progress()

        diff_config = LaunchConfig(max_active=len(diff_prompts))
        doing("diff test: the simulator")
        t0 = time.perf_counter()
        reference_run = sim.run(module, asbs, diff_inputs, diff_config)
        demo.timings.append(Timed(f"diff test reference ({len(diff_prompts)} short prompts x {diff_tokens} tokens)", "sim",
                                  time.perf_counter() - t0, rp_tokens(program, reference_run)))
        bar.update(1)
        divergences = {}
        for backend in diff_backends:
            doing(f"diff test: {backend}")
            other = run_on(backend, asbs, diff_inputs, diff_config)
            divergences[backend] = compare(program, reference_run, other)
            demo.diff[backend] = divergences[backend] is None
            bar.update(1)
        for what, params in (("plain greedy", plain_params), ("speculative, ASBS", asbs)):
            doing(f"{what} on {demo.backend}")
            t0 = time.perf_counter()
            results[what] = run_on(demo.backend, params, inputs, config)
            demo.timings.append(Timed(what, demo.backend, time.perf_counter() - t0,
                                      rp_tokens(program, results[what])))
            bar.update(1)
        demo.plain = rp.summarise(program, results["plain greedy"], prompts, n_new, reference, binding)
        demo.spec = rp.summarise(program, results["speculative, ASBS"], prompts, n_new, reference, binding)
        demo.spec_equals_plain = demo.spec.answers == demo.plain.answers
        doing("plot")
        demo.plot = rp.plot_block_sizes(demo.spec.speculation, out_dir / "real_block_sizes.png",
                                        f"ASBS block size per verify step: {compiled.name}, real model pair, "
                                        f"{n_new} new tokens")
        bar.update(1)
        doing("policy trajectories")
        runs = policy_trajectories(lambda params, reqs: run_on(demo.backend, params, reqs, config), compiled, weights,
                                   binding, prompts, n_new)
        demo.policy_plot = rp.plot_policy_trajectories(runs, out_dir / POLICY_PLOT, f"Block size per verify step: "
                                                       f"ASBS and the cost policy (default costs), {n_new} new tokens")
        bar.update(1)

    echo("")
    cut = f"the first {diff_prompt_bytes} bytes of " if diff_prompt_bytes else ""
    echo(f"diff test: {cut}{len(diff_prompts)} prompts ({', '.join(p.name for p in diff_prompts)}) + {diff_tokens} "
         f"new tokens, speculative with ASBS, the simulator as the reference (it is slow: a short run):")
    for backend, divergence in divergences.items():
        echo(f"  {backend}: {'identical to the simulator' if divergence is None else 'DIFFERS from the simulator'}")
        if divergence is not None:
            echo(divergence.render())
    if not use_gpu:
        echo("  gpu: not run (no GPU found; on a machine with one, `xlgen doctor` says which CuPy to install)")
    echo("")
    echo("speculative decoding with ASBS, per prompt and kind (acceptance: accepted / drafted tokens):")
    echo(rp.format_speculation(demo.spec.speculation))
    echo("")
    if demo.spec_equals_plain:
        echo(f"speculative = plain greedy: all {len(prompts)} answers identical, token for token")
    else:
        bad = [p.name for p, a, b in zip(prompts, demo.spec.answers, demo.plain.answers) if a != b]
        echo(f"speculative DIFFERS from plain greedy for {', '.join(bad)}")
    echo("agreement with PyTorch's greedy tokens (models/bytes_pair/reference_tokens.json), plain greedy:")
    echo(rp.format_agreement(demo.plain.agreement))
    if not demo.spec_equals_plain:
        echo("speculative:")
        echo(rp.format_agreement(demo.spec.agreement))
    for what, result in results.items():
        failed = failures(program, result)
        demo.failed += len(failed)
        if failed:
            echo(f"{what}: {len(failed)} request(s) FAILED; the first: {failed[0]}")
    echo("")
    for t in demo.timings:
        echo(t.line())
    echo(f"plot: {demo.plot}")
    echo(f"policy trajectories (ASBS and the cost policy, with and without KV pressure): {demo.policy_plot}")
    return demo


def failures(program, result) -> list[str]:
    """Each failed request's error record, described (a runtime error, the watchdog)."""
    from xlgen.runtime.sim import KIND_ERROR
    from xlgen.tools.check.diff import describe_record

    return [describe_record(program, rec) for rec in result.records if rec[2] == KIND_ERROR]


def rp_tokens(program, result) -> int:
    return sum(len(a) for a in rp.committed_tokens(program, result))


def _kind_counts(prompts: list[rp.Prompt]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in prompts:
        out[p.kind] = out.get(p.kind, 0) + 1
    return out


POLICY_PLOT = "real_policy_trajectories.png"


def pressure_pool(prompts: list[rp.Prompt], n_new: int, binding: rp.Binding) -> int:
    """A KV pool (pages) of about 60% of what the prompts need at once: pressure, and evictions
    when they all run in one batch; never less than the largest request needs."""
    need = [-(-(len(p.data) + n_new + binding.headroom + 1) // binding.pool_page_size) for p in prompts]
    return max(max(need), (6 * sum(need)) // 10)


def policy_trajectories(run, compiled, weights: dict, binding: rp.Binding, prompts: list[rp.Prompt], n_new: int,
                        variants: dict[str, dict] | None = None) -> dict[str, list[rp.Speculation]]:
    """Each variant's speculation per prompt, all prompts in one launch (`run(params, inputs)`) of
    `compiled` (the pair's pipeline). Default variants: ASBS and the cost policy at the pipeline's
    default costs, each with the binding's pool and with a small one (pressure_pool; when the
    binding names the pool's parameter). A variant's committed tokens must equal the first's
    (RealPairError if not: speculation never changes the answer)."""
    if variants is None:
        variants = {"ASBS": binding.params("speculative"), "cost policy": binding.params("cost")}
        if binding.pool_param:
            pages = pressure_pool(prompts, n_new, binding)
            small = {binding.pool_param: pages}
            variants = {"ASBS": variants["ASBS"], f"ASBS, {pages}-page pool": {**variants["ASBS"], **small},
                        "cost policy": variants["cost policy"],
                        f"cost policy, {pages}-page pool": {**variants["cost policy"], **small}}
    inputs = rp.request_inputs(prompts, n_new, binding)
    out: dict[str, list[rp.Speculation]] = {}
    first = None
    for name, params in variants.items():
        result = run(rp.launch_params(compiled.sim_module(), weights, params), inputs)
        summary = rp.summarise(compiled.program, result, prompts, n_new, None, binding)
        if first is None:
            first = summary.answers
        elif summary.answers != first:
            bad = [p.name for p, a, b in zip(prompts, summary.answers, first) if a != b]
            raise rp.RealPairError(f"{name}: the answers of {', '.join(bad)} differ from {next(iter(variants))}'s")
        out[name] = summary.speculation
    return out

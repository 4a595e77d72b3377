"""byte_spec.xl's companion (`companion "byte_spec_tools.py"`): its demo, the real byte-level
model pair (models/bytes_pair/, docs/models.md) in the mega-kernel, against PyTorch.

The pair's code lives beside it, imported relatively (a companion's package is its folder):
real_pair.py (the binding of the pair to the pipeline, prompts, launch inputs, weights,
PyTorch's recorded tokens, the comparison, the block-size plot) and real_demo.py (the demo's
steps). Scripts and tests reach the same modules through the companion:

    rp = xlgen.companion.load("stages/byte_spec_tools.py").beside("real_pair")
"""

from xlgen.companion import Unavailable, demo


@demo
def real_pair_demo(ctx, prompts: str = "all", new_tokens: int = 128) -> bool:
    """`xlgen demo --real` (= `xlgen demo byte_spec`): diff-test the backends on a short run, then
    plain greedy and speculative decoding (ASBS) of the bundled `prompts` (names, kinds or
    indices, comma-separated), `new_tokens` each, on the GPU (else the CPU build), compared with
    PyTorch's greedy tokens; acceptance per prompt kind; real_block_sizes.png. True when the
    backends are identical, speculative = plain greedy and PyTorch's tokens are reproduced."""
    from . import real_demo
    from .real_pair import RealPairError

    try:
        result = real_demo.run_real_demo(ctx.out_dir, prompts, new_tokens, ctx.use_gpu, source=ctx.source,
                                         echo=ctx.echo)
    except RealPairError as exc:  # a prompt, a token count or a file of the pair that does not fit
        raise Unavailable(str(exc)) from None
    return result.ok

"""Plain greedy decoding with the synthetic target model alone: what speculative
decoding must reproduce token for token (design.md section 5, "Output equivalence").

It shares nothing with the pipeline but the model itself (the simulator's
`target_token` builtin) and the rules the bundled pipeline states for a request:

- the answer starts after the prompt's last token, `seed % vocab`
  (stages/models.xl: prompt_last_token);
- the prompt occupies positions 0..prompt_len-1, so the k-th generated token
  (k = 0, 1, ...) is at position prompt_len + k and follows the token before it
  (stages/decode.xl, stages/verify.xl);
- the answer holds at most clamp(max_new_tokens, 0, MAX_OUT) tokens, and ends
  after EOS, which is kept (stages/prefill.xl, stages/commit.xl).

    >>> greedy_tokens(seed=3, prompt_len=8, max_new_tokens=5, vocab=50, eos_token=0)
    [39, 27, 35, 9, 37]
"""

from __future__ import annotations

from .runtime.builtins import b_target_token

MAX_OUT = 512  # stages/state.xl: the capacity of out_tokens


def greedy_tokens(seed: int, prompt_len: int, max_new_tokens: int, vocab: int, eos_token: int,
                  max_out: int = MAX_OUT) -> list[int]:
    """The tokens greedy decoding with the target model commits for one request."""
    seed &= 0xFFFFFFFF  # a u32 request field
    limit = min(max(max_new_tokens, 0), max_out)
    prev = seed % vocab
    out: list[int] = []
    while len(out) < limit:
        tok = b_target_token(seed, prompt_len + len(out), prev, vocab)
        out.append(tok)
        if tok == eos_token:
            break
        prev = tok
    return out

"""token_budget.xl's companion: what the tools check and measure beyond the language
(`companion "token_budget_tools.py"`; the API: xlgen/tools/pipeline/companion.py, docs/language.md).
"""

from xlgen.companion import invariant, metrics, reference, report
from xlgen.semantics.builtins import b_hash_u32


@invariant
def budget_kept(state):
    """No round grants more model work than the budget."""
    granted = sum(state.requests[i].grant for i in state.active)
    if granted > max(state.params["budget"], 0):
        return f"{granted} tokens granted, budget {state.params['budget']}"


@invariant(each="request")
def within_bounds(request, state):
    """A request never prefills beyond its prompt nor generates beyond its limit."""
    if request.prefilled > max(request.prompt_len, 0):
        return f"prefilled {request.prefilled} of a {request.prompt_len}-token prompt"
    if request.n_out > min(max(request.max_new_tokens, 0), len(request.out)):
        return f"{request.n_out} tokens generated, limit {request.max_new_tokens}"


@invariant(at="end")
def all_work_accounted(run):
    """Every granted token was spent: the prompts plus the generated tokens."""
    reqs = run.requests
    spent = int(reqs["prefilled"].sum()) + int(reqs["n_out"].sum())
    if int(run.shared["granted_total"]) != spent:
        return f"granted {int(run.shared['granted_total'])} tokens, spent {spent}"


@reference
def expected_tokens(request, params):
    """The tokens a request generates do not depend on the schedule: a hash of (seed, position)."""
    limit = min(max(int(request["max_new_tokens"]), 0), len(request["out"]))
    seed = int(request["seed"])
    return [b_hash_u32(seed ^ b_hash_u32(k)) % params["vocab"] for k in range(limit)]


@metrics
def budget_use(run):
    """How much of the budget the run used: granted tokens over budget x rounds."""
    capacity = max(run.params["budget"], 0) * run.result.rounds
    return {"budget_use": int(run.shared["granted_total"]) / capacity if capacity else 0.0}


@report("budget")
def budget_report(run):
    """Tokens granted, the budget's use, and the requests that waited longest."""
    reqs = run.requests
    worst = sorted(range(len(reqs)), key=lambda i: -int(reqs["waited"][i]))[:3]
    waits = ", ".join(f"request {i} ({int(reqs['waited'][i])} rounds)" for i in worst)
    use = budget_use(run)["budget_use"]
    return (f"budget {run.params['budget']} tokens/round over {run.result.rounds} rounds: "
            f"{int(run.shared['granted_total'])} granted ({100 * use:.1f}% used); longest waits: {waits or 'none'}")

"""Markdown tables for docs/benchmarks.md from a sweep's bench.json (scripts/bench_sweep.py).

    python3 scripts/bench_tables.py docs/bench/bench.json
"""

import json
import sys

LABELS = {"batch": "batch {}", "gamma": "γ {}", "acceptance": "{}", "policy": "{}", "kv": "{}"}
KV_METRICS = ("kv_hit_rate", "fragmentation_ratio", "kv_misses", "kv_waits", "evictions_decode",
              "evictions_recompute", "peak_live_pages", "ttft_us_p50", "itl_us_p50")


def variants(point):
    return {v["variant"]: v for v in point["variants"]}


def sweep_table(name, points) -> str:
    rows = ["| point | mega det ms | mega fast ms | host loop ms | graph ms | host/mega | graph/mega | rounds | identical |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, point in points.items():
        v = variants(point)
        det = v["mega-deterministic"]["wall_ms_median"]
        rows.append(f"| {LABELS[name].format(key)} | {det:.3f} | {v['mega-fast']['wall_ms_median']:.3f} | "
                    f"{v['host-loop']['wall_ms_median']:.3f} | {v['graph']['wall_ms_median']:.3f} | "
                    f"{v['host-loop']['wall_ms_median'] / det:.1f}× | {v['graph']['wall_ms_median'] / det:.1f}× | "
                    f"{v['mega-deterministic']['rounds']} | "
                    f"{'yes' if all(x['identical'] for x in v.values()) else 'NO'} |")
    return "\n".join(rows)


def kv_table(points) -> str:
    rows = ["| point | " + " | ".join(KV_METRICS) + " |", "| --- |" + " --- |" * len(KV_METRICS)]
    for key, point in points.items():
        m = point["metrics"]
        cells = [f"{m[k]:.3f}" if isinstance(m.get(k), float) else str(m.get(k, "–")) for k in KV_METRICS]
        rows.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


data = json.load(open(sys.argv[1] if len(sys.argv) > 1 else "docs/bench/bench.json"))
print(data["target"]["markdown"], "\n")
for name, points in data["sweeps"].items():
    print(f"### {name}\n\n{sweep_table(name, points)}\n")
print(f"### kv metrics\n\n{kv_table(data['sweeps']['kv'])}\n")
print("empty round:", json.dumps(data.get("empty_round_us")))
print("verify:", json.dumps(data.get("verify_cost_ms")))
print("torch:", json.dumps(data.get("torch_verify_us")))
print("itl:", json.dumps(data.get("itl_us")))

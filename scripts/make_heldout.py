"""Builds models/bytes_pair/heldout_prompts.json: the held-out evaluation prompts of the byte-level pair
(issue 24), 72 prompts of 4 kinds, none of them used to train either model or the distilled draft:

  code        10 snippets of the corpus's held-out stdlib files (every 20th file: neither model trained
              on them) + 8 written here (Python, C, JavaScript, shell)
  prose       10 passages of the corpus's held-out Shakespeare texts (Henry VI part 1, Richard II)
              + 8 modern prose passages written here
  structured  18 written here: JSON, CSV, YAML, INI, XML/HTML, SQL, Makefile, logs, markdown tables,
              licence headers, HTTP, diffs (boilerplate the models never saw as such)
  random      18 seeded random byte strings (numpy PCG64, seed 2424; 32..160 bytes)

Every prompt is at most 200 bytes (prompt + 128 new tokens + a block of 8 fit max_len 512).
Deterministic: the same corpus .npz (scripts/train_models.py corpus) gives the same file.
scripts/distill_draft.py never trains on a window that shares 32 bytes with any of these prompts
(tests/test_distill.py checks it).

    python3 scripts/make_heldout.py --corpus corpus.npz -o models/bytes_pair/heldout_prompts.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MAX_BYTES = 200
SEED = 2424

WRITTEN_CODE = [
    ("py_dataclass", "from dataclasses import dataclass, field\n\n\n@dataclass\nclass Order:\n    order_id: int\n"
     "    items: list[str] = field(default_factory=list)\n    total: float = 0.0\n\n    def add(self, item, price):\n"),
    ("py_recursion", "def flatten(tree):\n    \"\"\"Yield the leaves of a nested list, left to right.\"\"\"\n"
     "    for node in tree:\n        if isinstance(node, list):\n            yield from flatten(node)\n        else:\n"),
    ("py_cli", "#!/usr/bin/env python3\nimport argparse\nimport logging\n\nlog = logging.getLogger(__name__)\n\n\n"
     "def build_parser():\n    p = argparse.ArgumentParser(prog=\"sync\")\n    p.add_argument(\"--dry-run\", "),
    ("py_exceptions", "    try:\n        with open(path, encoding=\"utf-8\") as fh:\n            data = fh.read()\n"
     "    except FileNotFoundError:\n        return None\n    except OSError as exc:\n        raise RuntimeError("),
    ("c_loop", "#include <stdio.h>\n#include <stdlib.h>\n\nint main(int argc, char **argv)\n{\n    int n = argc > 1 ? "
     "atoi(argv[1]) : 10;\n    for (int i = 0; i < n; i++) {\n        printf("),
    ("js_fetch", "async function loadUsers(url) {\n  const response = await fetch(url);\n  if (!response.ok) {\n"
     "    throw new Error(`HTTP ${response.status}`);\n  }\n  const users = await response.json();\n  return users."),
    ("sh_script", "#!/bin/sh\nset -eu\n\nfor f in \"$@\"; do\n    if [ ! -f \"$f\" ]; then\n        echo \"missing: $f\" >&2\n"
     "        exit 1\n    fi\n    "),
    ("py_test_fixture", "import pytest\n\n\n@pytest.fixture\ndef client(tmp_path):\n    db = tmp_path / \"test.db\"\n"
     "    return make_client(db)\n\n\ndef test_create(client):\n    item = client.create(name=\"a\")\n    assert "),
]

WRITTEN_PROSE = [
    ("modern_weather", "By the afternoon the rain had cleared, and the streets of the old town filled again with "
     "people. Shopkeepers pulled back their awnings, and children ran ahead of their parents toward"),
    ("modern_science", "The experiment was repeated three times with fresh samples. In each case the measured "
     "temperature rose slowly for the first hour and then, without warning, dropped by almost"),
    ("modern_letter", "Dear Margaret,\n\nThank you for your letter of the fourth, which reached me only yesterday. "
     "I was sorry to hear about the trouble with the house, and I hope that by now"),
    ("modern_news", "City officials announced on Monday that the bridge would remain closed for repairs until the "
     "end of the month. Commuters have been advised to use the ferry or"),
    ("modern_story", "She had not been back to the village in twenty years. The road was narrower than she "
     "remembered, and the chapel at the crossroads had lost its roof. When she reached the"),
    ("modern_manual", "Before you begin, make sure the device is switched off and unplugged. Remove the four "
     "screws on the back panel and lift it away carefully. You will see"),
    ("modern_history", "In the spring of 1848 revolutions broke out across much of Europe. In Paris the king "
     "abdicated within days, while in Vienna and Berlin the governments"),
    ("modern_dialogue", "\"Are you sure this is the right train?\" asked Tom.\n\"Quite sure,\" said the guard. "
     "\"It stops at every station as far as the coast.\"\n\"Then we had better"),
]

WRITTEN_STRUCTURED = [
    ("json_config", "{\n  \"name\": \"inventory-service\",\n  \"version\": \"2.4.1\",\n  \"port\": 8080,\n"
     "  \"database\": {\n    \"host\": \"localhost\",\n    \"port\": 5432,\n    \"user\": \"app\",\n    \""),
    ("json_records", "[\n  {\"id\": 1, \"name\": \"Alice\", \"active\": true},\n  {\"id\": 2, \"name\": \"Bob\", "
     "\"active\": false},\n  {\"id\": 3, \"name\": \"Carol\", \"active\": true},\n  {\"id\": 4, \"name\": "),
    ("csv_sales", "date,region,product,units,price\n2024-01-02,north,widget,12,3.50\n2024-01-02,south,widget,7,3.50\n"
     "2024-01-03,north,gadget,4,12.00\n2024-01-03,east,widget,9,3.50\n2024-01-04,"),
    ("yaml_ci", "name: build\non:\n  push:\n    branches: [main]\n  pull_request:\n\njobs:\n  test:\n"
     "    runs-on: ubuntu-latest\n    steps:\n      - uses: actions/checkout@v4\n      - name: "),
    ("ini_settings", "[server]\nhost = 0.0.0.0\nport = 8000\nworkers = 4\n\n[logging]\nlevel = INFO\n"
     "file = /var/log/app.log\n\n[cache]\nbackend = redis\n"),
    ("xml_feed", "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<catalog>\n  <book id=\"bk101\">\n"
     "    <author>Gambardella, Matthew</author>\n    <title>XML Developer's Guide</title>\n    <price>"),
    ("html_page", "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n  <meta charset=\"utf-8\">\n  <title>Home</title>\n"
     "</head>\n<body>\n  <ul class=\"nav\">\n    <li><a href=\"/\">Home</a></li>\n    <li><a href="),
    ("sql_schema", "CREATE TABLE customers (\n    id INTEGER PRIMARY KEY,\n    name TEXT NOT NULL,\n"
     "    email TEXT UNIQUE,\n    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP\n);\n\nCREATE TABLE orders (\n"),
    ("makefile", "CC = gcc\nCFLAGS = -O2 -Wall\n\nall: app\n\napp: main.o util.o\n\t$(CC) $(CFLAGS) -o app main.o "
     "util.o\n\nmain.o: main.c util.h\n\t$(CC) $(CFLAGS) -c main.c\n\n"),
    ("log_lines", "2024-03-01 12:00:01 INFO  server started on port 8080\n2024-03-01 12:00:05 INFO  GET /health 200 "
     "2ms\n2024-03-01 12:00:09 WARN  slow query 812ms\n2024-03-01 12:00:12 INFO  GET "),
    ("markdown_table", "| Name | Type | Default | Description |\n| --- | --- | --- | --- |\n"
     "| timeout | int | 30 | Seconds before a request fails |\n| retries | int | 3 | "),
    ("license_header", "# Copyright (c) 2024 The Authors. All rights reserved.\n#\n# Licensed under the Apache "
     "License, Version 2.0 (the \"License\");\n# you may not use this file except in compliance with the License.\n#"),
    ("http_request", "GET /api/v1/items?page=2 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.4.0\r\n"
     "Accept: application/json\r\nAuthorization: Bearer "),
    ("diff_patch", "--- a/app/models.py\n+++ b/app/models.py\n@@ -12,7 +12,8 @@ class User:\n     def __init__(self, "
     "name):\n         self.name = name\n-        self.age = 0\n+        self.age = None\n"),
    ("requirements", "numpy==1.26.4\npandas==2.2.1\nrequests==2.31.0\nflask==3.0.2\npytest==8.1.1\n"),
    ("dockerfile", "FROM python:3.12-slim\n\nWORKDIR /app\nCOPY requirements.txt .\nRUN pip install --no-cache-dir "
     "-r requirements.txt\nCOPY . .\n\nEXPOSE 8000\n"),
    ("numbered_list", "Steps:\n1. Open the settings menu.\n2. Select the Network tab.\n3. Enable the proxy option.\n"
     "4. Enter the proxy address.\n5. "),
    ("key_value", "id: 1001\nstatus: active\nowner: ops\n---\nid: 1002\nstatus: retired\nowner: dev\n---\nid: 1003\n"),
]


def _line_start(arr: np.ndarray, i: int) -> int:
    while i > 0 and arr[i - 1] != 10:
        i -= 1
    return i


def corpus_snippets(arr: np.ndarray, count: int, rng: np.random.Generator, kind: str) -> list[bytes]:
    """`count` snippets of `arr` (a held-out domain of the corpus): each starts at a line start at a
    seeded offset (between 5% and 95% of the text, so no Gutenberg licence header) and ends at the
    last line end within MAX_BYTES; printable ASCII with tabs and newlines only, and not mostly blank."""
    out: list[bytes] = []
    n = len(arr)
    ok = set(range(32, 127)) | {9, 10}
    for _ in range(100_000):
        if len(out) == count:
            break
        i = _line_start(arr, int(rng.integers(int(0.05 * n), int(0.95 * n))))
        raw = bytes(arr[i:i + MAX_BYTES])
        cut = raw.rfind(b"\n")
        if cut < 80:
            continue
        snippet = raw[: cut + 1]
        letters = sum(chr(b).isalpha() for b in snippet)
        if not set(snippet) <= ok or letters < 0.4 * len(snippet) or snippet.count(b"\n\n\n"):
            continue
        if kind == "code" and not any(w in snippet for w in (b"def ", b"class ", b"return", b"import", b" = ")):
            continue
        lines = snippet.splitlines()
        if kind == "code" and sum(ln.strip()[:1] in (b"'", b'"') for ln in lines) > len(lines) // 3:
            continue  # the string literals of pydoc_data/topics.py (documentation text), not code
        if any(snippet[:48] == o[:48] for o in out):
            continue
        out.append(snippet)
    else:
        raise SystemExit(f"error: only {len(out)} of {count} {kind} snippets pass the filters in 100,000 tries")
    return out


def build(corpus: dict) -> dict:
    rng = np.random.Generator(np.random.PCG64(SEED))
    prompts = []
    for j, s in enumerate(corpus_snippets(corpus["code_heldout"], 10, rng, "code")):
        prompts.append({"name": f"code_heldout_{j}", "kind": "code", "source": "corpus code_heldout", "text": s.decode()})
    for name, text in WRITTEN_CODE:
        prompts.append({"name": f"code_{name}", "kind": "code", "source": "written", "text": text})
    for j, s in enumerate(corpus_snippets(corpus["prose_heldout"], 10, rng, "prose")):
        prompts.append({"name": f"prose_heldout_{j}", "kind": "prose", "source": "corpus prose_heldout",
                        "text": s.decode()})
    for name, text in WRITTEN_PROSE:
        prompts.append({"name": f"prose_{name}", "kind": "prose", "source": "written", "text": text})
    for name, text in WRITTEN_STRUCTURED:
        prompts.append({"name": f"struct_{name}", "kind": "structured", "source": "written", "text": text})
    for j in range(18):
        n = int(rng.integers(32, 161))
        prompts.append({"name": f"random_heldout_{j}", "kind": "random", "source": f"numpy PCG64 seed {SEED}",
                        "hex": rng.integers(0, 256, n, dtype=np.uint8).tobytes().hex()})
    for p in prompts:
        size = len(bytes.fromhex(p["hex"])) if "hex" in p else len(p["text"].encode())
        assert 16 <= size <= MAX_BYTES, (p["name"], size)
    return {"about": "Held-out evaluation prompts of the byte-level pair (issue 24): code, prose, structured "
                     "boilerplate and random bytes, none used to train the target, the draft or the distilled draft "
                     "(corpus snippets come from the corpus's held-out files; the rest is written for this set or "
                     "seeded). Built by scripts/make_heldout.py; same format as prompts.json (plus 'source').",
            "prompts": prompts}


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.split("\n\n")
    ap = argparse.ArgumentParser(prog="make_heldout.py", description=doc[0], epilog=doc[-1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True, help="the corpus .npz of scripts/train_models.py corpus")
    ap.add_argument("-o", "--output", type=Path, default=ROOT / "models/bytes_pair/heldout_prompts.json")
    a = ap.parse_args(argv)
    with np.load(a.corpus) as z:
        corpus = {k: z[k] for k in ("code_heldout", "prose_heldout")}
    doc_out = build(corpus)
    a.output.write_text(json.dumps(doc_out, indent=1, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {}
    for p in doc_out["prompts"]:
        kinds[p["kind"]] = kinds.get(p["kind"], 0) + 1
    print(f"wrote {a.output}: {len(doc_out['prompts'])} prompts ({', '.join(f'{k} {v}' for k, v in kinds.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

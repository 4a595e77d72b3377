"""The core every layer shares: the typed IR (`ir`), diagnostics with `file:line:col`
(`diagnostics`), safe file reading and writing (`files`) and where the package's data
lives (`resources`).

May import: nothing of xlgen (only the standard library). Layers, lowest first: core,
semantics, frontend, backends, runtime, tools, then the CLI (tests/test_layers.py).
"""

"""Runtime support shared by generated code: exact operations, builtins, the execution engine."""

"""The `xlgen` command line. Every subcommand turns bad input into a diagnostic and an exit
code, never a traceback. `group` holds the command group and the exit codes; `launch` what
the running commands share; the commands are in `source_commands` (check, fmt, build,
graph), `run_commands` (sim, diff, run, bench, demo), `sweep_command` (sweep) and `doctor_command`
(doctor).

May import: every layer below (xlgen.core ... xlgen.tools); nothing imports it.
"""

from . import doctor_command, run_commands, source_commands, sweep_command  # noqa: F401 - they register the commands
from .group import (EXIT_HANG, EXIT_MISMATCH, EXIT_OK, EXIT_REQUESTS_FAILED, EXIT_USAGE,  # noqa: F401
                    main, run)

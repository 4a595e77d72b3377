"""`xlgen.testing`, the pytest plugin and test helpers for a user's pipeline: kept here, as
it was; the code is in xlgen.tools.check.testing."""

from .tools.check.testing import *  # noqa: F401,F403
from .tools.check.testing import assert_backends_agree  # noqa: F401

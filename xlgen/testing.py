"""`xlgen.testing`, the pytest plugin and test helpers for a user's pipeline: kept here, as
it was; the code is in xlgen.tools.testing."""

from .tools.testing import *  # noqa: F401,F403
from .tools.testing import assert_backends_agree  # noqa: F401

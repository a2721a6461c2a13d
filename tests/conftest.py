"""Suite-wide settings: hypothesis profiles.

``HYPOTHESIS_PROFILE=ci`` (set by CI) runs more examples; the default profile keeps the
inner loop quick. Deadlines are off because file-system latency on shared machines varies.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

"""The main job's user-facing error (one ``error:`` line on the console, exit status 2)."""
from __future__ import annotations


class PipelineError(RuntimeError):
    """A user-facing failure (a bad option, missing data, weights or NLTK resource) with a message saying
    what to do."""

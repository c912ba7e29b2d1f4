"""What the main job's stages hand to each other: :class:`SystemOutput` (one ranking system's test-pool
scores) and :func:`split_timings` (timings apart from configurations)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


from corpora.scoring import ScoreMatrices


@dataclass
class SystemOutput:
    """What every ranking system – classical or neural – hands to the evaluator.

    Attributes
    ----------
    name : str
        The system's name (a row of the report).
    family : str
        ``"baseline"``, ``"classical"`` or ``"neural"``.
    test : ScoreMatrices
        Its scores on the test pool.
    config : dict
        Its configuration as written to ``results.json`` (plain JSON, no timings).
    timings : dict
        Wall-clock seconds of its steps (``results.json``'s ``timings_s["systems"][name]``), kept apart
        from ``config`` so that two runs with the same numbers have the same ``systems`` block.
    every_caption : dict
        Its retrieval metrics on the test split with every caption (the CLIP_benchmark protocol,
        :func:`corpora.protocol.every_caption_pool`; :func:`experiments.evaluation_stage.every_caption_json`),
        where the run evaluates it; ``{}`` otherwise.  Metrics, not the matrix: at COCO size the matrix
        is 5,000 × 25,010.
    """

    name: str
    family: str
    test: ScoreMatrices
    config: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    every_caption: dict = field(default_factory=dict)


def split_timings(config: Mapping) -> tuple[dict, dict]:
    """``config`` without its ``"timings"`` entries (at any depth), and those entries.

    Parameters
    ----------
    config : mapping
        A system's configuration, e.g. a KCCA system's, whose ``selection`` summary holds the
        model-selection timings.

    Returns
    -------
    config : dict
        The configuration without any ``"timings"`` key.
    timings : dict
        The removed entries under the path of their parent, e.g. ``{"selection": {"fit": 1.2, ...}}``
        (empty when there were none).
    """
    rest: dict = {}
    timings: dict = {}
    for k, v in config.items():
        if k == "timings":
            timings.update(v if isinstance(v, Mapping) else {"total": v})
        elif isinstance(v, Mapping):
            rest[k], inner = split_timings(v)
            if inner:
                timings[k] = inner
        else:
            rest[k] = v
    return rest, timings

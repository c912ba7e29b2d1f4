"""What a caption states, and the exact relevance / grade of any caption for any scene.

A caption's :class:`CaptionFacts` are the *mentions* it makes (each with a shape and the attributes the
annotator stated: colour, texture, size — ``None`` = not stated), the *relations* it states between
mentions (``(i, relation, j)``: mention ``i`` is ``relation`` mention ``j``), the background if named and
the medium implied by a verb ("sits / rests / lies" → land, "floats / bobs / drifts" → water) if a verb
of that kind is used.

**The facts of a caption** (the unit counted by the grade): every stated attribute of every mention
(the shape always, plus colour / texture / size when stated), every stated relation, the background
when stated, and the medium when stated.

**Relevance and grade** (exact, documented in ``docs/teaching_set.md``).  For an assignment ``π`` of the
caption's mentions to *distinct* objects of the scene, a fact holds when the assigned object has the
stated attribute, the stated relation holds between the assigned objects (see
:mod:`corpora.teaching.scene`), the scene's background is the stated one, resp. the background's medium
is the stated medium.  A mention that cannot be assigned (more mentions than objects) makes all of its
facts fail.  With ``h*`` = the largest number of facts that hold under any assignment and ``n`` = the
number of facts:

* relevant ⇔ ``h* = n`` (every fact holds under one assignment; omitted facts never hurt);
* grade 4 ⇔ relevant; grade 3 ⇔ ``2·h* ≥ n`` (at least half hold); grade 2 ⇔ ``h* ≥ 1``; else grade 1.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from corpora.teaching.scene import (
    BACKGROUNDS, COLOURS, MAX_OBJECTS, MEDIA, MEDIUM_OF, PLACES, RELATIONS, SHAPES, SIZES, TEXTURES, Scene,
    assignments, place_holds,
)

#: Offsets of the attribute blocks in the one-hot attribute vector (shape | colour | texture | size |
#: place); scene objects are multi-hot in the place block (an object can be top and left).
_ATTR_VOCABS = (SHAPES, COLOURS, TEXTURES, SIZES, PLACES)
_ATTR_OFFSETS = np.cumsum([0] + [len(v) for v in _ATTR_VOCABS])[:-1]
N_ATTR = int(sum(len(v) for v in _ATTR_VOCABS))
_N_REL_SLOTS = MAX_OBJECTS * MAX_OBJECTS * len(RELATIONS)
_PERMS = assignments(MAX_OBJECTS, MAX_OBJECTS)


@dataclass(frozen=True)
class Mention:
    """One object mentioned by a caption; ``None`` = attribute not stated.  The shape is always stated;
    ``place`` is an absolute place in the picture ("on the left", see :data:`PLACES`)."""

    shape: str
    colour: str | None = None
    texture: str | None = None
    size: str | None = None
    place: str | None = None

    def __post_init__(self) -> None:
        for val, allowed, what in ((self.shape, SHAPES, "shape"), (self.colour, COLOURS, "colour"),
                                   (self.texture, TEXTURES, "texture"), (self.size, SIZES, "size"),
                                   (self.place, PLACES, "place")):
            if (val is not None or what == "shape") and val not in allowed:
                raise ValueError(f"Mention: unknown {what} {val!r} (allowed: {allowed})")

    @property
    def n_facts(self) -> int:
        return 1 + sum(v is not None for v in (self.colour, self.texture, self.size, self.place))

    def attrs(self) -> tuple[str | None, ...]:
        return (self.shape, self.colour, self.texture, self.size)


@dataclass(frozen=True)
class CaptionFacts:
    """The facts a caption states (see the module docstring)."""

    mentions: tuple[Mention, ...]
    relations: tuple[tuple[int, str, int], ...] = ()
    background: str | None = None
    medium: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mentions", tuple(self.mentions))
        object.__setattr__(self, "relations", tuple(tuple(r) for r in self.relations))
        if not 1 <= len(self.mentions) <= MAX_OBJECTS:
            raise ValueError(f"CaptionFacts: needs 1..{MAX_OBJECTS} mentions, got {len(self.mentions)}")
        for i, rel, j in self.relations:
            if rel not in RELATIONS:
                raise ValueError(f"CaptionFacts: unknown relation {rel!r} (allowed: {RELATIONS})")
            if not (0 <= i < len(self.mentions) and 0 <= j < len(self.mentions)) or i == j:
                raise ValueError(f"CaptionFacts: relation {(i, rel, j)} refers to bad mention indices")
        if self.background is not None and self.background not in BACKGROUNDS:
            raise ValueError(f"CaptionFacts: unknown background {self.background!r}")
        if self.medium is not None and self.medium not in MEDIA:
            raise ValueError(f"CaptionFacts: unknown medium {self.medium!r} (allowed: {MEDIA})")
        if (self.background is not None and self.medium is not None
                and MEDIUM_OF[self.background] != self.medium):
            raise ValueError(f"CaptionFacts: medium {self.medium!r} contradicts background "
                             f"{self.background!r}")

    @property
    def n_facts(self) -> int:
        return (sum(m.n_facts for m in self.mentions) + len(self.relations)
                + (self.background is not None) + (self.medium is not None))


# --------------------------------------------------------------------------------- scalar reference
def facts_holding(facts: CaptionFacts, scene: Scene) -> int:
    """``h*``: the largest number of the caption's facts that hold under one assignment of its mentions
    to distinct scene objects (brute force over assignments; the reference for the vectorised code)."""
    best = 0
    n_obj = len(scene.objects)
    for perm in assignments(len(facts.mentions), MAX_OBJECTS):
        h = 0
        for m, o in zip(facts.mentions, perm):
            if o < n_obj:
                obj = scene.objects[o]
                h += sum(v is not None and v == w for v, w in
                         zip(m.attrs(), (obj.shape, obj.colour, obj.texture, obj.size)))
                h += m.place is not None and place_holds(obj, m.place)
        for i, rel, j in facts.relations:
            if perm[i] < n_obj and perm[j] < n_obj and scene.holds(perm[i], rel, perm[j]):
                h += 1
        best = max(best, h)
    best += facts.background is not None and facts.background == scene.background
    best += facts.medium is not None and facts.medium == scene.medium
    return int(best)


def grade_from_counts(holding, n_facts):
    """Grade 1–4 from ``h*`` and ``n`` (elementwise for arrays)."""
    holding = np.asarray(holding)
    n_facts = np.asarray(n_facts)
    g = np.where(holding >= n_facts, 4, np.where(2 * holding >= n_facts, 3, np.where(holding >= 1, 2, 1)))
    return g.astype(np.int8) if g.ndim else int(g)


def relevant(facts: CaptionFacts, scene: Scene) -> bool:
    """Is every fact of the caption true of the scene under one assignment of mentions to objects?"""
    return facts_holding(facts, scene) == facts.n_facts


def grade(facts: CaptionFacts, scene: Scene) -> int:
    """Graded relevance 4 / 3 / 2 / 1 (module docstring)."""
    return int(grade_from_counts(facts_holding(facts, scene), facts.n_facts))


# --------------------------------------------------------------------------------- vectorised
class SceneArrays:
    """Scenes encoded for :func:`holding_matrix`: one-hot attributes ``(S, 3, A)``, the relation tensor
    ``(S, 3, 3, 5)``, background and medium codes."""

    def __init__(self, scenes: Sequence[Scene]):
        S = len(scenes)
        self.attrs = np.zeros((S, MAX_OBJECTS, N_ATTR), np.float32)
        self.rel = np.zeros((S, MAX_OBJECTS, MAX_OBJECTS, len(RELATIONS)), np.float32)
        self.background = np.empty(S, np.int16)
        self.medium = np.empty(S, np.int16)
        for s, sc in enumerate(scenes):
            for o, obj in enumerate(sc.objects):
                for k, (val, vocab) in enumerate(zip((obj.shape, obj.colour, obj.texture, obj.size),
                                                     _ATTR_VOCABS)):
                    self.attrs[s, o, _ATTR_OFFSETS[k] + vocab.index(val)] = 1
                for place in obj.places:
                    self.attrs[s, o, _ATTR_OFFSETS[4] + PLACES.index(place)] = 1
            self.rel[s] = sc.relation_tensor()
            self.background[s] = BACKGROUNDS.index(sc.background)
            self.medium[s] = MEDIA.index(sc.medium)
        # relation features under each assignment: relp[p][s, (i, j, r)] = rel[s, p[i], p[j], r]
        self.rel_perm = [self.rel[:, list(p)][:, :, list(p)].reshape(S, -1) for p in _PERMS]


class FactArrays:
    """Captions' facts encoded for :func:`holding_matrix`."""

    def __init__(self, facts: Sequence[CaptionFacts]):
        C = len(facts)
        self.attrs = np.zeros((C, MAX_OBJECTS, N_ATTR), np.float32)
        self.rel = np.zeros((C, _N_REL_SLOTS), np.float32)
        self.background = np.full(C, -1, np.int16)
        self.medium = np.full(C, -1, np.int16)
        self.n_facts = np.empty(C, np.int16)
        self.n_mentions = np.empty(C, np.int16)
        nr = len(RELATIONS)
        for c, f in enumerate(facts):
            for m, men in enumerate(f.mentions):
                for k, (val, vocab) in enumerate(zip(men.attrs() + (men.place,), _ATTR_VOCABS)):
                    if val is not None:
                        self.attrs[c, m, _ATTR_OFFSETS[k] + vocab.index(val)] = 1
            for i, rel, j in f.relations:
                self.rel[c, (i * MAX_OBJECTS + j) * nr + RELATIONS.index(rel)] += 1
            if f.background is not None:
                self.background[c] = BACKGROUNDS.index(f.background)
            if f.medium is not None:
                self.medium[c] = MEDIA.index(f.medium)
            self.n_facts[c] = f.n_facts
            self.n_mentions[c] = len(f.mentions)


def holding_matrix(scenes: SceneArrays, facts: FactArrays, chunk: int = 1024) -> np.ndarray:
    """``H[s, c] = h*`` for every scene × caption (int16), vectorised.

    For each mention slot ``m`` and object slot ``o`` the number of matching stated attributes is one
    matrix product of one-hot codes; for each of the 6 assignments (permutations of the 3 object slots;
    padded object slots match nothing) the holding relations are another product with the permuted
    relation tensor.  ``h*`` is the maximum over assignments plus the background and medium matches.
    Captions are processed in chunks of ``chunk`` so memory stays at ``O(S · chunk)``.
    """
    S = scenes.attrs.shape[0]
    C = facts.attrs.shape[0]
    out = np.empty((S, C), np.int16)
    for c0 in range(0, C, chunk):
        c1 = min(C, c0 + chunk)
        # A[m][o] : (S, c) attribute matches of mention m against object o
        A = [[scenes.attrs[:, o] @ facts.attrs[c0:c1, m].T for o in range(MAX_OBJECTS)]
             for m in range(MAX_OBJECTS)]
        best = None
        for p, relp in zip(_PERMS, scenes.rel_perm):
            h = A[0][p[0]] + A[1][p[1]] + A[2][p[2]] + relp @ facts.rel[c0:c1].T
            best = h if best is None else np.maximum(best, h, out=best)
        best += (scenes.background[:, None] == facts.background[None, c0:c1])
        best += (scenes.medium[:, None] == facts.medium[None, c0:c1])
        out[:, c0:c1] = np.rint(best).astype(np.int16)
    return out


def _take(obj, cls, idx: np.ndarray, names: tuple[str, ...]):
    new = cls.__new__(cls)
    for n in names:
        setattr(new, n, getattr(obj, n)[idx])
    return new


def _scene_take(self: SceneArrays, idx: np.ndarray) -> SceneArrays:
    """Rows ``idx`` of the encoded scenes."""
    new = _take(self, SceneArrays, idx, ("attrs", "rel", "background", "medium"))
    new.rel_perm = [r[idx] for r in self.rel_perm]
    return new


def _fact_take(self: FactArrays, idx: np.ndarray) -> FactArrays:
    """Rows ``idx`` of the encoded captions."""
    return _take(self, FactArrays, idx, ("attrs", "rel", "background", "medium", "n_facts", "n_mentions"))


SceneArrays.take = _scene_take
FactArrays.take = _fact_take

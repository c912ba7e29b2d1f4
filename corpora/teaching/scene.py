"""Scenes of the teaching set: objects, attributes, positions and the spatial predicates.

A :class:`Scene` is the ground truth of one generated image: a background and one to three
:class:`SceneObject` s, each with a shape, a colour, a fill texture, a size class and a position.  All
coordinates are *normalised*: ``x`` is a fraction of the image width, ``y`` a fraction of the height
(0 = top), ``radius`` a fraction of the image height, so one scene renders at any image size.

Spatial predicates (used both to write captions and to judge them) are defined on object centres with
wide margins so that they are never borderline:

* ``left_of(a, b)``  ⇔ ``x_b − x_a ≥ LEFT_GAP``  (0.16 of the width);
* ``right_of(a, b)`` ⇔ ``left_of(b, a)``;
* ``above(a, b)``    ⇔ ``y_b − y_a ≥ VERT_GAP``  (0.22 of the height; y grows downwards);
* ``below(a, b)``    ⇔ ``above(b, a)``;
* ``next_to(a, b)``  ⇔ ``|y_a − y_b| < VERT_GAP`` and ``LEFT_GAP ≤ |x_a − x_b| < NEXT_MAX``
  (horizontal neighbours in the same row; 0.48 of the width).

Absolute places of one object (:data:`PLACES`): ``left`` ⇔ ``x ≤ 0.33``, ``right`` ⇔ ``x ≥ 0.67``,
``top`` ⇔ ``y ≤ 0.36``, ``bottom`` ⇔ ``y ≥ 0.64``, ``middle`` ⇔ ``|x − 0.5| ≤ 0.12`` and
``|y − 0.5| ≤ 0.12``.  An object may be in two places (top and left).

Objects are placed in a few canonical layouts (pairs side by side at x = 0.27 / 0.73 in the middle row or
one above the other at y = 0.26 / 0.74 in the middle column, rows of three at x = 0.17 / 0.5 / 0.83,
triangles at x = 0.2 / 0.8 and 0.5) with a small jitter (:data:`PLACE_JITTER`, ±0.005), so every centre
difference is at least 0.04 away from every threshold even after :meth:`Scene.jittered` adds its own
layout noise (±0.015).  Which object takes which slot follows a *layout prior* (:data:`SHAPE_RANK`,
:data:`LAYOUT_PRIOR`).  The generator and the re-renderer both check
that the predicate tensor is unchanged, so facts stay true by construction *and* by verification.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import permutations

import numpy as np

SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "star", "cross", "diamond", "dog", "person")
COLOURS: tuple[str, ...] = ("red", "blue", "green", "yellow", "purple", "orange", "black", "white")
TEXTURES: tuple[str, ...] = ("plain", "striped", "dotted", "checked")
SIZES: tuple[str, ...] = ("small", "big")
BACKGROUNDS: tuple[str, ...] = ("grass", "sand", "water", "snow")
RELATIONS: tuple[str, ...] = ("left_of", "right_of", "above", "below", "next_to")
#: Absolute places in the picture ("on the left", "at the top", "in the middle").
PLACES: tuple[str, ...] = ("left", "right", "top", "bottom", "middle")
MEDIA: tuple[str, ...] = ("land", "water")
#: Skies (never described): colours that repeat the water / snow / sand grounds.
SKIES: tuple[str, ...] = ("blue", "overcast", "haze")
#: Range of the horizon (sky band height, fraction of the image height).
HORIZON = (0.27, 0.31)
#: The medium a background implies (the verbs "sits / rests / lies" vs "floats / bobs / drifts").
MEDIUM_OF: dict[str, str] = {"grass": "land", "sand": "land", "snow": "land", "water": "water"}
INVERSE: dict[str, str] = {"left_of": "right_of", "right_of": "left_of", "above": "below",
                           "below": "above", "next_to": "next_to"}
#: Object colours never drawn on a background of (nearly) the same colour.
BG_EXCLUDED_COLOURS: dict[str, frozenset[str]] = {
    "grass": frozenset({"green"}), "sand": frozenset(), "water": frozenset({"blue"}),
    "snow": frozenset({"white"}),
}
MAX_OBJECTS = 3

LEFT_GAP = 0.16
VERT_GAP = 0.22
NEXT_MAX = 0.56
#: Radius (fraction of the image height) separating "small" from "big".
SIZE_THRESHOLD = 0.17
BIG_RADIUS = (0.22, 0.23)
SMALL_RADIUS = (0.115, 0.125)
#: Canonical layouts (x, y of the slots): a pair side by side in the middle row, a pair one above the
#: other in the middle column, a row of three, a triangle (two up / one down or one up / two down), and
#: five single-object positions.  Few, fixed layouts make the spatial pyramid's cells line up across
#: images that share a description ("a red circle left of a blue square"), as scene layouts do in photos.
PAIR_COLUMNS = (0.27, 0.73)
ROW3_COLUMNS = (0.17, 0.5, 0.83)
TRIANGLE_COLUMNS = (0.2, 0.8)
ROWS = (0.26, 0.74)
MIDDLE_ROW = 0.5
SINGLE_SLOTS = ((0.5, 0.5), (0.27, 0.5), (0.73, 0.5), (0.5, 0.26), (0.5, 0.74))
PLACE_JITTER = 0.005
#: Rotation range (degrees) of the polygonal shapes.
MAX_ROTATION = 3.0
#: Extra layout noise of :meth:`Scene.jittered` (re-rendering): position, radius factor, angle (deg).
RERENDER_JITTER = (0.015, 0.06, 6.0)


@dataclass(frozen=True)
class SceneObject:
    """One object of a scene.

    ``x``, ``y``: centre as fractions of width / height; ``radius``: fraction of the height;
    ``angle``: rotation of the silhouette in degrees; ``tex_angle``: orientation of the fill pattern;
    ``flip``: mirror the silhouette (dogs face left or right).
    """

    shape: str
    colour: str
    texture: str
    size: str
    x: float
    y: float
    radius: float
    angle: float = 0.0
    tex_angle: float = 0.0
    flip: bool = False

    def __post_init__(self) -> None:
        for val, allowed, what in ((self.shape, SHAPES, "shape"), (self.colour, COLOURS, "colour"),
                                   (self.texture, TEXTURES, "texture"), (self.size, SIZES, "size")):
            if val not in allowed:
                raise ValueError(f"SceneObject: unknown {what} {val!r} (allowed: {allowed})")

    @property
    def places(self) -> tuple[str, ...]:
        """The absolute places (:data:`PLACES`) this object is in."""
        return tuple(p for p in PLACES if place_holds(self, p))


@dataclass(frozen=True)
class Scene:
    """The ground truth of one teaching-set image: a background and 1–3 objects.

    ``sky`` (``None`` or one of :data:`SKIES`) and ``horizon`` (fraction of the height) describe a band of
    sky above the ground.  The sky is never mentioned in captions and is not a fact; it is a nuisance
    whose colours repeat the grounds' (a deep-blue sky looks like water, an overcast one like snow, a
    hazy one like sand), so only the *position* of a colour tells ground from sky — the spatial
    pyramid can use that, a global histogram cannot (as with sky and sea in photographs).
    """

    background: str
    objects: tuple[SceneObject, ...]
    sky: str | None = None
    horizon: float = 0.0

    def __post_init__(self) -> None:
        if self.background not in BACKGROUNDS:
            raise ValueError(f"Scene: unknown background {self.background!r} (allowed: {BACKGROUNDS})")
        if self.sky is not None and self.sky not in SKIES:
            raise ValueError(f"Scene: unknown sky {self.sky!r} (allowed: {SKIES})")
        if not 1 <= len(self.objects) <= MAX_OBJECTS:
            raise ValueError(f"Scene: needs 1..{MAX_OBJECTS} objects, got {len(self.objects)}")
        object.__setattr__(self, "objects", tuple(self.objects))

    @property
    def medium(self) -> str:
        return MEDIUM_OF[self.background]

    def holds(self, a: int, rel: str, b: int) -> bool:
        """Does ``objects[a] rel objects[b]`` hold?"""
        return relation_holds(self.objects[a], rel, self.objects[b])

    def relation_tensor(self) -> np.ndarray:
        """``R[a, b, r]`` (bool, ``MAX_OBJECTS × MAX_OBJECTS × 5``): relation ``r`` holds from object
        ``a`` to object ``b`` (padding rows/columns for absent objects are False; ``a == b`` False)."""
        R = np.zeros((MAX_OBJECTS, MAX_OBJECTS, len(RELATIONS)), dtype=bool)
        for a, oa in enumerate(self.objects):
            for b, ob in enumerate(self.objects):
                if a != b:
                    for r, rel in enumerate(RELATIONS):
                        R[a, b, r] = relation_holds(oa, rel, ob)
        return R

    def true_relations(self, a: int, b: int) -> list[str]:
        return [rel for rel in RELATIONS if a != b and self.holds(a, rel, b)]

    def jittered(self, rng: np.random.Generator, max_tries: int = 50) -> "Scene":
        """The same scene with new layout noise (positions, radii, angles, pattern orientation) such that
        every predicate (size class, all relations) is unchanged and objects do not overlap.  Falls back
        to the unjittered scene if no valid draw is found (never happens with the default margins)."""
        dpos, drad, dang = RERENDER_JITTER
        R0 = self.relation_tensor()
        for _ in range(max_tries):
            objs = []
            for o in self.objects:
                lo, hi = (BIG_RADIUS if o.size == "big" else SMALL_RADIUS)
                r = float(np.clip(o.radius * rng.uniform(1 - drad, 1 + drad), lo * (1 - drad),
                                  hi * (1 + drad)))
                objs.append(replace(
                    o, x=o.x + rng.uniform(-dpos, dpos), y=o.y + rng.uniform(-dpos, dpos), radius=r,
                    angle=o.angle + rng.uniform(-dang, dang),
                    tex_angle=o.tex_angle + rng.uniform(-20.0, 20.0)))
            horizon = self.horizon + (rng.uniform(-0.03, 0.03) if self.sky is not None else 0.0)
            cand = Scene(self.background, tuple(objs), self.sky, horizon)
            if (np.array_equal(cand.relation_tensor(), R0)
                    and all(size_class(o.radius) == o.size for o in objs)
                    and all(o.places == p.places for o, p in zip(objs, self.objects)) and layout_ok(objs)):
                return cand
        return self


def size_class(radius: float) -> str:
    return "big" if radius >= SIZE_THRESHOLD else "small"


def place_holds(o: SceneObject, place: str) -> bool:
    """Absolute place predicates of the module docstring."""
    if place == "left":
        return o.x <= 0.33
    if place == "right":
        return o.x >= 0.67
    if place == "top":
        return o.y <= 0.36
    if place == "bottom":
        return o.y >= 0.64
    if place == "middle":
        return abs(o.x - 0.5) <= 0.12 and abs(o.y - 0.5) <= 0.12
    raise ValueError(f"unknown place {place!r} (allowed: {PLACES})")


def relation_holds(a: SceneObject, rel: str, b: SceneObject) -> bool:
    """The spatial predicates of the module docstring."""
    dx, dy = b.x - a.x, b.y - a.y
    if rel == "left_of":
        return dx >= LEFT_GAP
    if rel == "right_of":
        return -dx >= LEFT_GAP
    if rel == "above":
        return dy >= VERT_GAP
    if rel == "below":
        return -dy >= VERT_GAP
    if rel == "next_to":
        return abs(dy) < VERT_GAP and LEFT_GAP <= abs(dx) < NEXT_MAX
    raise ValueError(f"unknown relation {rel!r} (allowed: {RELATIONS})")


def _extent(o: SceneObject) -> tuple[float, float]:
    """Half width / half height of the object's silhouette in *height* units."""
    if o.shape == "dog":
        return o.radius * 1.05, o.radius * 0.8
    if o.shape == "person":
        return o.radius * 0.65, o.radius
    return o.radius, o.radius


def layout_ok(objs, aspect: float = 4 / 3, margin: float = 0.01) -> bool:
    """Objects inside the frame and their bounding boxes disjoint (normalised coordinates)."""
    boxes = []
    for o in objs:
        hw, hh = _extent(o)
        hw_x = hw / aspect  # half width as a fraction of the image width
        x0, x1, y0, y1 = o.x - hw_x, o.x + hw_x, o.y - hh, o.y + hh
        if x0 < margin or x1 > 1 - margin or y0 < margin or y1 > 1 - margin:
            return False
        boxes.append((x0, x1, y0, y1))
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            a, b = boxes[i], boxes[j]
            if a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]:
                return False
    return True


# ---------------------------------------------------------------------------------------------- sampling
def _sample_attrs(rng: np.random.Generator, background: str, used_colours: set[str]) -> dict:
    colours = [c for c in COLOURS if c not in BG_EXCLUDED_COLOURS[background] and c not in used_colours]
    return dict(
        shape=SHAPES[rng.integers(len(SHAPES))],
        colour=colours[rng.integers(len(colours))],
        texture=TEXTURES[rng.choice(len(TEXTURES), p=[0.34, 0.22, 0.22, 0.22])],
        size=SIZES[rng.integers(2)],
    )


#: Layout prior ("where things usually are", as in photographs: the sky's objects high, figures on the
#: ground): each shape has a rank; with probability :data:`LAYOUT_PRIOR` the objects of a scene take the
#: layout's slots in rank order (low rank: left / bottom, high rank: right / top), otherwise a random
#: order.  A single object goes, with that probability, to its shape's home slot.  Position then follows
#: from *what* is in the picture — which the spatial pyramid can learn from a bag of words and a global
#: histogram cannot see.
SHAPE_RANK: dict[str, int] = {"person": 0, "dog": 1, "square": 2, "cross": 3, "circle": 4, "triangle": 5,
                              "diamond": 6, "star": 7}
#: Home slot (index into :data:`SINGLE_SLOTS`) of a single object of each shape.
SINGLE_HOME: dict[str, int] = {"person": 4, "dog": 4, "square": 1, "cross": 1, "circle": 0, "triangle": 2,
                               "diamond": 2, "star": 3}
LAYOUT_PRIOR = 0.9
#: Probabilities of one, two and three objects in a scene.
N_OBJECTS_P = (0.45, 0.4, 0.15)


def _slot_key(slot: tuple[float, float]) -> float:
    """Order of slots for the layout prior: left before right, bottom before top."""
    return slot[0] - slot[1]


def _layout_slots(rng: np.random.Generator, n: int, shapes: list[str] | None = None) -> list[tuple[float, float]]:
    """Slots of one of the canonical layouts (see :data:`PAIR_COLUMNS`) for objects of ``shapes``: with
    probability :data:`LAYOUT_PRIOR` in shape-rank order (:data:`SHAPE_RANK`), otherwise random."""
    prior = shapes is not None and rng.random() < LAYOUT_PRIOR
    if n == 1:
        if prior:
            return [SINGLE_SLOTS[SINGLE_HOME[shapes[0]]]]
        return [SINGLE_SLOTS[int(rng.choice(5, p=[0.4, 0.15, 0.15, 0.15, 0.15]))]]
    if n == 2:
        if rng.random() < 0.65:   # side by side
            slots = [(x, MIDDLE_ROW) for x in PAIR_COLUMNS]
        else:                     # one above the other
            slots = [(0.5, y) for y in ROWS]
    else:
        u = rng.random()
        if u < 0.5:               # a row of three
            slots = [(x, MIDDLE_ROW) for x in ROW3_COLUMNS]
        elif u < 0.75:            # two up, one down
            slots = [(TRIANGLE_COLUMNS[0], ROWS[0]), (TRIANGLE_COLUMNS[1], ROWS[0]), (0.5, ROWS[1])]
        else:                     # one up, two down
            slots = [(0.5, ROWS[0]), (TRIANGLE_COLUMNS[0], ROWS[1]), (TRIANGLE_COLUMNS[1], ROWS[1])]
    if prior:
        by_slot = sorted(range(n), key=lambda i: _slot_key(slots[i]))
        by_shape = sorted(range(n), key=lambda i: (SHAPE_RANK[shapes[i]], i))
        out: list = [None] * n
        for obj, slot in zip(by_shape, by_slot):
            out[obj] = slots[slot]
        return out
    return [slots[i] for i in rng.permutation(n)]


def _place(rng, attrs: list[dict], slots, jitter: float | None = None) -> tuple[SceneObject, ...] | None:
    jitter = PLACE_JITTER if jitter is None else jitter
    for attempt in range(40):
        j = jitter if attempt < 30 else 0.0
        objs = []
        for a, (x, y) in zip(attrs, slots):
            lo, hi = BIG_RADIUS if a["size"] == "big" else SMALL_RADIUS
            shape = a["shape"]
            angle = float(rng.uniform(-MAX_ROTATION, MAX_ROTATION)) if shape in ("square", "triangle", "star", "cross",
                                                              "diamond") else 0.0
            objs.append(SceneObject(
                **a, x=x + float(rng.uniform(-j, j)), y=y + float(rng.uniform(-j, j)),
                radius=float(rng.uniform(lo, hi)), angle=angle,
                tex_angle=float(rng.choice([0.0, 45.0, 90.0, 135.0]) + rng.uniform(-10, 10)),
                flip=bool(rng.random() < 0.5)))
        if layout_ok(objs):
            return tuple(objs)
    return None


def sample_scene(rng: np.random.Generator, sky: bool = False) -> Scene:
    """Draw a random scene: background uniform, 1 / 2 / 3 objects with probability :data:`N_OBJECTS_P`,
    distinct colours within a scene, colours that clash with the background excluded; with ``sky`` a
    sky band (uniform over :data:`SKIES`, horizon uniform in :data:`HORIZON`)."""
    while True:
        background = BACKGROUNDS[rng.integers(len(BACKGROUNDS))]
        n = int(rng.choice([1, 2, 3], p=list(N_OBJECTS_P)))
        used: set[str] = set()
        attrs = []
        for _ in range(n):
            a = _sample_attrs(rng, background, used)
            used.add(a["colour"])
            attrs.append(a)
        objs = _place(rng, attrs, _layout_slots(rng, n, [a["shape"] for a in attrs]))
        if objs is not None:
            if not sky:
                return Scene(background, objs)
            return Scene(background, objs, SKIES[int(rng.integers(len(SKIES)))], float(rng.uniform(*HORIZON)))


def twin_scene(rng: np.random.Generator, scene: Scene) -> Scene | None:
    """A *contrast twin* of a multi-object scene, the teaching set's minimal pairs:

    * ``"swap-colours"``: the colours of two objects exchanged (same shapes, same places) — only word
      order / colour–shape binding tells the captions apart ("a red circle left of a blue square" vs
      "a blue circle left of a red square");
    * ``"swap-places"``: two objects exchange positions — the global histograms hardly change, only the
      spatial pyramid (and relation direction in the text) tells them apart.
    """
    if len(scene.objects) < 2:
        return None
    a, b = (int(i) for i in rng.choice(len(scene.objects), size=2, replace=False))
    objs = list(scene.objects)
    if rng.random() < 0.5:
        objs[a], objs[b] = (replace(objs[a], colour=scene.objects[b].colour),
                            replace(objs[b], colour=scene.objects[a].colour))
    else:
        objs[a], objs[b] = (replace(objs[a], x=scene.objects[b].x, y=scene.objects[b].y),
                            replace(objs[b], x=scene.objects[a].x, y=scene.objects[a].y))
        if not layout_ok(objs):
            return None
    return Scene(scene.background, tuple(objs), scene.sky, scene.horizon)


def assignments(n_mentions: int, n_objects: int = MAX_OBJECTS):
    """All injective maps of ``n_mentions`` mentions to ``n_objects`` objects (as tuples)."""
    return [p[:n_mentions] for p in permutations(range(n_objects))] if n_mentions else [()]

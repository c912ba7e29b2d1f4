"""The built-in teaching set: a generated image–caption corpus with exact scene facts.

>>> from corpora.teaching import make_teaching_set
>>> ts = make_teaching_set(n_images=120, n_train=60, n_dev=30, seed=0)
>>> img = ts.load_image(ts.image_ids[0])           # (120, 160, 3) uint8 RGB
>>> ts.captions[ts.image_ids[0]][0].text           # e.g. 'A red circle is left of a blue square on the grass.'
>>> R = ts.judge_relevance(ts.split("test"), [c.id for i in ts.split("test") for c in ts.captions[i]])

Everything is deterministic from ``seed``; no file is shipped or written.  See ``docs/teaching_set.md``
for the design (which word family each image kernel can learn, the exact relevance and grade rules,
the simulated annotators and judgments).
"""
from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from corpora.base import (
    Caption, CaptionId, Corpus, CrowdJudgment, ExpertJudgment, ImageId, caption_id,
)
from corpora.teaching.facts import (
    CaptionFacts, FactArrays, Mention, SceneArrays, facts_holding, grade, grade_from_counts,
    holding_matrix, relevant,
)
from corpora.teaching.language import (
    SYNONYM_GROUPS, AnnotatorStyle, Realiser, describe_units, join_tokens, make_style, select_facts,
    synonym_sets, unit_text,
)
from corpora.teaching.render import render_scene
from corpora.teaching.scene import (
    BACKGROUNDS, COLOURS, RELATIONS, SHAPES, SIZES, TEXTURES, Scene, SceneObject, sample_scene,
    twin_scene,
)

__all__ = [
    "make_teaching_set", "TeachingSet", "Scene", "SceneObject", "CaptionFacts", "Mention", "relevant",
    "grade", "facts_holding", "SHAPES", "COLOURS", "TEXTURES", "SIZES", "BACKGROUNDS", "RELATIONS",
    "SYNONYM_GROUPS", "synonym_sets", "GENERATOR_VERSION", "N_CAPTIONS", "AnnotatorStyle",
    "EVALUATION_SEEDS", "PRETRAIN_SEEDS", "SCORER_TRAINING_SEEDS", "HELDOUT_SEEDS", "PRETRAIN_CHUNK",
    "seed_purpose", "pretraining_chunk", "scorer_training_set", "heldout_pool_set", "scene_fingerprint",
    "scene_fingerprints",
]

#: Bumped whenever the generator's or the renderer's output changes (part of the fingerprint, so caches
#: keyed by it never serve features of older images).
GENERATOR_VERSION = 3
N_CAPTIONS = 5
N_ANNOTATORS = 60
TWIN_PROBABILITY = 0.5
#: Seed ranges (disjoint; every random stream takes a 32-bit seed).  Evaluation corpora — the main job's
#: ``--seed``, :func:`make_teaching_set` — draw from ``[0, 2^31)``; the teaching CLIP's pretraining
#: stream (:func:`pretraining_chunk`: chunk ``k`` has seed ``2^31 + k``) from ``[2^31, 2^31 + 2^29)``;
#: the training sets of the shipped fine-tuned scorers (:func:`scorer_training_set`: data neither the
#: teaching CLIP nor any evaluation has seen, as COCO is for PAC-S on Flickr8k) from
#: ``[2^31 + 2^29, 2^31 + 2^30)``; the held-out monitoring pools (:func:`heldout_pool_set`) from
#: ``[2^31 + 2^30, 2^32)``.  Because every scene, caption and pixel of a set derives from its seed alone,
#: disjoint seed ranges mean the pretraining data never contains an evaluation image (tested with
#: :func:`scene_fingerprint`).
EVALUATION_SEEDS = range(0, 2 ** 31)
PRETRAIN_SEEDS = range(2 ** 31, 2 ** 31 + 2 ** 29)
SCORER_TRAINING_SEEDS = range(2 ** 31 + 2 ** 29, 2 ** 31 + 2 ** 30)
HELDOUT_SEEDS = range(2 ** 31 + 2 ** 30, 2 ** 32)
#: Images per chunk of the pretraining stream (part of the stream's definition: changing it changes
#: which image the stream holds at a given position).
PRETRAIN_CHUNK = 1000
# Stream tags of the seeded random generators (one independent stream per purpose).
_S_SCENES, _S_STYLES, _S_CAPTIONS, _S_RENDER, _S_RERENDER, _S_PARA, _S_DESC, _S_NEG, _S_JUDGE = range(9)


def _rng(*parts: int) -> np.random.Generator:
    return np.random.default_rng([int(p) & 0xFFFFFFFF for p in parts])


def image_id_of(index: int) -> ImageId:
    return f"teach_{index:05d}.png"


@dataclass(eq=False)
class TeachingSet(Corpus):
    """The generated corpus (a :class:`~corpora.base.Corpus`) plus its ground truth and generators.

    Attributes
    ----------
    scenes : dict image id -> Scene
    facts : dict caption id -> CaptionFacts (the five original captions of every image)
    seed : int
    image_size : (width, height)
    styles : tuple of AnnotatorStyle (the simulated annotator pool)
    annotators : dict caption id -> index into ``styles``
    twins : dict image id -> image id of the scene it is a contrast twin of
    """

    scenes: dict = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    seed: int = 0
    image_size: tuple = (160, 120)
    styles: tuple = ()
    annotators: dict = field(default_factory=dict)
    twins: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.image_loader = self._load_image
        super().__post_init__()
        self._index = {im: i for i, im in enumerate(self.image_ids)}
        W, H = self.image_size
        self._images = np.zeros((len(self.image_ids), H, W, 3), np.uint8)  # pages filled lazily
        self._rendered = np.zeros(len(self.image_ids), bool)
        self._extra_facts: dict[CaptionId, CaptionFacts] = {}
        self._scene_arrays: SceneArrays | None = None
        self._fact_arrays: FactArrays | None = None
        self._fact_col: dict[CaptionId, int] = {}

    # ------------------------------------------------------------------ images
    def _idx(self, image_id: ImageId) -> int:
        try:
            return self._index[image_id]
        except KeyError:
            raise KeyError(f"unknown image id {image_id!r} in the teaching set") from None

    def _fingerprint_extra(self) -> tuple[str, ...]:
        """The fingerprint covers captions and splits (Corpus) and, from here, what the images are
        rendered from: generator / renderer version, seed, image size and every scene (positions,
        sizes, backdrop), so a re-rendered set never reuses a model trained on other pixels."""
        scenes = hashlib.sha256(repr([self.scenes.get(i) for i in self.image_ids]).encode()).hexdigest()
        W, H = self.image_size
        return (f"v{GENERATOR_VERSION}", f"seed={self.seed}", f"size={W}x{H}", scenes)

    def _image_source(self, image_id: ImageId) -> str:
        """:meth:`~corpora.base.Corpus.image_signature` of a rendered image: generator / renderer version,
        seed, the image's index (its render stream), image size and the scene.  Unlike
        :attr:`fingerprint` it does not cover the captions, so a change to the captions alone keeps
        cached image features valid."""
        i = self._idx(image_id)
        part = f"v{GENERATOR_VERSION}|seed={self.seed}|i={i}|size={tuple(self.image_size)}|{self.scenes[image_id]!r}"
        return "scene:" + hashlib.sha256(part.encode()).hexdigest()[:16]

    def _load_image(self, image_id: ImageId) -> np.ndarray:
        i = self._idx(image_id)
        if not self._rendered[i]:
            self._images[i] = render_scene(self.scenes[image_id], self.image_size,
                                           _rng(self.seed, _S_RENDER, i))
            self._rendered[i] = True
        view = self._images[i].view()
        view.flags.writeable = False
        return view

    def render_all(self, progress: bool = False) -> np.ndarray:
        """Render every image now (memoised); returns the (N, H, W, 3) uint8 array (read-only view)."""
        todo = np.flatnonzero(~self._rendered)
        it = todo
        if progress and len(todo) > 200:
            it = tqdm(todo, desc="teaching set: render", unit="img")
        for i in it:
            self._load_image(self.image_ids[i])
        view = self._images.view()
        view.flags.writeable = False
        return view

    def rerender(self, image_id: ImageId, seed: int) -> np.ndarray:
        """The same scene with new layout noise (positions, sizes, rotation, pattern orientation and
        phase, shades, background texture), every fact unchanged — PAC-S's "generated image"."""
        scene, rng = self._rerender_scene(image_id, seed)
        return render_scene(scene, self.image_size, rng)

    def _rerender_scene(self, image_id: ImageId, seed: int) -> tuple[Scene, np.random.Generator]:
        rng = _rng(self.seed, _S_RERENDER, self._idx(image_id), seed)
        return self.scenes[image_id].jittered(rng), rng

    def rerender_scene(self, image_id: ImageId, seed: int) -> Scene:
        """The jittered scene that :meth:`rerender` draws (same facts, new layout)."""
        return self._rerender_scene(image_id, seed)[0]

    # ------------------------------------------------------------------ facts and relevance
    def facts_of(self, cid: CaptionId) -> CaptionFacts:
        """Facts of an original caption or of one made by :meth:`paraphrase` / :meth:`describe`."""
        f = self.facts.get(cid) or self._extra_facts.get(cid)
        if f is None:
            raise KeyError(f"no facts for caption id {cid!r} (not an original, paraphrased or "
                           f"described caption of this teaching set)")
        return f

    @staticmethod
    def relevant(facts: CaptionFacts, scene: Scene) -> bool:
        """Exact relevance: every stated fact holds under one assignment of mentions to objects."""
        return relevant(facts, scene)

    @staticmethod
    def grade(facts: CaptionFacts, scene: Scene) -> int:
        """Graded relevance 1–4 (see :mod:`corpora.teaching.facts`)."""
        return grade(facts, scene)

    def _arrays(self, image_ids: Sequence[ImageId], caption_ids: Sequence[CaptionId]):
        if self._scene_arrays is None:
            self._scene_arrays = SceneArrays([self.scenes[i] for i in self.image_ids])
            cids = list(self.facts)
            self._fact_arrays = FactArrays([self.facts[c] for c in cids])
            self._fact_col = {c: j for j, c in enumerate(cids)}
        rows = np.array([self._idx(i) for i in image_ids], dtype=np.intp)
        sa = self._scene_arrays.take(rows)
        cols = [self._fact_col.get(c, -1) for c in caption_ids]
        if all(c >= 0 for c in cols):
            fa = self._fact_arrays.take(np.array(cols, dtype=np.intp))
        else:
            fa = FactArrays([self.facts_of(c) for c in caption_ids])
        return sa, fa

    def holding(self, image_ids: Sequence[ImageId], caption_ids: Sequence[CaptionId]) -> np.ndarray:
        """``H[i, j]``: the most facts of caption ``j`` holding in image ``i`` under one assignment."""
        sa, fa = self._arrays(image_ids, caption_ids)
        return holding_matrix(sa, fa)

    def judge_relevance(self, image_ids: Sequence[ImageId],
                        caption_ids: Sequence[CaptionId]) -> np.ndarray:
        """Exact boolean relevance ``R[i, j]`` from the scene facts (overrides the crowd rule)."""
        sa, fa = self._arrays(image_ids, caption_ids)
        return holding_matrix(sa, fa) >= fa.n_facts[None, :]

    def grade_matrix(self, image_ids: Sequence[ImageId],
                     caption_ids: Sequence[CaptionId]) -> np.ndarray:
        """Graded relevance 1–4 for every image × caption (int8)."""
        sa, fa = self._arrays(image_ids, caption_ids)
        return grade_from_counts(holding_matrix(sa, fa), fa.n_facts[None, :])

    # ------------------------------------------------------------------ generated text
    def _register(self, cap: Caption, facts: CaptionFacts) -> None:
        self._extra_facts[cap.id] = facts

    def paraphrase(self, caption_id_: CaptionId, seed: int) -> Caption:
        """The same facts in new words (another simulated annotator's synonyms, frame and order) —
        PAC-S's "generated text".

        The id is ``"<caption id>p<seed>"``, e.g. ``"teach_00007.png#3p1"`` (``"<image>#<k>p<seed>"``:
        unique per caption and seed; any caption with known facts can be paraphrased, including
        :meth:`describe` captions).  The text differs from the original whenever the facts allow more
        than one wording (up to 40 draws are tried)."""
        facts = self.facts_of(caption_id_)
        image_id = caption_id_.rsplit("#", 1)[0]
        i = self._idx(image_id)
        k = self.caption(caption_id_).index if self.has_caption(caption_id_) else 0
        original = self.caption(caption_id_).text if self.has_caption(caption_id_) else None
        tag = zlib.crc32(caption_id_.encode("utf-8"))
        text = lemma = pos = None
        for attempt in range(40):
            rng = _rng(self.seed, _S_PARA, i, tag, seed, attempt)
            toks = Realiser(make_style(rng), rng).realise(facts)
            text, lemma, pos = join_tokens(toks)
            if text != original:
                break
        cap = Caption(id=f"{caption_id_}p{seed}", image_id=image_id, index=k, text=text, lemma=lemma,
                      pos=pos)
        self._register(cap, facts)
        return cap

    def _describe(self, image_id: ImageId, seed: int):
        """(unit tokens, unit kinds, facts of every cumulative caption) of :meth:`describe`."""
        i = self._idx(image_id)
        return describe_units(self.scenes[image_id], _rng(self.seed, _S_DESC, i, seed))

    def describe(self, image_id: ImageId, seed: int = 0) -> tuple[Caption, list[str]]:
        """A long caption stating every object with all its attributes and a place, the background and
        a relation from the first object to each other one, plus its ordered detail units (SPECS)::

            ["A big red circle", "with stripes", "on the left", "on the grass",
             "left of a small blue square", "with dots", "on the right"]

        Each unit adds new visual information (:meth:`describe_facts` gives the facts of every
        cumulative caption, strictly growing) and ``" ".join(units) == caption.text`` (no final full
        stop).  Id ``"<image>#d<seed>"``; ``seed`` varies the wording and the choice of relations."""
        units, _, prefixes = self._describe(image_id, seed)
        facts = prefixes[-1]
        toks = [t for u in units for t in u]
        text, lemma, pos = join_tokens(toks)
        unit_strs = [unit_text(u) for u in units]
        assert " ".join(unit_strs) == text
        cap = Caption(id=f"{image_id}#d{seed}", image_id=image_id, index=seed, text=text, lemma=lemma,
                      pos=pos)
        self._register(cap, facts)
        return cap, unit_strs

    def describe_facts(self, image_id: ImageId, seed: int = 0) -> list[CaptionFacts]:
        """Facts of the cumulative captions ``units[:1]``, ``units[:2]``, … of :meth:`describe`."""
        return list(self._describe(image_id, seed)[2])

    def _negative(self, image_id: ImageId, seed: int):
        i = self._idx(image_id)
        scene = self.scenes[image_id]
        rng = _rng(self.seed, _S_NEG, i, seed)
        present = {(o.shape, o.colour) for o in scene.objects}
        for j in rng.permutation(len(self.image_ids)):
            other = self.image_ids[j]
            if other == image_id:
                continue
            units, kinds, prefixes = self._describe(other, int(rng.integers(1 << 30)))
            facts = prefixes[-1]
            cands = []
            for u, kind in zip(units, kinds):
                if kind == "background" and self.scenes[other].background != scene.background:
                    cands.append((u, kind, None))
            # relation units: the k-th relation unit introduces mention k
            rel_units = [u for u, kind in zip(units, kinds) if kind == "relation"]
            for k, u in enumerate(rel_units, start=1):
                m = facts.mentions[k]
                if (m.shape, m.colour) not in present:
                    cands.append((u, "relation", (facts.relations[k - 1][1], m)))
            if cands:
                u, kind, extra = cands[int(rng.integers(len(cands)))]
                if kind == "relation" and unit_text(u).startswith("and "):
                    u = u[1:]
                return unit_text(u), kind, (self.scenes[other].background if kind == "background"
                                            else extra)
        raise RuntimeError("negative_unit: no false unit found (corpus too small?)")

    def negative_unit(self, image_id: ImageId, seed: int) -> str:
        """A detail unit taken from another image's :meth:`describe` that is FALSE for this image:
        either a background phrase naming another background ("on the sand") or a relation phrase
        introducing an object whose shape–colour pair does not occur in this image
        ("left of a small blue square").  Appended to any cumulative caption it makes it irrelevant."""
        return self._negative(image_id, seed)[0]

    def negative_unit_facts(self, image_id: ImageId, seed: int, describe_seed: int = 0) -> CaptionFacts:
        """Facts of ``describe(image_id)`` with :meth:`negative_unit` appended (never relevant)."""
        _, kind, extra = self._negative(image_id, seed)
        base = self._describe(image_id, describe_seed)[2][-1]
        if kind == "background":
            medium = None
            return CaptionFacts(base.mentions, base.relations, extra, medium)
        rel, mention = extra
        mentions = base.mentions[:2] + (mention,)  # at most 3 mentions: drop a third object if any
        relations = tuple(r for r in base.relations if r[2] < 2) + ((0, rel, len(mentions) - 1),)
        return CaptionFacts(mentions, relations, base.background, None)

    def summary(self) -> dict:
        s = super().summary()
        s.update(seed=self.seed, image_size=list(self.image_size), generator_version=GENERATOR_VERSION,
                 twins=len(self.twins), vocabulary=len({w for c in self._caption_index.values()
                                                        for w in c.lemma.lower().split()}))
        return s


# ---------------------------------------------------------------------------------------- generation
def _generate_scenes(n: int, rng: np.random.Generator, sky: bool) -> tuple[list[Scene], dict[int, int]]:
    scenes: list[Scene] = []
    twins: dict[int, int] = {}
    for k in range(n):
        if k and (k - 1) not in twins and rng.random() < TWIN_PROBABILITY:
            t = twin_scene(rng, scenes[-1])
            if t is not None:
                twins[k] = k - 1
                scenes.append(t)
                continue
        scenes.append(sample_scene(rng, sky=sky))
    return scenes, twins


def _judgments(ts: TeachingSet, seed: int) -> tuple[tuple[ExpertJudgment, ...], tuple[CrowdJudgment, ...],
                                                    dict[str, tuple[CaptionId, ...]]]:
    """Simulated Flickr8k-Expert / Flickr8k-CF judgments on the dev and test splits.

    For each split, one caption per image forms the pool (seeded choice; the test pool is exported as
    ``fixed_pools["test"]`` like Flickr8k's CrowdFlower pool).  Each image gets its own pool caption
    plus pool captions of other images: for experts 2 random ones and up to 3 chosen among the ones with
    grade 3–4 / 2 (so every grade occurs); three experts each give the exact grade, moved by ±1 with
    probability 0.1 each way, clipped to 1..4.  For the crowd 9 others (3 of grade ≥ 3, 3 of grade 2,
    3 random); three judges say "yes" with probability 0.92 / 0.25 / 0.06 / 0.02 for grade 4 / 3 / 2 / 1.
    """
    expert: list[ExpertJudgment] = []
    crowd: list[CrowdJudgment] = []
    pools: dict[str, tuple[CaptionId, ...]] = {}
    p_yes = np.array([0.0, 0.02, 0.06, 0.25, 0.92])
    for sname in ("dev", "test"):
        ids = ts.split(sname)
        if not ids:
            continue
        rng = _rng(seed, _S_JUDGE, 0 if sname == "dev" else 1)
        pool = tuple(caption_id(im, int(rng.integers(N_CAPTIONS))) for im in ids)
        pools[sname] = pool
        G = ts.grade_matrix(ids, pool)
        n = len(ids)
        for i, im in enumerate(ids):
            others = np.array([j for j in range(n) if j != i])
            if len(others) == 0:
                continue
            g = G[i, others]

            def pick(mask, k, exclude=()):
                cand = [j for j in others[mask] if j not in exclude]
                if not cand:
                    return []
                return list(rng.choice(cand, size=min(k, len(cand)), replace=False))

            ex = pick(g >= 3, 2)
            ex += pick(g == 2, 1, ex)
            ex += pick(np.ones_like(g, bool), 5 - len(ex), ex)
            for j in [i] + [int(x) for x in ex]:
                true = int(G[i, j])
                noise = rng.choice([-1, 0, 1], size=3, p=[0.1, 0.8, 0.1])
                scores = tuple(int(s) for s in np.clip(true + noise, 1, 4))
                expert.append(ExpertJudgment(im, pool[j], scores))
            cr = pick(g >= 3, 3)
            cr += pick(g == 2, 3, cr)
            cr += pick(np.ones_like(g, bool), 9 - len(cr), cr)
            for j in [i] + [int(x) for x in cr]:
                yes = int((rng.random(3) < p_yes[int(G[i, j])]).sum())
                crowd.append(CrowdJudgment(im, pool[j], yes / 3.0, yes, 3 - yes))
    return tuple(expert), tuple(crowd), pools


def make_teaching_set(n_images: int = 2000, n_train: int = 1400, n_dev: int = 300, seed: int = 0,
                      image_size: tuple[int, int] = (160, 120), *, sky: bool = False) -> TeachingSet:
    """Generate the teaching set (deterministic from ``seed``; images rendered lazily and memoised).

    Parameters
    ----------
    n_images, n_train, n_dev : int
        Sizes; the test split is the rest (``n_images - n_train - n_dev``).
    seed : int
        Every random choice (scenes, annotators, captions, rendering, judgments) derives from it.
    image_size : (width, height)
        Rendered image size in pixels (scenes are resolution independent).
    sky : bool
        Experimental: draw a sky band whose colours repeat the grounds' (position-dependent colours,
        see :class:`~corpora.teaching.scene.Scene`).  Off by default: it did not measurably help the
        spatial pyramid and it blurs the global colour words of the backgrounds.
    """
    if not (isinstance(seed, (int, np.integer)) and 0 <= seed < 2 ** 32):
        raise ValueError(f"make_teaching_set: seed must be an integer in [0, 2^32), got {seed!r} (the "
                         f"random streams take 32-bit seeds; a larger one would repeat a smaller one's data)")
    if seed not in EVALUATION_SEEDS:
        raise ValueError(f"make_teaching_set: seed {seed} is {seed_purpose(seed)}; evaluation corpora "
                         f"take seeds in [0, 2^31) so that they never share data with the teaching CLIP's "
                         f"pretraining (corpora.teaching.EVALUATION_SEEDS)")
    return _build_teaching_set(n_images, n_train, n_dev, seed, image_size, sky, "teaching")


def _build_teaching_set(n_images: int, n_train: int, n_dev: int, seed: int, image_size: tuple[int, int],
                        sky: bool, name: str) -> TeachingSet:
    """:func:`make_teaching_set` without the seed-range check (also builds the pretraining chunks and
    the held-out pools)."""
    if n_images < 1 or n_train < 0 or n_dev < 0 or n_train + n_dev > n_images:
        raise ValueError(f"make_teaching_set: bad sizes n_images={n_images}, n_train={n_train}, "
                         f"n_dev={n_dev} (need 0 <= n_train + n_dev <= n_images)")
    W, H = (int(v) for v in image_size)
    if W < 32 or H < 24:
        raise ValueError(f"make_teaching_set: image_size={image_size!r} too small (min 32x24)")
    rng = _rng(seed, _S_SCENES)
    scenes: list[Scene] = []
    twins: dict[int, int] = {}
    bounds = [(0, n_train), (n_train, n_train + n_dev), (n_train + n_dev, n_images)]
    for lo, hi in bounds:  # twins never cross a split boundary
        sc, tw = _generate_scenes(hi - lo, rng, sky)
        twins.update({lo + a: lo + b for a, b in tw.items()})
        scenes.extend(sc)
    ids = [image_id_of(i) for i in range(n_images)]
    srng = _rng(seed, _S_STYLES)
    styles = tuple(make_style(srng, ident=a) for a in range(N_ANNOTATORS))
    captions: dict[ImageId, list[Caption]] = {}
    facts: dict[CaptionId, CaptionFacts] = {}
    annotators: dict[CaptionId, int] = {}
    for i, (im, scene) in enumerate(zip(ids, scenes)):
        crng = _rng(seed, _S_CAPTIONS, i)
        who = crng.choice(N_ANNOTATORS, size=N_CAPTIONS, replace=False)
        caps = []
        for k, a in enumerate(who):
            style = styles[int(a)]
            f = select_facts(scene, style, crng)
            text, lemma, pos = join_tokens(Realiser(style, crng).realise(f))
            cid = caption_id(im, k)
            caps.append(Caption(cid, im, k, text, lemma, pos))
            facts[cid] = f
            annotators[cid] = int(a)
        captions[im] = caps
    splits = {"train": tuple(ids[:n_train]), "dev": tuple(ids[n_train:n_train + n_dev]),
              "test": tuple(ids[n_train + n_dev:])}
    ts = TeachingSet(
        name=name, image_ids=tuple(ids), captions=captions, splits=splits,
        scenes=dict(zip(ids, scenes)), facts=facts, seed=seed, image_size=(W, H), styles=styles,
        annotators=annotators, twins={ids[a]: ids[b] for a, b in twins.items()},
    )
    expert, crowd, pools = _judgments(ts, seed)
    ts.expert, ts.crowd = expert, crowd
    ts.fixed_pools = {"test": pools["test"]} if "test" in pools else {}
    ts.notes = [
        f"{name} set (generator v{GENERATOR_VERSION}): seed={seed}, {n_images} images "
        f"({n_train} train / {n_dev} dev / {n_images - n_train - n_dev} test) of {W}x{H} px, "
        f"{N_CAPTIONS} captions each from a pool of {N_ANNOTATORS} simulated annotators",
        f"{len(ts.twins)} contrast twins (colour-swapped or place-swapped scenes)",
        *(["sky bands on (position-dependent colours)"] if sky else []),
        "relevance is exact (scene facts), not crowd-based; expert / crowd judgments are simulated "
        "from the exact grades",
    ]
    return ts


# ---------------------------------------------------------------------------------------- seed ranges
def seed_purpose(seed: int) -> str:
    """Which range a 32-bit seed belongs to, in words (:data:`EVALUATION_SEEDS`, :data:`PRETRAIN_SEEDS`,
    :data:`HELDOUT_SEEDS`)."""
    if seed in EVALUATION_SEEDS:
        return "an evaluation seed ([0, 2^31))"
    if seed in PRETRAIN_SEEDS:
        return "reserved for the teaching CLIP's pretraining stream ([2^31, 2^31 + 2^29))"
    if seed in SCORER_TRAINING_SEEDS:
        return "reserved for the shipped scorers' training sets ([2^31 + 2^29, 2^31 + 2^30))"
    if seed in HELDOUT_SEEDS:
        return "reserved for the teaching CLIP's held-out pools ([2^31 + 2^30, 2^32))"
    raise ValueError(f"seed {seed!r} is outside [0, 2^32)")


def pretraining_chunk(index: int, *, size: int = PRETRAIN_CHUNK,
                      image_size: tuple[int, int] = (160, 120)) -> TeachingSet:
    """Chunk ``index`` of the teaching CLIP's pretraining stream: a teaching set of ``size`` images (all
    in its ``train`` split, five captions each, contrast twins included) generated exactly as
    :func:`make_teaching_set` does, from seed ``PRETRAIN_SEEDS.start + index``.

    Image ``g`` of the stream is image ``g % size`` of chunk ``g // size``; the stream holds
    ``len(PRETRAIN_SEEDS) · size`` images (5·10^11 at the default size), none of which any evaluation
    corpus (seed in :data:`EVALUATION_SEEDS`) contains.  The chunk's annotator pool is its own draw of
    the simulated annotators, so a model pretrained on many chunks has seen many caption styles.
    """
    if not (isinstance(index, (int, np.integer)) and 0 <= index < len(PRETRAIN_SEEDS)):
        raise ValueError(f"pretraining_chunk: index must be in [0, {len(PRETRAIN_SEEDS)}), got {index!r}")
    if size < 1:
        raise ValueError(f"pretraining_chunk: size must be >= 1, got {size}")
    return _build_teaching_set(size, size, 0, PRETRAIN_SEEDS.start + int(index), image_size, False,
                               "teaching-pretrain")


def scorer_training_set(index: int = 0, n_images: int = 2000, n_train: int = 1400, n_dev: int = 300,
                        image_size: tuple[int, int] = (160, 120)) -> TeachingSet:
    """Training set ``index`` of the shipped fine-tuned scorers (PAC-S, L-CLIPScore, BRIDGE, SPECS:
    :mod:`neural.shipped_scorers`): a teaching set split train / dev / test exactly as
    :func:`make_teaching_set` splits the main job's default corpus (contrast twins never cross a split),
    from seed ``SCORER_TRAINING_SEEDS.start + index`` — a seed that neither the teaching CLIP's
    pretraining stream nor any evaluation corpus uses, so the scorers are fine-tuned on data the
    teaching CLIP has not seen and evaluated on a corpus neither has seen (as PAC-S and BRIDGE are
    trained on COCO and evaluated on Flickr8k)."""
    if not (isinstance(index, (int, np.integer)) and 0 <= index < len(SCORER_TRAINING_SEEDS)):
        raise ValueError(f"scorer_training_set: index must be in [0, {len(SCORER_TRAINING_SEEDS)}), got {index!r}")
    return _build_teaching_set(n_images, n_train, n_dev, SCORER_TRAINING_SEEDS.start + int(index), image_size,
                               False, "teaching-scorer-training")


def heldout_pool_set(n_images: int = 300, index: int = 0,
                     image_size: tuple[int, int] = (160, 120)) -> TeachingSet:
    """A held-out monitoring set for the teaching CLIP: ``n_images`` images, all in the ``test`` split
    (with its fixed one-caption-per-image pool and simulated expert / crowd judgments, exactly like the
    default corpus' test split), from seed ``HELDOUT_SEEDS.start + index`` — neither an evaluation seed
    nor a pretraining one."""
    if not (isinstance(index, (int, np.integer)) and 0 <= index < len(HELDOUT_SEEDS)):
        raise ValueError(f"heldout_pool_set: index must be in [0, {len(HELDOUT_SEEDS)}), got {index!r}")
    return _build_teaching_set(n_images, 0, 0, HELDOUT_SEEDS.start + int(index), image_size, False,
                               "teaching-heldout")


def scene_fingerprint(scene: Scene) -> str:
    """SHA-256 (hex, 16 characters) of a scene's full description — background, and for every object
    its shape, colour, texture, size class and continuous position, radius, rotation, pattern angle
    and flip.  Two independently drawn scenes share it only if every continuous coordinate coincides;
    scenes that merely state the same facts ("a red circle on the grass") do not.  The pretraining /
    evaluation non-overlap test compares these."""
    return hashlib.sha256(repr(scene).encode("utf-8")).hexdigest()[:16]


def scene_fingerprints(ts: TeachingSet, image_ids: Sequence[ImageId] | None = None) -> set[str]:
    """:func:`scene_fingerprint` of every scene of ``ts`` (or of ``image_ids``)."""
    ids = ts.image_ids if image_ids is None else image_ids
    return {scene_fingerprint(ts.scenes[i]) for i in ids}

"""The teaching set's language: lexicon with synonyms, simulated annotators and the caption realiser.

Every word is produced as a ``(surface, lemma, Penn tag)`` triple, so the generator itself yields the
lemmatised caption (Flickr8k.lemma.token.txt style: lemmas space-joined, punctuation as separate tokens,
case kept as in the text) and POS tags aligned with it — no NLTK needed.

Simulated annotators (:class:`AnnotatorStyle`) each have a *stable* style: a preferred synonym per
concept (used with probability ``loyalty``, otherwise any synonym), how much detail they give (the
probabilities of stating size, colour, texture, background, relations, a verb), their favourite
sentence frames, whether textures come as adjectives ("striped") or prepositional phrases ("with
stripes"), and relation phrasings ("left of" / "to the left of").  Five different annotators describe
each image, so the synonyms of a concept co-occur across the five captions of one image — which is what
the alignment-based lexical similarity (Hodosh et al. 2013, Eq. 25) learns from.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corpora.teaching.facts import CaptionFacts, Mention
from corpora.teaching.scene import INVERSE, Scene

Token = tuple[str, str, str]  # surface, lemma, Penn tag


def _w(surface: str, tag: str, lemma: str | None = None) -> Token:
    return (surface, surface if lemma is None else lemma, tag)


# ------------------------------------------------------------------------------------------- lexicon
#: Shape nouns (singular): concept -> synonyms, most popular first.
SHAPE_WORDS: dict[str, tuple[str, ...]] = {
    "circle": ("circle", "disc", "ball"),
    "square": ("square", "box", "block"),
    "triangle": ("triangle", "wedge", "pyramid"),
    "star": ("star",),
    "cross": ("cross", "plus"),
    "diamond": ("diamond", "rhombus"),
    "dog": ("dog", "puppy", "hound"),
    "person": ("person", "man", "figure"),
}
COLOUR_WORDS: dict[str, tuple[str, ...]] = {
    "red": ("red",), "blue": ("blue",), "green": ("green",), "yellow": ("yellow",),
    "purple": ("purple", "violet"), "orange": ("orange",), "black": ("black",), "white": ("white",),
}
SIZE_WORDS: dict[str, tuple[str, ...]] = {"big": ("big", "large", "huge"), "small": ("small", "little", "tiny")}
#: Textures as adjectives.
TEXTURE_ADJ: dict[str, tuple[str, ...]] = {
    "striped": ("striped", "stripy"), "dotted": ("dotted", "spotted"),
    "checked": ("checked", "checkered"), "plain": ("plain", "solid"),
}
#: Textures as "with ..." phrases: tokens (surface, lemma, tag) after "with".
TEXTURE_PP: dict[str, tuple[tuple[Token, ...], ...]] = {
    "striped": ((_w("stripes", "NNS", "stripe"),),),
    "dotted": ((_w("dots", "NNS", "dot"),), (_w("spots", "NNS", "spot"),)),
    "checked": ((_w("checks", "NNS", "check"),),
                (_w("a", "DT"), _w("checkered", "JJ"), _w("pattern", "NN"))),
    "plain": ((_w("a", "DT"), _w("plain", "JJ"), _w("fill", "NN")),
              (_w("a", "DT"), _w("single", "JJ"), _w("colour", "NN"))),
}
#: Background nouns: concept -> (head noun, optional adjective before it), most popular first.
BACKGROUND_PHRASES: dict[str, tuple[tuple[Token, ...], ...]] = {
    "grass": ((_w("grass", "NN"),), (_w("lawn", "NN"),), (_w("field", "NN"),),
              (_w("green", "JJ"), _w("grass", "NN"))),
    "sand": ((_w("sand", "NN"),), (_w("beach", "NN"),), (_w("sandy", "JJ"), _w("beach", "NN"))),
    "water": ((_w("water", "NN"),), (_w("lake", "NN"),), (_w("sea", "NN"),), (_w("pond", "NN"),)),
    "snow": ((_w("snow", "NN"),), (_w("snowy", "JJ"), _w("ground", "NN")), (_w("white", "JJ"), _w("snow", "NN"))),
}
BACKGROUND_WORDS: dict[str, tuple[str, ...]] = {
    "grass": ("grass", "lawn", "field"), "sand": ("sand", "beach"),
    "water": ("water", "lake", "sea", "pond"), "snow": ("snow", "ground"),
}
#: Prepositions used with each background head noun.
NOUN_PREPS: dict[str, tuple[str, ...]] = {
    "grass": ("on", "in"), "lawn": ("on",), "field": ("in", "on"), "sand": ("on", "in"), "beach": ("on",),
    "water": ("in", "on"), "lake": ("on", "in"), "sea": ("in", "on"), "pond": ("in", "on"),
    "snow": ("in", "on"), "ground": ("on",),
}
#: Verbs by (medium, animate subject): (3rd person singular, plural / base, -ing).
VERBS: dict[tuple[str, bool], tuple[tuple[str, str, str], ...]] = {
    ("land", False): (("sits", "sit", "sitting"), ("rests", "rest", "resting"), ("lies", "lie", "lying")),
    ("water", False): (("floats", "float", "floating"), ("bobs", "bob", "bobbing"),
                       ("drifts", "drift", "drifting")),
    ("land", True): (("stands", "stand", "standing"), ("sits", "sit", "sitting"),
                     ("walks", "walk", "walking"), ("plays", "play", "playing")),
    ("water", True): (("swims", "swim", "swimming"), ("paddles", "paddle", "paddling"),
                      ("floats", "float", "floating")),
}
ANIMATE = frozenset({"dog", "person"})
#: Relation phrasings.
RELATION_PHRASES: dict[str, tuple[tuple[Token, ...], ...]] = {
    "left_of": ((_w("left", "RB"), _w("of", "IN")),
                (_w("to", "TO"), _w("the", "DT"), _w("left", "NN"), _w("of", "IN")),
                (_w("on", "IN"), _w("the", "DT"), _w("left", "NN"), _w("of", "IN"))),
    "right_of": ((_w("right", "RB"), _w("of", "IN")),
                 (_w("to", "TO"), _w("the", "DT"), _w("right", "NN"), _w("of", "IN")),
                 (_w("on", "IN"), _w("the", "DT"), _w("right", "NN"), _w("of", "IN"))),
    "above": ((_w("above", "IN"),), (_w("higher", "JJR", "high"), _w("than", "IN")), (_w("atop", "IN"),),
              (_w("over", "IN"),)),
    "below": ((_w("beneath", "IN"),), (_w("below", "IN"),), (_w("lower", "JJR", "low"), _w("than", "IN")),
              (_w("underneath", "IN"),), (_w("under", "IN"),)),
    "next_to": ((_w("next", "JJ"), _w("to", "TO")), (_w("beside", "IN"),)),
}

#: Absolute places: "on the left", "at the top", "in the middle" (preposition, noun).
PLACE_PHRASES: dict[str, tuple[tuple[Token, ...], ...]] = {
    "left": ((_w("on", "IN"), _w("the", "DT"), _w("left", "NN")),),
    "right": ((_w("on", "IN"), _w("the", "DT"), _w("right", "NN")),),
    "top": ((_w("at", "IN"), _w("the", "DT"), _w("top", "NN")), (_w("near", "IN"), _w("the", "DT"), _w("top", "NN"))),
    "bottom": ((_w("at", "IN"), _w("the", "DT"), _w("bottom", "NN")),
               (_w("near", "IN"), _w("the", "DT"), _w("bottom", "NN"))),
    "middle": ((_w("in", "IN"), _w("the", "DT"), _w("middle", "NN")), (_w("in", "IN"), _w("the", "DT"), _w("centre", "NN"))),
}

#: Concept -> surface synonyms, grouped by part of speech (for tests of the lexical similarities).
SYNONYM_GROUPS: dict[str, dict[str, tuple[str, ...]]] = {
    "noun": {**SHAPE_WORDS, **BACKGROUND_WORDS},
    "adjective": {**{k: v for k, v in COLOUR_WORDS.items()}, **SIZE_WORDS, **TEXTURE_ADJ},
    "verb": {f"{m}{'_animate' if a else ''}": tuple(v[1] for v in vs) for (m, a), vs in VERBS.items()},
}

#: Sentence frames an annotator may prefer.
FRAMES = ("copula", "verb", "fragment", "there", "front_bg", "picture")
#: Openings of the "picture" frame ("A picture of a red circle ...").
PICTURE_OPENINGS: tuple[tuple[Token, ...], ...] = (
    (_w("a", "DT"), _w("picture", "NN"), _w("of", "IN")), (_w("an", "DT"), _w("image", "NN"), _w("of", "IN")),
    (_w("a", "DT"), _w("photo", "NN"), _w("of", "IN")),
)


def synonym_sets() -> list[tuple[str, ...]]:
    """All synonym sets (lemmas) with more than one member: nouns, adjectives, verbs."""
    return [v for group in SYNONYM_GROUPS.values() for v in group.values() if len(v) > 1]


# ------------------------------------------------------------------------------------------- styles
@dataclass(frozen=True)
class AnnotatorStyle:
    """A simulated annotator's stable habits (all probabilities in [0, 1])."""

    ident: int
    preferred: dict                 # concept key -> index of the preferred synonym
    loyalty: float                  # probability of using the preferred synonym
    p_size: float
    p_colour: float
    p_texture: float
    p_background: float
    p_relation: float
    p_verb: float
    p_all_objects: float
    p_texture_pp: float
    p_place: float                  # state an object's absolute place ("on the left")
    p_invert: float                 # state a relation from the other object's side
    frame_weights: tuple[float, ...]
    relation_variant: dict          # relation -> preferred phrasing index
    colour_before_texture: bool


def _concepts():
    for table in (SHAPE_WORDS, COLOUR_WORDS, SIZE_WORDS, TEXTURE_ADJ):
        for k, v in table.items():
            yield ("w", k), len(v)
    for k, v in BACKGROUND_PHRASES.items():
        yield ("bg", k), len(v)
    for k, v in TEXTURE_PP.items():
        yield ("pp", k), len(v)
    for k, v in PLACE_PHRASES.items():
        yield ("place", k), len(v)
    for k, v in VERBS.items():
        yield ("v", k), len(v)
    for k, v in NOUN_PREPS.items():
        yield ("prep", k), len(v)
    yield ("picture",), len(PICTURE_OPENINGS)


def make_style(rng: np.random.Generator, ident: int = -1) -> AnnotatorStyle:
    """Draw one annotator.  Synonym preferences are Zipf-like (the first synonym is the most popular)."""
    preferred = {}
    for key, n in _concepts():
        p = 1.0 / np.arange(1, n + 1) ** 0.7
        preferred[key] = int(rng.choice(n, p=p / p.sum()))
    rel_var = {}
    for rel, phrases in RELATION_PHRASES.items():
        p = 1.0 / np.arange(1, len(phrases) + 1)
        rel_var[rel] = int(rng.choice(len(phrases), p=p / p.sum()))
    return AnnotatorStyle(
        ident=ident, preferred=preferred, loyalty=float(rng.uniform(*LOYALTY)),
        p_size=float(rng.uniform(0.2, 0.75)), p_colour=float(rng.uniform(0.75, 1.0)),
        p_texture=float(rng.uniform(0.25, 0.85)), p_background=float(rng.uniform(0.35, 0.95)),
        p_relation=float(rng.uniform(0.65, 1.0)), p_verb=float(rng.uniform(0.1, 0.7)),
        p_all_objects=float(rng.uniform(0.55, 0.95)), p_texture_pp=float(rng.uniform(0.0, 1.0)),
        p_place=float(rng.uniform(*P_PLACE)),
        p_invert=float(rng.uniform(0.0, P_INVERT_MAX)),
        frame_weights=tuple(float(x) for x in rng.dirichlet(np.full(len(FRAMES), 0.8))),
        relation_variant=rel_var, colour_before_texture=bool(rng.random() < 0.8),
    )


# ------------------------------------------------------------------------------------------- content
#: Probability that an annotator mentions the objects it picked in reading order (left to right, top to
#: bottom) rather than by salience; with a consistent order the five captions of an image share word
#: sequences ("a person left of a dog"), which the trigram kernel can use and a bag of words cannot.
READING_ORDER = 0.85
#: Annotators state a relation from the other object's side ("B is right of A") with a probability drawn
#: uniformly in [0, P_INVERT_MAX].
P_INVERT_MAX = 0.4
#: Range of an annotator's probability of stating an object's absolute place ("on the left").
P_PLACE = (0.7, 1.0)
#: Range of an annotator's probability of using its preferred synonym of a concept.
LOYALTY = (0.4, 0.8)
def select_facts(scene: Scene, style: AnnotatorStyle, rng: np.random.Generator) -> CaptionFacts:
    """What this annotator says about the scene: a subset of objects (salient / big ones first), some of
    their attributes, a relation between mentioned objects, maybe the background and a verb."""
    n = len(scene.objects)
    weights = np.array([2.0 if o.size == "big" else 1.0 for o in scene.objects])
    # weighted order without replacement (Efraimidis–Spirakis keys u^(1/w)), big objects first more often
    order = [int(i) for i in np.argsort(-(rng.random(n) ** (1.0 / weights)))]
    if n == 1:
        k = 1
    elif n == 2:
        k = 2 if rng.random() < style.p_all_objects else 1
    else:
        u = rng.random()
        k = 3 if u < style.p_all_objects * 0.7 else (2 if u < 0.97 else 1)
    objs = order[:k]
    if rng.random() < READING_ORDER:
        # annotators mostly describe a picture in reading order: left to right, top to bottom
        objs = sorted(objs, key=lambda i: scene.objects[i].x + scene.objects[i].y)
    mentions = []
    for o in objs:
        ob = scene.objects[o]
        tex = None
        if rng.random() < style.p_texture * (0.35 if ob.texture == "plain" else 1.0):
            tex = ob.texture
        place = None
        if rng.random() < style.p_place * (1.6 if n == 1 else 1.0):
            place = ob.places[int(rng.integers(len(ob.places)))]
        mentions.append(Mention(
            shape=ob.shape,
            colour=ob.colour if rng.random() < style.p_colour else None,
            texture=tex,
            size=ob.size if rng.random() < style.p_size else None,
            place=place,
        ))
    relations = []
    if k >= 2 and rng.random() < style.p_relation:
        relations.append((0, _pick_relation(scene, objs[0], objs[1], rng), 1))
    if k == 3 and rng.random() < style.p_relation:
        anchor = int(rng.integers(2))
        relations.append((2, _pick_relation(scene, objs[2], objs[anchor], rng), anchor))
    if k >= 2 and not relations and rng.random() < 0.3:
        # some annotators just list objects; others at least say they are next to each other
        rels = scene.true_relations(objs[0], objs[1])
        if "next_to" in rels:
            relations.append((0, "next_to", 1))
    background = scene.background if rng.random() < style.p_background else None
    # verbs mostly come with a named background ("floats on the lake"), rarely alone ("floats")
    medium = scene.medium if rng.random() < style.p_verb * (1.0 if background else 0.4) else None
    return CaptionFacts(tuple(mentions), tuple(relations), background, medium)


def _pick_relation(scene: Scene, a: int, b: int, rng: np.random.Generator, p_next_to: float = 0.2) -> str:
    """A true relation from object ``a`` to ``b``: a directional one (left / right / above / below),
    or "next to" with probability ``p_next_to`` when it holds."""
    rels = scene.true_relations(a, b)
    specific = [r for r in rels if r != "next_to"]
    if "next_to" in rels and (not specific or rng.random() < p_next_to):
        return "next_to"
    return specific[int(rng.integers(len(specific)))]


# ------------------------------------------------------------------------------------------- realiser
class Realiser:
    """Turns :class:`CaptionFacts` into tokens in one annotator's style."""

    def __init__(self, style: AnnotatorStyle, rng: np.random.Generator):
        self.s = style
        self.rng = rng

    def pick(self, key, options):
        if len(options) == 1:
            return options[0]
        if self.rng.random() < self.s.loyalty:
            return options[self.s.preferred.get(key, 0) % len(options)]
        return options[int(self.rng.integers(len(options)))]

    # -- phrases
    def noun(self, shape: str) -> Token:
        return _w(self.pick(("w", shape), SHAPE_WORDS[shape]), "NN")

    def texture_pp(self, texture: str) -> list[Token]:
        return [_w("with", "IN"), *self.pick(("pp", texture), TEXTURE_PP[texture])]

    def np(self, m: Mention, definite: bool = False, full: bool = True) -> list[Token]:
        """"a big red striped circle" / "a big red circle with stripes" / "the red circle"."""
        adjs: list[Token] = []
        if full and m.size is not None:
            adjs.append(_w(self.pick(("w", m.size), SIZE_WORDS[m.size]), "JJ"))
        colour = None if m.colour is None else _w(self.pick(("w", m.colour), COLOUR_WORDS[m.colour]), "JJ")
        tex_pp = full and m.texture is not None and self.rng.random() < self.s.p_texture_pp
        texture = None
        if full and m.texture is not None and not tex_pp:
            texture = _w(self.pick(("w", m.texture), TEXTURE_ADJ[m.texture]), "JJ")
        pair = [colour, texture] if self.s.colour_before_texture else [texture, colour]
        adjs.extend(t for t in pair if t is not None)
        words = adjs + [self.noun(m.shape)]
        det = _w("the", "DT") if definite else _article(words[0][0])
        out = [det] + words
        if tex_pp:
            out += self.texture_pp(m.texture)
        if full and m.place is not None:
            out += self.place(m.place)
        return out

    def place(self, place: str) -> list[Token]:
        return list(self.pick(("place", place), PLACE_PHRASES[place]))

    def relation(self, rel: str) -> list[Token]:
        phrases = RELATION_PHRASES[rel]
        if self.rng.random() < self.s.loyalty:
            return list(phrases[self.s.relation_variant[rel] % len(phrases)])
        return list(phrases[int(self.rng.integers(len(phrases)))])

    def background(self, bg: str) -> list[Token]:
        phrase = list(self.pick(("bg", bg), BACKGROUND_PHRASES[bg]))
        prep = self.pick(("prep", phrase[-1][0]), NOUN_PREPS[phrase[-1][0]])
        return [_w(prep, "IN"), _w("the", "DT")] + phrase

    def verb(self, medium: str, form: int, animate: bool = False) -> Token:
        v = self.pick(("v", (medium, animate)), VERBS[(medium, animate)])
        tag = ("VBZ", "VBP", "VBG")[form]
        return _w(v[form], tag, v[1])

    # -- sentences
    def realise(self, f: CaptionFacts) -> list[Token]:
        rng = self.rng
        frames = list(FRAMES)
        w = np.array(self.s.frame_weights, float)
        if f.background is None:
            w[frames.index("front_bg")] = 0.0
        if f.medium is not None:
            w[frames.index("fragment")] = 0.0
        frame = frames[min(len(frames) - 1, int(np.searchsorted(np.cumsum(w), rng.random() * w.sum(),
                                                                 side="right")))]
        # a verb states the medium ("floats" -> water): used exactly when the facts state a medium
        verb_medium = f.medium
        if frame == "verb" and verb_medium is None:
            frame = "copula"

        mentioned: set[int] = set()

        def ref(i: int) -> list[Token]:
            if i in mentioned:
                m = f.mentions[i]
                return self.np(Mention(m.shape, m.colour), definite=True, full=False)
            mentioned.add(i)
            return self.np(f.mentions[i])

        clauses: list[list[Token]] = []
        rels = list(f.relations)
        first = True
        for i, rel, j in rels:
            if i in mentioned and j not in mentioned or (first and rng.random() < self.s.p_invert):
                i, rel, j = j, INVERSE[rel], i
            subj = ref(i)
            relw = self.relation(rel)
            obj = ref(j)
            animate = f.mentions[i].shape in ANIMATE
            if first:
                clauses.append(self._clause(frame, subj, relw + obj, verb_medium, False, animate))
                first = False
            else:
                pred = [self.verb(verb_medium, 0, animate)] if verb_medium and rng.random() < 0.5 else [
                    _w("is", "VBZ", "be")]
                clauses.append(subj + pred + relw + obj)
        rest = [i for i in range(len(f.mentions)) if i not in mentioned]
        if rest:
            nps = [ref(i) for i in rest]
            listed: list[Token] = []
            for k, np_ in enumerate(nps):
                if k and k == len(nps) - 1:
                    listed.append(_w("and", "CC"))
                elif k:
                    listed.append(_w(",", ","))
                listed += np_
            if first:
                clauses.append(self._clause(frame, listed, [], verb_medium, len(nps) > 1,
                                            len(nps) == 1 and f.mentions[rest[0]].shape in ANIMATE))
            else:
                clauses.append([_w("there", "EX"), _w("are" if len(nps) > 1 else "is", "VBP" if len(nps) > 1
                                                        else "VBZ", "be")] + listed)
        toks = clauses[0]
        if f.background is not None:
            bg = self.background(f.background)
            if frame == "front_bg":
                toks = bg + [_w(",", ",")] + toks
            else:
                toks = toks + bg
        for c in clauses[1:]:
            toks = toks + [_w(",", ","), _w("and", "CC")] + c
        toks = toks + [_w(".", ".")]
        return _capitalise(toks)

    def _clause(self, frame: str, subj: list[Token], pred_rest: list[Token], verb_medium: str | None,
                plural: bool, animate: bool) -> list[Token]:
        """One clause: subject + predicate according to the frame."""
        be = _w("are", "VBP", "be") if plural else _w("is", "VBZ", "be")
        if frame == "picture":
            opening = list(self.pick(("picture",), PICTURE_OPENINGS))
            verb = [] if verb_medium is None else [self.verb(verb_medium, 2, animate)]
            return opening + subj + verb + pred_rest
        if verb_medium is not None:
            if frame == "there":
                return [_w("there", "EX"), be] + subj + [self.verb(verb_medium, 2, animate)] + pred_rest
            return subj + [self.verb(verb_medium, 1 if plural else 0, animate)] + pred_rest
        if frame == "there":
            return [_w("there", "EX"), be] + subj + pred_rest
        if frame == "fragment" or (not pred_rest and frame not in ("copula", "front_bg")):
            return subj + pred_rest
        if not pred_rest:  # copula without predicate: "There is a red circle"
            return [_w("there", "EX"), be] + subj
        return subj + [be] + pred_rest


def _article(next_word: str) -> Token:
    return _w("an", "DT") if next_word[0] in "aeiou" else _w("a", "DT")


def _capitalise(toks: list[Token]) -> list[Token]:
    s, l, t = toks[0]
    first = (s[0].upper() + s[1:], (l[0].upper() + l[1:]) if l == s else l, t)
    return [first] + toks[1:]


def join_tokens(toks: list[Token]) -> tuple[str, str, tuple[str, ...]]:
    """(text, lemma, pos) from tokens: text with no space before punctuation; lemma space-joined with
    punctuation as separate tokens (Flickr8k.lemma.token.txt style); Penn tags aligned with the lemmas."""
    parts: list[str] = []
    for s, _, _ in toks:
        if s in (",", ".") and parts:
            parts[-1] += s
        else:
            parts.append(s)
    return " ".join(parts), " ".join(l for _, l, _ in toks), tuple(t for _, _, t in toks)


# ------------------------------------------------------------------------------------------- describe
def describe_units(scene: Scene, rng: np.random.Generator) -> tuple[list[list[Token]], list[str],
                                                                     list[CaptionFacts]]:
    """A long caption stating every object with all its attributes and a place, the background and one
    relation from the first object to each other object, cut into *detail units* that each add new
    visual information (SPECS, Chen et al., Sec. 4.2)::

        "A big red circle" | "with stripes" | "on the left" | "on the grass" |
        "left of a small blue square" | "with dots" | "on the right" | "and above a green star" | ...

    Returns the tokens of each unit, the unit kinds (``core`` / ``texture`` / ``place`` /
    ``background`` / ``relation``) and the facts of every cumulative caption ``units[:t + 1]`` (the
    last one: the whole caption).  No final full stop: the caption text is exactly the units joined
    with single spaces.
    """
    style = make_style(rng)
    style = AnnotatorStyle(**{**style.__dict__, "p_texture_pp": 0.0, "loyalty": 0.5})
    R = Realiser(style, rng)
    n = len(scene.objects)
    order = [0] + list(1 + rng.permutation(n - 1)) if n > 1 else [0]
    objs = [scene.objects[i] for i in order]
    units: list[list[Token]] = []
    kinds: list[str] = []
    prefixes: list[CaptionFacts] = []
    mentions: list[dict] = []
    relations: list[tuple[int, str, int]] = []
    state = {"background": None}

    def emit(kind: str, toks: list[Token]) -> None:
        units.append(toks)
        kinds.append(kind)
        prefixes.append(CaptionFacts(tuple(Mention(**m) for m in mentions), tuple(relations),
                                     state["background"], None))

    def object_units(k: int) -> None:
        o = objs[k]
        mentions[k]["texture"] = o.texture
        emit("texture", R.texture_pp(o.texture))
        place = o.places[int(rng.integers(len(o.places)))]
        mentions[k]["place"] = place
        emit("place", R.place(place))

    mentions.append(dict(shape=objs[0].shape, colour=objs[0].colour, size=objs[0].size))
    emit("core", _capitalise(R.np(Mention(objs[0].shape, objs[0].colour, None, objs[0].size))))
    object_units(0)
    state["background"] = scene.background
    emit("background", R.background(scene.background))
    for k in range(1, n):
        rel = _pick_relation(scene, order[0], order[k], rng, p_next_to=0.0)
        o = objs[k]
        mentions.append(dict(shape=o.shape, colour=o.colour, size=o.size))
        relations.append((0, rel, k))
        emit("relation", ([_w("and", "CC")] if k > 1 else []) + R.relation(rel)
             + R.np(Mention(o.shape, o.colour, None, o.size)))
        object_units(k)
    return units, kinds, prefixes


def unit_text(unit: list[Token]) -> str:
    return join_tokens(unit)[0]

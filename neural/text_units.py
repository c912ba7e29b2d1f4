"""Noun chunks (BRIDGE templates) and detail units (SPECS) from POS tags and NLTK regexp chunk grammars.

Two caption analyses used by the scorers of ``neural/``:

* :func:`noun_chunks` / :func:`mask_templates` — the noun chunks of a caption (NLTK ``RegexpParser`` with
  the NP grammar :data:`NP_GRAMMAR`) and BRIDGE's *template* replicas, one per chunk, with that chunk
  replaced by ``n_pseudo`` mask slots (Sarto et al., ECCV 2024, Sec. 3.2: US = 3 pseudo-tokens per chunk).
* :func:`detail_units` / :func:`cumulative_captions` — SPECS' *detail units* (Chen et al., Sec. 4.2):
  segments that each add new visual information, from a cascaded chunk grammar
  (:data:`UNIT_GRAMMAR`: NP → PP → VP → CLAUSE; subordinators such as "while" are re-tagged ``SUB`` so
  they open a clause instead of a PP) plus three merge rules from the paper:

  1. a sentence-initial noun phrase that starts with "The"/"This"/"These"/"Those" (``"The image …"``,
     ``"The man in a red shirt …"``) is not split from what follows in its sentence;
  2. a prepositional phrase is not split from its preceding noun phrase;
  3. a segment that starts with a preposition (``IN`` / ``TO``) is not a unit of its own unless it
     contains a verb (so ``"on the grass"`` joins the previous unit, ``"while a woman watches"`` —
     tagged ``IN`` … ``VBZ`` — stays separate); a sentence-initial one (``"In the snow, …"``) has no
     previous unit and joins the next one instead.

  Rule 2 is the special case of rule 3 for PPs; both are applied.  Loose tokens that are only
  punctuation join the previous unit; other loose tokens without a noun or verb (``"and"``) join the
  next one, and so does an existential "there" (``"There is a dog …"`` is one unit, not ``"There"`` +
  ``"is a dog …"``).

Units are *character spans* of the original text, so ``cumulative_captions`` returns exact prefixes
``c_1 ⊂ c_2 ⊂ …`` of the caption (no re-tokenisation artefacts).

POS tags come from the corpus when it has them (``Caption.pos`` aligned one-to-one with the caption's
tokens, as the teaching set provides) and otherwise from NLTK's averaged perceptron tagger, looked up in
``$NLTK_DATA`` / the shared ``nltk_data`` folder (:func:`corpora.paths.ensure_nltk_data_path`); when the
tagger is missing a :class:`LookupError` names the resource and how to install it — nothing downloads.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from corpora.nltk_resources import MissingResourceError, ensure_pos_tagger

__all__ = [
    "NP_GRAMMAR", "UNIT_GRAMMAR", "Token", "Span", "tokenize", "pos_tag", "noun_chunks",
    "mask_templates", "MaskTemplate", "DETERMINER_TAGS", "detail_units", "cumulative_captions",
]

#: Noun-phrase grammar over Penn tags (determiner / possessive / number, any modifiers, a head noun).
#: ``VBG`` is deliberately not a modifier (``"a man riding bikes"`` must not become one NP).
NP_GRAMMAR = r"""
NP: {<DT|PDT|PRP\$|CD>*<JJ.*|VBN|NN.*|POS>*<NN.*>}
    {<PRP>}
"""

#: Cascaded grammar for SPECS detail units: NP, then PP (preposition + NP), then VP (verb group with its
#: objects / PPs), then CLAUSE (subordinator or relative pronoun, optional subject NP, VP).
UNIT_GRAMMAR = r"""
NP: {<DT|PDT|PRP\$|CD>*<JJ.*|VBN|NN.*|POS>*<NN.*>}
    {<PRP|EX>}
PP: {<IN|TO><NP>}
VP: {<MD|RB.*>*<VB.*>+<RP|RB.*>*<NP|PP|JJ.*>*}
CLAUSE: {<SUB|WDT|WP|WRB|CC><NP>?<VP>}
"""

#: Subordinating conjunctions (tagged ``IN`` by Penn) that open a clause rather than a PP; they are
#: re-tagged ``SUB`` for chunking only.
SUBORDINATORS = frozenset({"while", "whilst", "because", "although", "though", "whereas", "when", "where",
                           "if", "unless", "until", "that", "which"})

_TOKEN_RE = re.compile(r"[A-Za-z0-9]+(?:[-'][A-Za-z0-9]+)*|[^\sA-Za-z0-9]")
_PUNCT_TAGS = {".", ",", ":", "``", "''", "(", ")", "-LRB-", "-RRB-", "#", "$", "SYM"}
_INITIAL_DETERMINERS = {"the", "this", "these", "those"}


@dataclass(frozen=True)
class Token:
    """A token of a caption: its text, Penn tag and character span ``[start, end)``."""

    text: str
    tag: str
    start: int
    end: int


@dataclass(frozen=True)
class Span:
    """A labelled character span ``text[start:end]`` (a noun chunk or a detail unit)."""

    text: str
    start: int
    end: int
    label: str


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """Words (with inner hyphens / apostrophes) and single punctuation marks, with character spans."""
    return [(m.group(), m.start(), m.end()) for m in _TOKEN_RE.finditer(text)]


@lru_cache(maxsize=1)
def _tagger():
    """NLTK's English POS tagger; its resource is found or downloaded by
    :func:`corpora.nltk_resources.ensure_pos_tagger` (a :class:`~corpora.nltk_resources.MissingResourceError`
    naming it when offline)."""
    try:
        ensure_pos_tagger()
    except MissingResourceError as exc:
        raise MissingResourceError(f"{exc} (or pass POS tags explicitly: Caption.pos)") from None
    import nltk  # lazy: nltk takes seconds to import; only untagged text needs the tagger

    return nltk.pos_tag


def pos_tag(text: str, tags: Sequence[str] | None = None) -> list[Token]:
    """Tokenise ``text`` and attach Penn tags.

    Parameters
    ----------
    text : str
    tags : sequence of str, optional
        Tags aligned one-to-one with :func:`tokenize`'s tokens (e.g. ``Caption.pos`` from the teaching
        set).  Used only when the lengths agree; otherwise NLTK's tagger tags the tokens.
    """
    toks = tokenize(text)
    if tags is not None and len(tags) == len(toks):
        tag_list = list(tags)
    elif toks:
        tag_list = [t for _, t in _tagger()([w for w, _, _ in toks])]
    else:
        tag_list = []
    return [Token(w, t, s, e) for (w, s, e), t in zip(toks, tag_list)]


@lru_cache(maxsize=4)
def _parser(grammar: str):
    import nltk  # lazy: nltk takes seconds to import (BRIDGE / SPECS import this module at their top)

    return nltk.RegexpParser(grammar)


def _leaves(tree) -> list[int]:
    """Token indices under a chunk tree (leaves are ``(index, tag)`` pairs)."""
    return [leaf[0] for leaf in tree.leaves()]


def _parse(tokens: Sequence[Token], grammar: str):
    """Top-level pieces ``[(label, [token indices])]``; loose tokens get label ``"O"``."""
    if not tokens:
        return []
    tags = ["SUB" if t.tag == "IN" and t.text.lower() in SUBORDINATORS else t.tag for t in tokens]
    tree = _parser(grammar).parse(list(enumerate(tags)))
    pieces = []
    for node in tree:
        if hasattr(node, "label"):
            pieces.append((node.label(), _leaves(node)))
        else:
            pieces.append(("O", [node[0]]))
    return pieces


def _span(text: str, tokens: Sequence[Token], idx: Sequence[int], label: str) -> Span:
    s, e = tokens[idx[0]].start, tokens[idx[-1]].end
    return Span(text[s:e], s, e, label)


def noun_chunks(text: str, tags: Sequence[str] | None = None) -> list[Span]:
    """Noun chunks of a caption (NLTK ``RegexpParser`` over :data:`NP_GRAMMAR`), left to right.

    Pronouns are chunked by the grammar but dropped here: they carry no visual content to re-predict.
    """
    tokens = pos_tag(text, tags)
    out = []
    for label, idx in _parse(tokens, NP_GRAMMAR):
        if label == "NP" and any(tokens[i].tag.startswith("NN") for i in idx):
            out.append(_span(text, tokens, idx, "NP"))
    return out


@dataclass(frozen=True)
class MaskTemplate:
    """One BRIDGE template replica: ``prefix + [MASK]×n + suffix`` with the masked noun ``chunk``."""

    prefix: str
    suffix: str
    chunk: str
    n_pseudo: int = 3

    def render(self, mask_word: str = "[MASK]") -> str:
        """The template as text, each mask slot written as ``mask_word``."""
        mid = " ".join([mask_word] * self.n_pseudo)
        return " ".join(p for p in (self.prefix.strip(), mid, self.suffix.strip()) if p)


#: Tags of the determiners kept outside the mask (Penn Treebank: determiner, predeterminer).
DETERMINER_TAGS = frozenset({"DT", "PDT"})


def mask_templates(text: str, tags: Sequence[str] | None = None, n_pseudo: int = 3) -> list[MaskTemplate]:
    """BRIDGE template captions: one replica per noun chunk with the chunk replaced by ``n_pseudo`` slots
    (Sarto et al. 2024, Sec. 3.2, Fig. 2: "A [MASK] running with a [MASK]").  The chunk's leading
    determiners (:data:`DETERMINER_TAGS`) stay outside the mask, in the prefix; ``chunk`` is the masked
    rest.  A caption without noun chunks yields one replica masking the whole caption, so every image
    keeps at least one pseudo-caption."""
    tokens = pos_tag(text, tags)
    chunks = noun_chunks(text, tags)
    if not chunks:
        return [MaskTemplate("", "", text.strip(), n_pseudo)]
    out = []
    for c in chunks:
        inside = [t for t in tokens if t.start >= c.start and t.end <= c.end]
        k = 0
        while k < len(inside) - 1 and inside[k].tag in DETERMINER_TAGS:
            k += 1
        start = inside[k].start if inside else c.start
        out.append(MaskTemplate(text[:start], text[c.end:], text[start:c.end], n_pseudo))
    return out


# ---------------------------------------------------------------------------------------- detail units
def _has_verb(tokens: Sequence[Token], idx: Sequence[int]) -> bool:
    return any(tokens[i].tag.startswith("VB") or tokens[i].tag == "MD" for i in idx)


def _has_content(tokens: Sequence[Token], idx: Sequence[int]) -> bool:
    return any(tokens[i].tag.startswith(("NN", "VB", "JJ", "PRP", "CD", "RB")) for i in idx)


def _sentences(tokens: Sequence[Token]) -> list[list[int]]:
    sents, cur = [], []
    for i, t in enumerate(tokens):
        cur.append(i)
        if t.text in {".", "!", "?"}:
            sents.append(cur)
            cur = []
    if cur:
        sents.append(cur)
    return sents


def _segment_sentence(tokens: Sequence[Token], sent: Sequence[int], merge_initial_the: bool) -> list[list[int]]:
    sub = [tokens[i] for i in sent]
    pieces = [(lab, [sent[j] for j in idx]) for lab, idx in _parse(sub, UNIT_GRAMMAR)]
    # group consecutive loose tokens
    segs: list[tuple[str, list[int]]] = []
    for lab, idx in pieces:
        if lab == "O" and segs and segs[-1][0] == "O":
            segs[-1][1].extend(idx)
        else:
            segs.append((lab, list(idx)))
    # loose tokens: punctuation-only -> previous; no noun/verb content -> next; else keep as a segment
    merged: list[tuple[str, list[int]]] = []
    carry: list[int] = []
    for lab, idx in segs:
        if lab == "O" and merged:  # leading punctuation of a loose run closes the previous segment
            n_p = 0
            while n_p < len(idx) and tokens[idx[n_p]].tag in _PUNCT_TAGS:
                n_p += 1
            merged[-1][1].extend(idx[:n_p])
            idx = idx[n_p:]
            if not idx:
                continue
        if lab == "O" and not _has_content(tokens, idx):
            carry.extend(idx)
            continue
        merged.append((lab, carry + idx))
        carry = []
    if carry:
        if merged:
            merged[-1][1].extend(carry)
        else:
            merged.append(("O", carry))
    # rules 2 + 3: a segment starting with a preposition joins the previous one unless it has a verb
    #     (a sentence-initial one, with nothing before it, joins the next segment instead)
    out: list[tuple[str, list[int]]] = []
    pending: list[int] = []
    for lab, idx in merged:
        first = tokens[idx[0]]
        starts_prep = first.tag in ("IN", "TO") and first.text.lower() not in SUBORDINATORS
        if (lab == "PP" or starts_prep) and not _has_verb(tokens, idx):
            if pending or not out:   # sentence-initial phrases ("In the park on the grass,") wait together
                pending.extend(idx)
            else:
                out[-1] = (out[-1][0], out[-1][1] + idx)
            continue
        out.append((lab, pending + idx))
        pending = []
    if pending:
        out.append(("PP", pending))
    # rule 1: sentence-initial "The …" noun phrase stays with the next segment
    if (merge_initial_the and len(out) > 1 and out[0][0] == "NP"
            and tokens[out[0][1][0]].text.lower() in _INITIAL_DETERMINERS):
        out[0:2] = [(out[1][0], out[0][1] + out[1][1])]
    # an existential "there" (EX) adds no visual detail: it stays with the segment it introduces, also
    # when rule 3 has already put a fronted phrase before it ("On the sand, there" + "is a cross …")
    k = 0
    while k < len(out) - 1:
        if tokens[out[k][1][-1]].tag == "EX":
            out[k:k + 2] = [(out[k + 1][0], out[k][1] + out[k + 1][1])]
        else:
            k += 1
    return [idx for _, idx in out]


def detail_units(text: str, tags: Sequence[str] | None = None, *, merge_initial_the: bool = True) -> list[Span]:
    """Segment a caption into SPECS detail units (Chen et al., Sec. 4.2).

    Parameters
    ----------
    text : str
        The caption (one or more sentences).
    tags : sequence of str, optional
        Penn tags aligned with :func:`tokenize` (else NLTK tags them).
    merge_initial_the : bool
        Apply rule 1 (sentence-initial "The …" NP not split off).

    Returns
    -------
    list of Span
        Consecutive, non-overlapping spans of ``text`` covering every token, left to right.
    """
    tokens = pos_tag(text, tags)
    units = []
    for sent in _sentences(tokens):
        for idx in _segment_sentence(tokens, sent, merge_initial_the):
            units.append(_span(text, tokens, idx, "UNIT"))
    return units


def cumulative_captions(text: str, units: Sequence[Span] | None = None) -> list[str]:
    """``c_k = text[:end of unit k]`` for k = 1..K (SPECS' cumulative captions c_1 ⊂ c_2 ⊂ … ⊂ c_K)."""
    units = detail_units(text) if units is None else units
    return [text[: u.end].strip() for u in units]

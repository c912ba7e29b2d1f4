"""NLTK resources, found offline: the data files the text side and METEOR read (stop words, tagger,
WordNet, the Brown corpus).

:func:`nltk_resource` looks in ``$NLTK_DATA`` and the shared ``nltk_data`` folder
(:func:`corpora.paths.ensure_nltk_data_path`), downloads only when the network is reachable, and otherwise
raises :class:`MissingResourceError` naming what is missing and how to get it.  :func:`english_wordnet` is
the one WordNet reader the toolkit uses (lemmatiser, Lin and alignment similarities, METEOR);
:func:`english_stopwords` the one stop-word list (text kernels, Hodosh's caption metrics) and
:func:`ensure_pos_tagger` the one check for NLTK's POS tagger (text kernels, SPECS detail units).
"""
from __future__ import annotations

import threading
from functools import lru_cache

from corpora.paths import ensure_nltk_data_path, network_problem

__all__ = ["MissingResourceError", "find_resource", "nltk_resource", "english_wordnet", "english_stopwords",
           "ensure_pos_tagger"]


class MissingResourceError(LookupError):
    """An NLTK resource is missing and cannot be downloaded (offline)."""


def find_resource(path: str):
    """``nltk.data.find(path)``, also finding a folder resource left zipped (``corpora/wordnet.zip``, as
    ``nltk.downloader`` leaves WordNet): NLTK looks inside the zip only for a path ending in ``/``."""
    import nltk  # heavy (seconds to import): imported only when an NLTK resource is needed

    try:
        return nltk.data.find(path)
    except LookupError:
        if path.endswith("/"):
            raise
        return nltk.data.find(path + "/")


def nltk_resource(path: str, package: str):
    """Make sure NLTK resource ``path`` (e.g. ``"corpora/stopwords"``) is available; returns NLTK's
    path pointer to it (a folder, or the folder inside its zip file).

    Looks in ``$NLTK_DATA`` and the shared ``nltk_data`` folder (:func:`corpora.paths.ensure_nltk_data_path`);
    if absent, downloads ``package`` only when the network is reachable, else raises
    :class:`MissingResourceError` naming what is missing and how to get it.
    """
    import nltk  # heavy (seconds to import): imported only when an NLTK resource is needed

    ensure_nltk_data_path()
    try:
        return find_resource(path)
    except LookupError:
        pass
    if network_problem("raw.githubusercontent.com", 443, timeout=2.0) is None:
        nltk.download(package, quiet=True)
        try:
            return find_resource(path)
        except LookupError:
            pass
    raise MissingResourceError(
        f"NLTK resource {path!r} not found (searched {list(nltk.data.path)}). Install it with "
        f"`python -m nltk.downloader -d <dir> {package}` on a machine with network access and point "
        f"NLTK_DATA (or ITR_SHARED/nltk_data) at <dir>."
    )


@lru_cache(maxsize=1)
def english_stopwords() -> frozenset[str]:
    """NLTK's English stop-word list (179 words in NLTK 3.x), via :func:`nltk_resource`."""
    nltk_resource("corpora/stopwords", "stopwords")
    from nltk.corpus import stopwords  # heavy (nltk): imported only when the list is needed

    return frozenset(w.lower() for w in stopwords.words("english"))


def ensure_pos_tagger() -> None:
    """Make sure the resource of ``nltk.pos_tag`` (``averaged_perceptron_tagger_eng``) is available
    (:func:`nltk_resource`)."""
    nltk_resource("taggers/averaged_perceptron_tagger_eng", "averaged_perceptron_tagger_eng")


#: Serialises the first :func:`english_wordnet` call (one load even when two threads ask at once).
_WORDNET_LOCK = threading.Lock()


def english_wordnet():
    """NLTK's WordNet reader for English, as ``nltk.corpus.wordnet`` but without the multilingual (OMW)
    sense map; loaded once (thread-safe) and memoised.

    NLTK ≥ 3.8 maps WordNet 3.0 synset offsets onto the loaded WordNet's at load, for Open Multilingual
    WordNet data, and builds that map even when the loaded WordNet *is* 3.0 (``map_wn`` compares the
    version number with the corpus name): a load takes about 4 s here, 1.4–2.5 s without the map.  The
    toolkit uses only English lookups (``synsets``, ``_morphy``, hypernyms), which never read the map, so
    this reader skips it (``map_wn`` → ``None``, as NLTK itself returns when no mapping is needed); answers
    are identical (tested against ``nltk.corpus.wordnet``).  Multilingual functions are not available.
    """
    with _WORDNET_LOCK:
        return _english_wordnet()


@lru_cache(maxsize=1)
def _english_wordnet():
    root = nltk_resource("corpora/wordnet", "wordnet")
    from nltk.corpus.reader.wordnet import WordNetCorpusReader  # heavy (nltk): imported only when needed

    class EnglishWordNet(WordNetCorpusReader):
        def __init__(self, root):
            # No OMW reader.  NLTK warns "The multilingual functions are not available …" when it is None;
            # a falsy stand-in during construction skips that warning without touching the warnings
            # filters (not thread-safe: WordNet may load on a background thread, see
            # experiments.classical_stage.start_warm_up), then the reader holds None as before.
            super().__init__(root, False)
            self._omw_reader = None

        def map_wn(self, version="wordnet"):
            return None

    return EnglishWordNet(root)

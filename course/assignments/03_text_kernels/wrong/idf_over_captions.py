def idf(docs):
    """Document frequency over captions instead of training images: every occurrence counts (a word is
    in about one place per caption), and |D| is the number of captions."""
    df = Counter(w for d in docs for w in d)
    n = 5 * len(docs)
    return {w: max(math.log(n / (c + 1)), 0.0) for w, c in df.items()}, max(math.log(n), 0.0)

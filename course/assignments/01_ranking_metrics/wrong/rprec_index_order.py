def r_precision(scores, relevance):
    """Ties broken by column order (a stable sort) instead of pessimistically."""
    scores = np.asarray(scores, dtype=np.float64)
    relevance = np.asarray(relevance, dtype=bool)
    out = []
    for s, rel in zip(scores, relevance):
        r = int(rel.sum())
        top = np.argsort(-s, kind="stable")[:r]
        out.append(rel[top].sum() / r)
    return 100.0 * float(np.mean(out))

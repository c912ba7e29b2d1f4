def gold_rank(scores, gold):
    """Optimistic ties: only strictly better candidates count."""
    scores = np.asarray(scores, dtype=np.float64)
    g = scores[np.arange(len(gold)), gold][:, None]
    return 1 + (scores > g).sum(axis=1)


def recall_at_k(ranks, k):
    return 100.0 * float(np.mean(np.asarray(ranks) <= k))


def median_rank(ranks):
    return float(np.median(ranks))

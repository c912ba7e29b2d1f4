LAMBDA_M = 0.5


def tri_features(tokens):
    """Only contiguous n-grams: no gaps, so 'dog ... grass' is not a feature."""
    f = Counter()
    for l in (1, 2, 3):
        for i in range(len(tokens) - l + 1):
            f[tuple(tokens[i:i + l])] += LAMBDA_M ** l
    return f


def tri_kernel(A, B):
    FA, FB = [tri_features(d) for d in A], [tri_features(d) for d in B]
    def dot(f, g):
        return sum(x * g.get(u, 0.0) for u, x in f.items())
    na, nb = [math.sqrt(dot(f, f)) or 1.0 for f in FA], [math.sqrt(dot(g, g)) or 1.0 for g in FB]
    return np.array([[dot(f, g) / (x * y) for g, y in zip(FB, nb)] for f, x in zip(FA, na)])

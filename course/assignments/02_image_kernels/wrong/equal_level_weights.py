def pyramid_match(PX, PY, levels=3):
    """Every level weighted equally instead of the paper's 1/4, 1/4, 1/2."""
    PX, PY = np.asarray(PX, dtype=np.float64), np.asarray(PY, dtype=np.float64)
    K, start = 0.0, 0
    for l in range(levels):
        stop = start + 4 ** l * N_WORDS
        K = K + intersection_kernel(PX[:, start:stop] / 4 ** l, PY[:, start:stop] / 4 ** l) / levels
        start = stop
    return K

def kendall_tau_c(x, y):
    """τ-b instead of τ-c: normalises by the untied pairs instead of Stuart's m / (m − 1) factor."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    s = np.triu(dx * dy, 1).sum()
    nx, ny = np.triu(dx != 0, 1).sum(), np.triu(dy != 0, 1).sum()
    return float(s / np.sqrt(nx * ny))

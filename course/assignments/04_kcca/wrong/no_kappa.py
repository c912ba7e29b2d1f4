def kcca(Kx, Ky, reg, n_components=20):
    """KCCA without the κ regulariser: pseudo-inverses instead of (K + κI)^-1 (reg is ignored)."""
    Kx, Ky = center(Kx), center(Ky)
    M = np.linalg.pinv(Kx) @ Ky @ np.linalg.pinv(Ky) @ Kx
    vals, vecs = np.linalg.eig(M)
    order = np.argsort(-vals.real)[:n_components]
    rho = np.sqrt(np.clip(vals.real[order], 0.0, None))
    alpha = vecs.real[:, order]
    beta = np.linalg.pinv(Ky) @ Kx @ alpha
    def normalise(A, K):
        return A / np.sqrt(np.einsum("nk,nk->k", A, (K @ K) @ A))
    return rho, normalise(alpha, Kx), normalise(beta, Ky)

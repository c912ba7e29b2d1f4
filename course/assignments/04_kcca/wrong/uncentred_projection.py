def project(K_train, K_new, A):
    """New rows projected without centring them with the training statistics."""
    return np.asarray(K_new, dtype=np.float64) @ A


def affinity(Kx_train, Ky_train, Kx_new, Ky_new, alpha, beta, n):
    P = project(Kx_train, Kx_new, alpha[:, :n])
    Q = project(Ky_train, Ky_new, beta[:, :n])
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    return P @ Q.T

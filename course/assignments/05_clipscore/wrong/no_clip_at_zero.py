def clip_s(V, C, w=2.5):
    """Forgets the clipping at 0: negative cosines give negative scores."""
    return w * np.einsum("nd,nd->n", np.asarray(V, dtype=np.float64), np.asarray(C, dtype=np.float64))

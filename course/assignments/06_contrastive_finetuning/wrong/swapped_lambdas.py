LAMBDA_V, LAMBDA_T = 0.1, 0.05


def pacs_loss(v, t, v_gen, t_gen, logit_scale):
    """λ_v and λ_t swapped (0.1 on the generated images, 0.05 on the generated captions)."""
    return (info_nce(v, t, logit_scale) + LAMBDA_V * info_nce(v_gen, t, logit_scale)
            + LAMBDA_T * info_nce(v, t_gen, logit_scale))

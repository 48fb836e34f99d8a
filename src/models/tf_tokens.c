/* The token models (gpt, llama) but for their layouts: token embeddings, with learned positions
 * where the family declared a position table; the layer stack; the final norm (of the layers'
 * kind) and the LM head over the padded vocabulary, tied to the token embeddings where the family
 * made lm_head the same offset as wte. Calls down into the stack and the shared helpers only. */
#include "models/tf_tokens.h"

#include "models/tf_stack.h"
#include "sdp/check.h"

#define P tf_param
#define G tf_grad

void tf_tokens_build(sdp_tf *m, sdp_model_mode mode) {
    const size_t N = (size_t)m->B * m->T;
    tf_alloc_params(m, mode);
    m->inputs = tf_ints(m, N);
    m->targets = tf_ints(m, N);
    tf_stack_alloc(m, mode);
    tf_head_alloc(m, N);
    tf_stack_alloc_backward(m, mode);
}

static void free_tokens(sdp_tf *m) {
    m->be->free(m->be, m->inputs);
}

/* The embeddings of the inputs into m->embed, dropped where this forward drops. */
static void embed(sdp_tf *m, const int *inputs, int B, int T) {
    SDP_ASSERT(B <= m->B && T <= m->T && B * T <= m->B * m->T);
    const int N = B * T, V = m->cfg.model.vocab, C = m->cfg.model.width;
    for (int i = 0; i < N; i++)
        SDP_CHECK(inputs[i] >= 0 && inputs[i] < V,
                  "token id %d is outside the model's vocabulary of %d: the data does not match "
                  "the model (check --vocab)",
                  inputs[i], V);
    const sdp_backend *be = m->be;
    be->upload(be, m->inputs, inputs, (size_t)N * sizeof(int));
    m->last_B = B;
    m->last_T = T;
    sdp_embed_fwd(be, m->embed, m->inputs, P(m, m->off.wte), P(m, m->off.wpe), B, T, C);
    tf_stack_drop_stem(m, B, T);
}

/* The staged forward's stem: it evaluates, without dropout. */
static void stem(sdp_tf *m, const int *inputs, int B, int T) {
    tf_stack_begin_forward(m, false);
    embed(m, inputs, B, T);
}

static void stem_backward(sdp_tf *m, int B, int T) {
    sdp_embed_bwd(m->be, G(m, m->goff.wte), G(m, m->goff.wpe), tf_stack_stem_grad(m, B, T),
                  m->inputs, B, T, m->cfg.model.width);
}

static double lm_head(sdp_tf *m, const float *x, const int *targets, int B, int T) {
    const int N = B * T, V = m->cfg.model.vocab, Vp = m->cfg.vocab_padded, C = m->cfg.model.width;
    const sdp_backend *be = m->be;
    m->last_B = B;
    m->last_T = T;
    tf_norm_fwd(m, m->opts.norm, m->lnf, m->lnf_mean, m->lnf_rstd, x, m->off.lnf_w, m->off.lnf_b,
                N);
    sdp_linear_fwd(be, m->probs, m->lnf, P(m, m->off.lm_head), NULL, N, C, Vp);
    m->has_targets = targets != NULL;
    if (!targets) return 0.0;
    int counted = 0;
    for (int i = 0; i < N; i++) {
        SDP_CHECK(targets[i] < V, "target id %d is outside the vocabulary of %d", targets[i], V);
        counted += targets[i] >= 0;
    }
    be->upload(be, m->targets, targets, (size_t)N * sizeof(int));
    m->n_targets = counted;
    return sdp_softmax_xent_fwd(be, m->losses, m->probs, m->probs, m->targets, N, V, Vp);
}

static void lm_head_backward(sdp_tf *m, float dloss) {
    const int N = m->last_B * m->last_T, C = m->cfg.model.width;
    const int V = m->cfg.model.vocab, Vp = m->cfg.vocab_padded;
    const size_t NC = (size_t)N * C;
    const sdp_backend *be = m->be;
    sdp_softmax_xent_bwd(be, m->probs, m->probs, m->targets, dloss, N, V, Vp);
    be->zero(be, m->d_norm, NC * sizeof(float));
    sdp_linear_bwd(be, m->d_norm, G(m, m->goff.lm_head), NULL, m->probs, m->lnf,
                   P(m, m->off.lm_head), N, C, Vp);
    be->zero(be, m->d_res, NC * sizeof(float));
    tf_norm_bwd(m, m->opts.norm, m->d_res, m->d_norm, tf_stack_top(m), m->lnf_mean, m->lnf_rstd,
                m->off.lnf_w, m->goff.lnf_w, m->goff.lnf_b, N);
}

static double train_flops(const sdp_tf *m, int T) {
    const double C = m->cfg.model.width;
    double layers, attn;
    tf_stack_flops(m, T, &layers, &attn);
    return 6.0 * (layers + C * m->cfg.vocab_padded) + 6.0 * attn;
}

static double forward(sdp_tf *m, const int *inputs, const int *targets, int B, int T) {
    tf_stack_begin_forward(m, true);
    embed(m, inputs, B, T);
    return lm_head(m, tf_stack_forward(m, m->embed, B, T), targets, B, T);
}

static void backward(sdp_tf *m, float dloss) {
    const int B = m->last_B, T = m->last_T;
    lm_head_backward(m, dloss);
    tf_stack_backward(m, B, T);
    if (m->backward_floor < 0) stem_backward(m, B, T);
    m->has_targets = false; /* probs now hold gradients */
}

const struct sdp_tf_family TF_TOKEN_FAMILY = {
    .stem_tokens = stem,
    .head_tokens = lm_head,
    .forward_tokens = forward,
    .backward = backward,
    .destroy = free_tokens,
    .train_flops = train_flops,
};

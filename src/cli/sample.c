/* sdp sample: text generation from a trained byte-level run. */
#include "commands.h"
#include "load_run.h"

#include "sdp/check.h"
#include "sdp/ops.h"
#include "sdp/rng.h"
#include "sdp/transformer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char run[OPT_STR_MAX], prompt[OPT_STR_MAX];
    int length, top_k, seed, threads;
    double temperature;
} sample_opts;

static const opt_spec SAMPLE_OPTS[] = {
    {"run", OPT_STR, offsetof(sample_opts, run), "", "run directory written by sdp train", 0},
    {"prompt", OPT_STR, offsetof(sample_opts, prompt), "\n", "text to continue", 0},
    {"length", OPT_INT, offsetof(sample_opts, length), "200", "tokens to generate", 1},
    {"temperature", OPT_FLOAT, offsetof(sample_opts, temperature), "0.8",
     "sampling temperature; 0 = greedy", 0},
    {"top-k", OPT_INT, offsetof(sample_opts, top_k), "0", "sample among the k likeliest; 0 = all",
     0},
    {"seed", OPT_INT, offsetof(sample_opts, seed), "42", "sampling seed", 0},
    {"threads", OPT_INT, offsetof(sample_opts, threads), "0", "threads; 0 = all cores", 0},
    {NULL, 0, 0, NULL, NULL, 0},
};

/* Index of the k-th largest logit, used as a threshold for top-k sampling. */
static float kth_largest(const float *x, int n, int k) {
    float *tmp = sdp_xmalloc((size_t)n * sizeof(float), "top-k sampling");
    memcpy(tmp, x, (size_t)n * sizeof(float));
    for (int i = 0; i < k; i++) { /* partial selection: k is small */
        int best = i;
        for (int j = i + 1; j < n; j++)
            if (tmp[j] > tmp[best]) best = j;
        float s = tmp[i];
        tmp[i] = tmp[best];
        tmp[best] = s;
    }
    float v = tmp[k - 1];
    free(tmp);
    return v;
}

static int sample_token(const float *logits, int V, const sample_opts *s, sdp_rng *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (s->temperature <= 0) return best;
    float cut = s->top_k > 0 && s->top_k < V ? kth_largest(logits, V, s->top_k) : -INFINITY;
    double total = 0;
    for (int i = 0; i < V; i++)
        if (logits[i] >= cut) total += exp((logits[i] - logits[best]) / s->temperature);
    double u = sdp_rng_uniform(rng) * total, acc = 0;
    for (int i = 0; i < V; i++) {
        if (logits[i] < cut) continue;
        acc += exp((logits[i] - logits[best]) / s->temperature);
        if (acc >= u) return i;
    }
    return best;
}

int cmd_sample(int argc, char **argv) {
    sample_opts s;
    train_opts_parse(SAMPLE_OPTS, &s, argc, argv, "usage: sdp sample --run DIR [--prompt TEXT]");
    SDP_CHECK(s.run[0], "sdp sample needs --run DIR (a directory written by sdp train)");
    sdp_world w;
    sdp_world_init(&w, &argc, &argv, s.threads);
    sdp_set_threads(w.threads);
    sdp_mem mem = {0};
    train_opts o;
    sdp_model model;
    sdp_backend *be;
    load_run_model(&model, &be, &o, s.run, 1, 0, &mem);
    SDP_CHECK(!strcmp(o.model, "gpt") || !strcmp(o.model, "llama"),
              "sdp sample generates text; run %s trained a '%s' model", s.run, o.model);
    sdp_tf *tf = model.impl; /* sampling needs the transformer's logits */
    /* Every text run's vocabulary is its 256 bytes: another is one of token ids, which printed
     * as bytes would be noise and control characters. */
    SDP_CHECK(tf->cfg.model.vocab == 256,
              "run %s has a %d-token vocabulary (llm.c token ids): sdp sample decodes only "
              "byte-level text runs, whose vocabulary is 256 bytes",
              s.run, tf->cfg.model.vocab);
    SDP_CHECK(!train_run_data_is_shards(o.data),
              "run %s was trained on llm.c token shards (%s): sdp sample reads and writes bytes, "
              "which are not its tokens",
              s.run, o.data);
    const int T = tf->cfg.model.seq_len;
    int *ctx = sdp_xcalloc((size_t)T, sizeof(int), "the context");
    /* The model sees its last T tokens, as the generation loop below slides them. */
    const size_t len = strlen(s.prompt);
    SDP_CHECK(len > 0, "--prompt must not be empty");
    const char *tail = s.prompt + (len > (size_t)T ? len - (size_t)T : 0);
    int n = 0;
    for (const char *p = tail; *p; p++) ctx[n++] = (unsigned char)*p; /* each a token < 256 */
    sdp_rng rng = sdp_rng_make((uint64_t)s.seed, 0);
    if (w.rank == 0) fputs(s.prompt, stdout);
    for (int i = 0; i < s.length; i++) {
        sdp_tf_forward(tf, ctx, NULL, 1, n);
        int tok = sample_token(sdp_tf_logits_row(tf, n - 1), tf->cfg.model.vocab, &s, &rng);
        if (n == T) { /* slide the window past its oldest token to make room for this one */
            memmove(ctx, ctx + 1, (size_t)(T - 1) * sizeof(int));
            n--;
        }
        ctx[n++] = tok;
        if (w.rank == 0) {
            putchar(tok);
            fflush(stdout);
        }
    }
    if (w.rank == 0) putchar('\n');
    free(ctx);
    model.ops->destroy(&model);
    sdp_backend_destroy(be);
    sdp_world_finalize();
    return 0;
}

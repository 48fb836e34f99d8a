/* The CIFAR ResNet as a whole:
 *  - its forward (batch and running statistics) against a naive double-precision reference written
 *    here from the architecture, and its gradients against central differences of that reference;
 *  - its tensor description: parameter counts by independent arithmetic, blocks, groups, buffers;
 *  - forward-masking equivalence: a compact model equals the full model with the unowned blocks
 *    and channels zeroed (docs/architecture.md, I4);
 *  - sliced and absent gradients (backward masking), through the generic model interface;
 *  - dry-run creation counts exactly the bytes a real creation allocates;
 *  - activation recomputation: one block's activations, bitwise the same gradients and running
 *    statistics. */
#include "testutil.h"

#include "sdp/sync.h"
#include "sdp/model.h"
#include "sdp/plan.h"
#include "sdp/resnet.h"
#include "sdp/subnet.h"

#include <stdarg.h>

/* The tiny network of the gradient checks: ResNet-20's shape (3 stages of 3 blocks) at width 4,
 * 2-channel 8x8 images (8 -> 4 -> 2 pixels), 3 classes, batch 3. */
enum { DEPTH = 20, WIDTH = 4, IN_CH = 2, SIZE = 8, CLASSES = 3, BATCH = 3, BLOCKS_PER_STAGE = 3 };

static sdp_resnet_config tiny(void) {
    sdp_resnet_config c = {.depth = DEPTH,
                           .width = WIDTH,
                           .in_channels = IN_CH,
                           .image_size = SIZE,
                           .classes = CLASSES};
    sdp_resnet_config_finish(&c);
    return c;
}

static void random_batch(float *images, int *labels, uint64_t seed) {
    sdp_rng r = sdp_rng_make(seed, 1);
    tu_fill(images, (size_t)BATCH * IN_CH * SIZE * SIZE, &r, 1.0f);
    for (int i = 0; i < BATCH; i++) labels[i] = (int)sdp_rng_below(&r, CLASSES);
}

/* Initial values plus noise, so that batch-norm gains and shifts differ from 1 and 0 and every
 * path matters (weights keep about their initial scale, so that activations do not grow through
 * the blocks in evaluation); running statistics get positive variances. */
static void perturbed_params(const sdp_layout *L, float *p, uint64_t seed) {
    sdp_layout_init_values(L, p, seed);
    sdp_rng r = sdp_rng_make(seed, 2);
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *t = &L->params[i];
        for (size_t j = 0; j < t->numel; j++) {
            float *x = p + t->offset + j;
            if (!t->buffer)
                *x += (t->init == SDP_INIT_NORMAL ? 0.5f * t->init_std : 0.2f) * sdp_rng_normal(&r);
            else if (t->init == SDP_INIT_ONES) /* running_var */
                *x = 0.8f + 0.4f * sdp_rng_uniform(&r);
            else
                *x = 0.1f * sdp_rng_normal(&r);
        }
    }
}

/* ---- a naive double-precision ResNet (3 stages), written from the architecture -------------- */

typedef struct {
    const sdp_layout *L;
    double *p; /* parameters in double, laid out as L */
    const double *images;
    const int *labels;
    bool training;       /* batch statistics, else running statistics */
    bool update_running; /* training: write the running-statistic update into p */
    double *logits;      /* [BATCH, CLASSES] out, may be NULL */
    const float *scale;  /* of each block's residual branch, by global index; NULL: 1 */
} ref_net;

static double *tensor(const ref_net *r, const char *fmt, ...) {
    char name[SDP_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const sdp_param *t = sdp_layout_find(r->L, name);
    if (!t) print_error("reference: no tensor %s\n", name);
    assert_non_null(t);
    return r->p + t->offset;
}

static int conv_out(int H, int k, int stride) {
    return (H + 2 * (k / 2) - k) / stride + 1;
}

static double *ref_conv(const double *in, const double *w, int IC, int H, int OC, int k,
                        int stride) {
    const int pad = k / 2, OH = conv_out(H, k, stride);
    double *out = calloc((size_t)BATCH * OC * OH * OH, sizeof(double));
    for (int b = 0; b < BATCH; b++)
        for (int o = 0; o < OC; o++)
            for (int y = 0; y < OH; y++)
                for (int x = 0; x < OH; x++) {
                    double sum = 0;
                    for (int c = 0; c < IC; c++)
                        for (int i = 0; i < k; i++)
                            for (int j = 0; j < k; j++) {
                                int iy = y * stride - pad + i, ix = x * stride - pad + j;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= H) continue;
                                sum += w[((o * IC + c) * k + i) * k + j] *
                                       in[((b * IC + c) * H + iy) * H + ix];
                            }
                    out[((b * OC + o) * OH + y) * OH + x] = sum;
                }
    return out;
}

/* In place, as nn.BatchNorm2d (eps 1e-5, momentum 0.1, unbiased variance in the running one). */
static void ref_bn(const ref_net *r, double *x, int C, int HW, const char *name) {
    double *gamma = tensor(r, "%s.weight", name), *beta = tensor(r, "%s.bias", name);
    double *rmean = tensor(r, "%s.running_mean", name), *rvar = tensor(r, "%s.running_var", name);
    const double n = (double)BATCH * HW;
    for (int c = 0; c < C; c++) {
        double mean = rmean[c], var = rvar[c];
        if (r->training) {
            double s = 0, s2 = 0;
            for (int b = 0; b < BATCH; b++)
                for (int i = 0; i < HW; i++) s += x[(b * C + c) * HW + i];
            mean = s / n;
            for (int b = 0; b < BATCH; b++)
                for (int i = 0; i < HW; i++) {
                    double d = x[(b * C + c) * HW + i] - mean;
                    s2 += d * d;
                }
            var = s2 / n;
            if (r->update_running) {
                rmean[c] = 0.9 * rmean[c] + 0.1 * mean;
                rvar[c] = 0.9 * rvar[c] + 0.1 * var * n / (n - 1);
            }
        }
        for (int b = 0; b < BATCH; b++)
            for (int i = 0; i < HW; i++) {
                double *v = &x[(b * C + c) * HW + i];
                *v = (*v - mean) / sqrt(var + 1e-5) * gamma[c] + beta[c];
            }
    }
}

static void ref_relu(double *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] > 0 ? x[i] : 0;
}

/* Summed cross-entropy over the batch. A block whose tensors the layout lacks is dropped (the
 * identity); conv1's rows say how many inner channels a block keeps. */
static double ref_forward(const ref_net *r) {
    int C = IN_CH, H = SIZE;
    double *h = ref_conv(r->images, tensor(r, "conv1.weight"), C, H, WIDTH, 3, 1);
    C = WIDTH;
    ref_bn(r, h, C, H * H, "bn1");
    ref_relu(h, (size_t)BATCH * C * H * H);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < BLOCKS_PER_STAGE; i++) {
            const int cout = WIDTH << s, stride = s > 0 && i == 0 ? 2 : 1;
            const int OH = conv_out(H, 3, stride);
            const int global = s * BLOCKS_PER_STAGE + i;
            char name[32], bn[48];
            snprintf(name, sizeof name, "layer%d.%d", s + 1, i);
            snprintf(bn, sizeof bn, "%s.conv1.weight", name);
            const sdp_param *conv1 = sdp_layout_find(r->L, bn);
            if (!conv1) continue;
            const int mid = (int)conv1->shape[0];
            double *a = ref_conv(h, tensor(r, "%s.conv1.weight", name), C, H, mid, 3, stride);
            snprintf(bn, sizeof bn, "%s.bn1", name);
            ref_bn(r, a, mid, OH * OH, bn);
            ref_relu(a, (size_t)BATCH * mid * OH * OH);
            double *br = ref_conv(a, tensor(r, "%s.conv2.weight", name), mid, OH, cout, 3, 1);
            snprintf(bn, sizeof bn, "%s.bn2", name);
            ref_bn(r, br, cout, OH * OH, bn);
            const double scale = r->scale ? r->scale[global] : 1.0;
            double *sc = h;
            if (stride != 1 || C != cout) {
                sc = ref_conv(h, tensor(r, "%s.shortcut.0.weight", name), C, H, cout, 1, stride);
                snprintf(bn, sizeof bn, "%s.shortcut.1", name);
                ref_bn(r, sc, cout, OH * OH, bn);
            }
            for (size_t e = 0; e < (size_t)BATCH * cout * OH * OH; e++)
                br[e] = sc[e] + scale * br[e];
            ref_relu(br, (size_t)BATCH * cout * OH * OH);
            if (sc != h) free(sc);
            free(h);
            free(a);
            h = br;
            C = cout;
            H = OH;
        }
    const double *w = tensor(r, "fc.weight"), *bias = tensor(r, "fc.bias");
    double loss = 0;
    for (int b = 0; b < BATCH; b++) {
        double pooled[64], logits[CLASSES], mx = -INFINITY, z = 0;
        assert_true(C <= 64);
        for (int c = 0; c < C; c++) {
            pooled[c] = 0;
            for (int i = 0; i < H * H; i++) pooled[c] += h[(b * C + c) * H * H + i] / (H * H);
        }
        for (int k = 0; k < CLASSES; k++) {
            logits[k] = bias[k];
            for (int c = 0; c < C; c++) logits[k] += w[k * C + c] * pooled[c];
            mx = fmax(mx, logits[k]);
            if (r->logits) r->logits[b * CLASSES + k] = logits[k];
        }
        for (int k = 0; k < CLASSES; k++) z += exp(logits[k] - mx);
        if (r->labels[b] >= 0) loss += mx + log(z) - logits[r->labels[b]];
    }
    free(h);
    return loss;
}

/* ---- forward and gradients against the reference ------------------------------------------ */

typedef struct {
    ref_net *net;
    const size_t *index; /* the sampled elements */
} sampled_loss;

static double loss_at(const double *x, void *ctx) {
    sampled_loss *s = ctx;
    double saved[1024];
    size_t n = 0;
    for (; s->index[n] != SIZE_MAX; n++) {
        saved[n] = s->net->p[s->index[n]];
        s->net->p[s->index[n]] = x[n];
    }
    double loss = ref_forward(s->net);
    for (size_t i = 0; i < n; i++) s->net->p[s->index[i]] = saved[i];
    return loss;
}

/* Up to `per` random elements of every trainable tensor (all of small ones), SIZE_MAX-ended. */
static size_t sample_elements(const sdp_layout *L, size_t per, size_t *index, size_t cap) {
    sdp_rng r = sdp_rng_make(11, 0);
    size_t n = 0;
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *t = &L->params[i];
        if (t->buffer) continue;
        const size_t first = n;
        while (n - first < per && n - first < t->numel) {
            const size_t e =
                t->offset + (t->numel <= per ? n - first : sdp_rng_below(&r, t->numel));
            bool seen = false; /* distinct, or the finite differences would perturb one twice */
            for (size_t k = first; k < n; k++) seen |= index[k] == e;
            if (seen) continue;
            assert_true(n + 1 < cap);
            index[n++] = e;
        }
    }
    index[n] = SIZE_MAX;
    return n;
}

/* The float model's loss and its gradient at ~6 elements of every trainable tensor against the
 * double reference and its central differences (step 1e-5: truncation and rounding errors are
 * ~1e-10, far below float's). A wrong backward makes errors of the order of the gradient itself;
 * float rounding through 20 layers of batch norm stays under ~1e-6 of the largest gradient. */
static void check_gradients(const sdp_subnet_spec *spec, const char *what) {
    sdp_mem mem = {0};
    sdp_resnet_config c = tiny();
    sdp_resnet *m =
        sdp_resnet_create(&c, spec, BATCH, SDP_MODEL_TRAIN, SDP_GEMM_DNNL, SDP_CONV_DNNL, &mem);
    const sdp_layout *L = sdp_resnet_layout(m);
    float *params = sdp_resnet_params(m);
    perturbed_params(L, params, 5);
    float images[BATCH * IN_CH * SIZE * SIZE];
    int labels[BATCH];
    random_batch(images, labels, 1);

    double *p = malloc(L->numel * sizeof(double));
    double dimages[BATCH * IN_CH * SIZE * SIZE];
    tu_to_double(p, params, L->numel);
    tu_to_double(dimages, images, sizeof dimages / sizeof *dimages);
    ref_net ref = {L, p, dimages, labels, true, false, NULL, spec ? spec->scale : NULL};
    const double want_loss = ref_forward(&ref);

    sdp_metrics got;
    sdp_resnet_forward(m, images, labels, BATCH, true, &got);
    print_message("%s: loss %.9g, reference %.9g\n", what, got.loss, want_loss);
    assert_true(fabs(got.loss - want_loss) <= 1e-5 * fabs(want_loss));
    assert_int_equal((int)got.count, BATCH);
    sdp_resnet_backward(m, 1.0f, NULL, NULL);
    const float *grads = sdp_resnet_grads(m);

    size_t index[1024];
    const size_t n = sample_elements(L, 6, index, 1024);
    double *x = malloc(n * sizeof(double)), *fd = malloc(n * sizeof(double));
    float *an = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        x[i] = p[index[i]];
        an[i] = grads[index[i]];
    }
    sampled_loss ctx = {&ref, index};
    tu_fd_grad(loss_at, x, n, &ctx, 1e-5, fd);
    double biggest = 0, err2 = 0, ref2 = 0;
    for (size_t i = 0; i < n; i++) {
        biggest = fmax(biggest, fabs(fd[i]));
        err2 += (an[i] - fd[i]) * (an[i] - fd[i]);
        ref2 += fd[i] * fd[i];
    }
    const double ratio = tu_err_ratio(an, fd, n, 1e-5 * biggest, 1e-4);
    print_message("%zu of %zu parameters sampled: relative L2 error %.2e, worst error %.3g of the "
                  "tolerance (1e-5 of the largest gradient %.3g + 1e-4 relative)\n",
                  n, L->numel, sqrt(err2 / ref2), ratio, biggest);
    for (size_t i = 0, shown = 0; i < n && shown < 5; i++)
        if (fabs(an[i] - fd[i]) > 1e-5 * biggest + 1e-4 * fabs(fd[i])) {
            shown++;
            print_error("element %zu: analytic %.6g, numeric %.6g\n", index[i], (double)an[i],
                        fd[i]);
        }
    assert_true(ratio <= 1);
    free(x);
    free(fd);
    free(an);
    free(p);
    sdp_resnet_destroy(m);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(mem.cur[k], 0);
}

static void test_gradients_full(void **state) {
    (void)state;
    check_gradients(NULL, "full model");
}

/* A subnetwork as forward masking makes them: a dropped block, narrowed blocks (one to no
 * channel at all), and branch scales other than 1 (which downsampling blocks ignore). */
static void test_gradients_subnetwork(void **state) {
    (void)state;
    const sdp_resnet_config c = tiny();
    sdp_layout full;
    sdp_resnet_describe(&full, &c, NULL);
    sdp_subnet_spec spec;
    sdp_subnet_spec_full(&spec, &full);
    for (int b = 0; b < spec.nblocks; b++)
        spec.scale[b] = full.blocks[b].droppable ? 0.5f + 0.25f * (float)b : 1.0f;
    spec.keep[1] = false;
    spec.kept[4][0] = 5;
    spec.kept[5][0] = 0;
    spec.kept[8][0] = 7;
    check_gradients(&spec, "subnetwork");
    sdp_subnet_spec_free(&spec);
    sdp_layout_free(&full);
}

/* Training forwards update the running statistics as PyTorch does; evaluation uses them and
 * leaves them alone; both against the reference. */
static void test_running_statistics(void **state) {
    (void)state;
    sdp_mem mem = {0};
    sdp_resnet_config c = tiny();
    sdp_resnet *m =
        sdp_resnet_create(&c, NULL, BATCH, SDP_MODEL_INFER, SDP_GEMM_DNNL, SDP_CONV_DNNL, &mem);
    const sdp_layout *L = sdp_resnet_layout(m);
    float *params = sdp_resnet_params(m);
    perturbed_params(L, params, 8);
    float images[BATCH * IN_CH * SIZE * SIZE];
    int labels[BATCH];
    random_batch(images, labels, 2);
    double *p = malloc(L->numel * sizeof(double));
    double dimages[BATCH * IN_CH * SIZE * SIZE], logits[BATCH * CLASSES];
    tu_to_double(dimages, images, sizeof dimages / sizeof *dimages);
    tu_to_double(p, params, L->numel);

    /* Evaluation: logits from the running statistics, which stay as they are. */
    float *before = malloc(L->numel * sizeof(float));
    memcpy(before, params, L->numel * sizeof(float));
    ref_net ref = {L, p, dimages, labels, false, false, logits, NULL};
    const double want = ref_forward(&ref);
    sdp_metrics got;
    sdp_resnet_forward(m, images, NULL, BATCH, false, &got);
    float model_logits[BATCH * CLASSES];
    for (int b = 0; b < BATCH; b++)
        memcpy(model_logits + b * CLASSES, sdp_resnet_logits(m, b), CLASSES * sizeof(float));
    const double logit_err = tu_err_ratio(model_logits, logits, BATCH * CLASSES, 1e-5, 1e-4);
    sdp_resnet_forward(m, images, labels, BATCH, false, &got);
    print_message("eval: loss %.9g (reference %.9g), logits within %.3g of the tolerance\n",
                  got.loss, want, logit_err);
    assert_true(logit_err <= 1);
    assert_true(fabs(got.loss - want) <= 1e-5 * fabs(want));
    assert_memory_equal(before, params, L->numel * sizeof(float));
    /* With batch statistics the same images give another loss: eval really used running ones. */
    ref.training = true;
    ref.logits = NULL;
    assert_true(fabs(ref_forward(&ref) - want) > 1e-3 * fabs(want));

    /* Training: two updates of every running statistic. */
    ref.update_running = true;
    for (int step = 0; step < 2; step++) {
        sdp_resnet_forward(m, images, labels, BATCH, true, &got);
        ref_forward(&ref);
    }
    size_t checked = 0;
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *t = &L->params[i];
        if (!t->buffer) continue;
        assert_true(tu_err_ratio(params + t->offset, p + t->offset, t->numel, 1e-6, 1e-5) <= 1);
        checked += t->numel;
    }
    assert_true(checked > 0);
    /* The correct count is the argmax hits (here against the reference's eval logits). */
    int hits = 0;
    for (int b = 0; b < BATCH; b++) {
        int best = 0;
        for (int k = 1; k < CLASSES; k++)
            if (logits[b * CLASSES + k] > logits[b * CLASSES + best]) best = k;
        hits += best == labels[b];
    }
    memcpy(params, before, L->numel * sizeof(float));
    sdp_resnet_forward(m, images, labels, BATCH, false, &got);
    assert_int_equal((int)got.correct, hits);
    free(before);
    free(p);
    sdp_resnet_destroy(m);
}

/* ---- layout ------------------------------------------------------------------------------- */

/* Trainable parameters of a CIFAR ResNet, from the architecture: a 3x3 stem conv and its batch
 * norm; per block two 3x3 convs and two batch norms, plus a 1x1 conv and batch norm where the
 * block changes width; the classifier. */
static size_t expected_trainable(int stages, const int *blocks, size_t w, size_t in, size_t K,
                                 size_t *bn_channels) {
    size_t n = in * w * 9 + 2 * w, cin = w;
    *bn_channels = w;
    for (int s = 0; s < stages; s++) {
        const size_t C = w << s;
        for (int i = 0; i < blocks[s]; i++) {
            n += cin * C * 9 + C * C * 9 + 4 * C;
            *bn_channels += 2 * C;
            if (cin != C) {
                n += cin * C + 2 * C;
                *bn_channels += C;
            }
            cin = C;
        }
    }
    return n + cin * K + K;
}

static void count(const sdp_layout *L, size_t *trainable, size_t *buffers) {
    *trainable = *buffers = 0;
    for (int i = 0; i < L->nparams; i++) {
        if (L->params[i].buffer)
            *buffers += L->params[i].numel;
        else
            *trainable += L->params[i].numel;
    }
    assert_int_equal(*trainable + *buffers, L->numel);
}

static void test_layout_resnet18(void **state) {
    (void)state;
    sdp_resnet_config c = {.depth = 18, .in_channels = 3, .image_size = 32, .classes = 10};
    sdp_resnet_config_finish(&c);
    assert_int_equal(c.width, 64);
    sdp_layout L;
    sdp_resnet_describe(&L, &c, NULL);
    const int blocks[4] = {2, 2, 2, 2};
    size_t trainable, buffers, bn_channels;
    count(&L, &trainable, &buffers);
    assert_int_equal(trainable, expected_trainable(4, blocks, 64, 3, 10, &bn_channels));
    assert_int_equal(trainable, 11173962); /* torchvision-style CIFAR ResNet-18, 10 classes */
    assert_int_equal(buffers, 2 * bn_channels);

    assert_int_equal(L.nblocks, 8);
    const char *names[8] = {"layer1.0", "layer1.1", "layer2.0", "layer2.1",
                            "layer3.0", "layer3.1", "layer4.0", "layer4.1"};
    for (int b = 0; b < 8; b++) {
        const sdp_block *blk = &L.blocks[b];
        const bool down = b == 2 || b == 4 || b == 6;
        assert_string_equal(blk->name, names[b]);
        assert_int_equal(blk->global_index, b);
        assert_int_equal(blk->droppable, !down);
        assert_int_equal(blk->ngroups, down ? 0 : 1);
        if (!down) {
            assert_string_equal(blk->groups[0].name, "ch");
            assert_int_equal(blk->groups[0].width, 64 << (b / 2));
            assert_int_equal(blk->groups[0].atom, 1);
        }
    }
    const sdp_param *p = sdp_layout_find(&L, "layer3.1.conv2.weight");
    assert_non_null(p);
    assert_int_equal(p->ndim, 4);
    assert_int_equal(p->shape[0], 256);
    assert_int_equal(p->shape[1], 256);
    assert_int_equal(p->block, 5);
    assert_int_equal(p->group, 0);
    assert_int_equal(p->axis, 1);
    assert_true(p->decay);
    p = sdp_layout_find(&L, "layer3.1.conv1.weight");
    assert_int_equal(p->axis, 0);
    assert_int_equal(p->group, 0);
    assert_true(fabsf(p->init_std - sqrtf(2.0f / (256 * 9))) < 1e-7f);
    p = sdp_layout_find(&L, "layer3.1.bn1.running_var");
    assert_true(p->buffer && !p->decay && p->group == 0 && p->init == SDP_INIT_ONES);
    p = sdp_layout_find(&L, "layer3.1.bn1.running_mean");
    assert_true(p->buffer && p->init == SDP_INIT_ZEROS);
    p = sdp_layout_find(&L, "layer3.1.bn1.weight");
    assert_true(!p->buffer && !p->decay && p->init == SDP_INIT_ONES && p->group == 0);
    p = sdp_layout_find(&L, "layer3.1.bn2.bias");
    assert_true(!p->buffer && !p->decay && p->group == -1 && p->init == SDP_INIT_ZEROS);
    p = sdp_layout_find(&L, "layer3.0.shortcut.0.weight");
    assert_true(p && p->shape[0] == 256 && p->shape[1] == 128 && p->shape[2] == 1 &&
                p->group == -1 && p->block == 4);
    assert_non_null(sdp_layout_find(&L, "layer3.0.shortcut.1.running_mean"));
    assert_null(sdp_layout_find(&L, "layer3.1.shortcut.0.weight"));
    p = sdp_layout_find(&L, "conv1.weight");
    assert_true(p->block == -1 && p->shape[1] == 3 && p->decay);
    p = sdp_layout_find(&L, "fc.weight");
    assert_true(p->block == -1 && p->shape[0] == 10 && p->shape[1] == 512 && p->decay);
    assert_false(sdp_layout_find(&L, "fc.bias")->decay);
    sdp_layout_free(&L);
}

static void test_layout_resnet20(void **state) {
    (void)state;
    sdp_resnet_config c = {.depth = 20, .in_channels = 3, .image_size = 32, .classes = 10};
    sdp_resnet_config_finish(&c);
    assert_int_equal(c.width, 16);
    sdp_layout L;
    sdp_resnet_describe(&L, &c, NULL);
    const int blocks[3] = {3, 3, 3};
    size_t trainable, buffers, bn_channels;
    count(&L, &trainable, &buffers);
    assert_int_equal(trainable, expected_trainable(3, blocks, 16, 3, 10, &bn_channels));
    assert_int_equal(trainable, 272474); /* ResNet-20 with 1x1-conv shortcuts ("option B") */
    assert_int_equal(buffers, 2 * bn_channels);
    assert_int_equal(L.nblocks, 9);
    for (int b = 0; b < 9; b++) assert_int_equal(L.blocks[b].droppable, b != 3 && b != 6);
    sdp_layout_free(&L);

    /* Fashion-MNIST: one channel, 28 -> 14 -> 7 pixels; ResNet-56 has 27 blocks. */
    c = (sdp_resnet_config){.depth = 56, .in_channels = 1, .image_size = 28, .classes = 10};
    sdp_resnet_config_finish(&c);
    assert_int_equal(sdp_resnet_nblocks(&c), 27);
    assert_int_equal(sdp_resnet_block(&c, 26).out_size, 7);
    /* ResNet-34: [3, 4, 6, 3]; 28 -> 14 -> 7 -> 4 as PyTorch's padding gives. */
    c = (sdp_resnet_config){.depth = 34, .in_channels = 1, .image_size = 28, .classes = 10};
    sdp_resnet_config_finish(&c);
    assert_int_equal(sdp_resnet_nblocks(&c), 16);
    sdp_resnet_block_arch a = sdp_resnet_block(&c, 7);
    assert_true(a.stage == 3 && a.index == 0 && a.downsample && a.in_size == 14 &&
                a.out_size == 7 && a.cin == 128 && a.cout == 256);
    assert_int_equal(sdp_resnet_block(&c, 15).out_size, 4);
}

/* A subnetwork: dropped blocks are absent, kept ones keep their global names, narrow blocks have
 * narrow conv1/bn1/conv2. */
static void test_layout_subnetwork(void **state) {
    (void)state;
    sdp_resnet_config c = tiny();
    sdp_layout full;
    sdp_resnet_describe(&full, &c, NULL);
    sdp_subnet_spec spec;
    sdp_subnet_spec_full(&spec, &full);
    spec.keep[1] = false;
    spec.kept[4][0] = 3;
    sdp_layout L;
    sdp_resnet_describe(&L, &c, &spec);
    assert_int_equal(L.nblocks, 8);
    assert_null(sdp_layout_find(&L, "layer1.1.conv1.weight"));
    assert_int_equal(L.blocks[3].global_index, 4);
    const sdp_param *p = sdp_layout_find(&L, "layer2.1.conv1.weight");
    assert_true(p->shape[0] == 3 && p->shape[1] == 8 && p->block == 3);
    p = sdp_layout_find(&L, "layer2.1.conv2.weight");
    assert_true(p->shape[0] == 8 && p->shape[1] == 3);
    assert_int_equal(sdp_layout_find(&L, "layer2.1.bn1.running_var")->numel, 3);
    assert_int_equal(sdp_layout_find(&L, "layer2.1.bn2.weight")->numel, 8);
    assert_int_equal(L.blocks[3].groups[0].width, 3);
    /* Same initial values as the full model's elements: the std comes from the full shape. */
    assert_true(p->init_std == sdp_layout_find(&full, "layer2.1.conv2.weight")->init_std);
    sdp_layout_free(&L);
    sdp_subnet_spec_free(&spec);
    sdp_layout_free(&full);
}

static void bad_depth(void *ctx) {
    (void)ctx;
    sdp_resnet_config c = {.depth = 19, .in_channels = 3, .image_size = 32, .classes = 10};
    sdp_resnet_config_finish(&c);
}

static void tiny_images(void *ctx) {
    (void)ctx;
    sdp_resnet_config c = {.depth = 18, .in_channels = 3, .image_size = 4, .classes = 10};
    sdp_resnet_config_finish(&c);
}

static void no_channels(void *ctx) {
    (void)ctx;
    sdp_resnet_config c = {.depth = 20, .image_size = 32, .classes = 10};
    sdp_resnet_config_finish(&c);
}

static void label_out_of_range(void *ctx) {
    (void)ctx;
    sdp_resnet_config c = tiny();
    sdp_mem mem = {0};
    sdp_resnet *m =
        sdp_resnet_create(&c, NULL, BATCH, SDP_MODEL_INFER, SDP_GEMM_DNNL, SDP_CONV_DNNL, &mem);
    float images[BATCH * IN_CH * SIZE * SIZE] = {0};
    int labels[BATCH] = {0, CLASSES, 1};
    sdp_metrics out;
    sdp_resnet_forward(m, images, labels, BATCH, false, &out);
}

static void test_config_errors(void **state) {
    (void)state;
    tu_expect_fatal(bad_depth, NULL, "--depth 19 is not a CIFAR ResNet depth");
    tu_expect_fatal(tiny_images, NULL, "4x4 images are too small for 4 stages");
    tu_expect_fatal(no_channels, NULL, "0 input channels");
    tu_expect_fatal(label_out_of_range, NULL, "label 3 is outside the model's 3 classes");
    const sdp_model_family *f = sdp_model_family_find("resnet");
    assert_non_null(f);
    assert_true(f->images);
    sdp_model_config mc = {
        .arch = "resnet", .depth = 18, .in_channels = 1, .image_size = 28, .classes = 10};
    f->finish_config(&mc);
    assert_int_equal(mc.channels, 64);
}

/* ---- forward-masking equivalence ---------------------------------------------------------- */

/* The channels of full block fb that rank keeps: shared ones and owned ones, ascending. */
static int kept_channels(const sdp_plan *p, int fb, int width, int rank, int *out) {
    int n = 0;
    for (int a = 0; a < width; a++) {
        int u = sdp_plan_unit_of(p, fb, 0, a);
        if (u < 0 || sdp_plan_owns(p, u, rank)) out[n++] = a;
    }
    return n;
}

/* Copies every element of the compact model to its place in the full model (to_full), or back.
 * A tensor is a [shape[0], numel / shape[0]] matrix: along axis 0 a channel is a row, along axis 1
 * it is a run of numel / (shape[0] * shape[1]) columns in every row. */
static void place(const sdp_layout *full, float *fp, const sdp_layout *local, float *lp,
                  const sdp_plan *plan, int rank, bool to_full) {
    for (int i = 0; i < local->nparams; i++) {
        const sdp_param *l = &local->params[i], *f = sdp_layout_find(full, l->name);
        assert_non_null(f);
        int kept[64], n = 1, width = 1;
        size_t rows = 1, run = l->numel;
        if (l->group >= 0) {
            width = (int)f->shape[l->axis];
            assert_true(width <= 64);
            n = kept_channels(plan, local->blocks[l->block].global_index, width, rank, kept);
            assert_int_equal(n, (int)l->shape[l->axis]); /* the model's width is the spec's */
            rows = l->axis == 0 ? 1 : (size_t)f->shape[0];
            run = f->numel / (size_t)f->shape[0] / (l->axis == 0 ? 1 : (size_t)f->shape[1]);
        } else {
            kept[0] = 0;
            assert_int_equal(l->numel, f->numel);
        }
        for (size_t r = 0; r < rows; r++)
            for (int j = 0; j < n; j++) {
                float *a = lp + l->offset + (r * (size_t)n + (size_t)j) * run;
                float *b = fp + f->offset + (r * (size_t)width + (size_t)kept[j]) * run;
                memcpy(to_full ? b : a, to_full ? a : b, run * sizeof(float));
            }
    }
}

typedef struct {
    int cases, smaller;
    double worst_loss, worst_grad, worst_running;
} tally;

static void check_equivalence(sdp_unit_kind unit, sdp_assign_kind assign, sdp_branch_scale scale,
                              int N, int k, int rank, tally *t) {
    const sdp_resnet_config c = tiny();
    sdp_layout full;
    sdp_resnet_describe(&full, &c, NULL);
    sdp_plan_cfg pc = {.mask = SDP_MASK_FORWARD,
                       .unit = unit,
                       .assign = assign,
                       .scale = scale,
                       .world = N,
                       .owners = k,
                       .seed = 3};
    sdp_plan plan;
    sdp_plan_build(&plan, &pc, &full);
    sdp_subnet_spec spec, whole_spec;
    sdp_subnet_spec_make(&spec, &plan, &full, rank);
    sdp_subnet_spec_full(&whole_spec, &full);
    for (int b = 0; b < full.nblocks; b++) whole_spec.scale[b] = spec.scale[b];

    sdp_mem mem = {0};
    sdp_resnet *compact =
        sdp_resnet_create(&c, &spec, BATCH, SDP_MODEL_TRAIN, SDP_GEMM_DNNL, SDP_CONV_DNNL, &mem);
    sdp_resnet *whole = sdp_resnet_create(&c, &whole_spec, BATCH, SDP_MODEL_TRAIN, SDP_GEMM_DNNL,
                                          SDP_CONV_DNNL, &mem);
    const sdp_layout *cl = sdp_resnet_layout(compact);
    float *cp = sdp_resnet_params(compact), *wp = sdp_resnet_params(whole);
    sdp_rng rng = sdp_rng_make(21, (uint64_t)t->cases);
    tu_fill(cp, cl->numel, &rng, 0.4f);
    place(&full, wp, cl, cp, &plan, rank, true);
    if (unit == SDP_UNIT_BLOCK) { /* the engine's map places everything as `place` does */
        sdp_subnet_map map;
        sdp_subnet_map_build(&map, &full, cl, &plan, rank, true);
        size_t mapped = 0;
        for (int i = 0; i < map.nruns; i++) {
            const sdp_run *run = &map.runs[i];
            assert_memory_equal(wp + run->global, cp + run->local, run->len * sizeof(float));
            mapped += run->len;
        }
        assert_int_equal(mapped, cl->numel);
        sdp_subnet_map_free(&map);
    }

    float images[BATCH * IN_CH * SIZE * SIZE];
    int labels[BATCH];
    random_batch(images, labels, (uint64_t)t->cases);
    sdp_metrics mc, mw;
    sdp_resnet_forward(compact, images, labels, BATCH, true, &mc);
    sdp_resnet_forward(whole, images, labels, BATCH, true, &mw);
    const double loss_err = fabs(mc.loss - mw.loss) / (1e-5 * fabs(mw.loss));
    t->worst_loss = fmax(t->worst_loss, loss_err);
    if (!(loss_err <= 1)) print_error("loss: compact %.9g, full %.9g\n", mc.loss, mw.loss);
    assert_true(loss_err <= 1);

    /* Running statistics moved the same way (the parameters did not move at all). */
    float *want = malloc(cl->numel * sizeof(float));
    place(&full, wp, cl, want, &plan, rank, false);
    const double run_err = tu_err_ratio_ff(cp, want, cl->numel, 1e-6, 1e-5);
    t->worst_running = fmax(t->worst_running, run_err);
    assert_true(run_err <= 1);

    sdp_resnet_backward(compact, 1.0f / BATCH, NULL, NULL);
    sdp_resnet_backward(whole, 1.0f / BATCH, NULL, NULL);
    place(&full, sdp_resnet_grads(whole), cl, want, &plan, rank, false);
    double biggest = 0;
    for (size_t e = 0; e < cl->numel; e++) biggest = fmax(biggest, fabs((double)want[e]));
    assert_true(biggest > 0);
    const float *cg = sdp_resnet_grads(compact);
    const double grad_err = tu_err_ratio_ff(cg, want, cl->numel, 1e-4 * biggest, 1e-3);
    t->worst_grad = fmax(t->worst_grad, grad_err);
    if (!(grad_err <= 1)) {
        for (size_t e = 0; e < cl->numel; e++)
            if (fabs((double)cg[e] - want[e]) > 1e-4 * biggest + 1e-3 * fabs((double)want[e])) {
                print_error("%s N=%d k=%d rank %d: gradient %zu: compact %.9g, full %.9g\n",
                            sdp_unit_kind_name(unit), N, k, rank, e, (double)cg[e],
                            (double)want[e]);
                break;
            }
        fail();
    }
    t->cases++;
    t->smaller += cl->numel < full.numel;
    free(want);
    sdp_resnet_destroy(whole);
    sdp_resnet_destroy(compact);
    sdp_subnet_spec_free(&whole_spec);
    sdp_subnet_spec_free(&spec);
    sdp_plan_free(&plan);
    sdp_layout_free(&full);
}

/* Every rank of N in {2, 4} (the widths 4, 8, 16 split into N chunks), 1 <= k < N, both
 * assignments and both branch scales. */
static void check_all(sdp_unit_kind unit) {
    tally t = {0};
    for (int N = 2; N <= 4; N += 2)
        for (int k = 1; k < N; k++)
            for (int a = 0; a < 2; a++)
                for (int s = 0; s < 2; s++)
                    for (int r = 0; r < N; r++)
                        check_equivalence(unit, a ? SDP_ASSIGN_RANDOM : SDP_ASSIGN_CYCLIC,
                                          s ? SDP_SCALE_INVERSE : SDP_SCALE_NONE, N, k, r, &t);
    print_message("%s units: %d cases (%d smaller than the full model); worst loss error %.3g, "
                  "running statistics %.3g, gradients %.3g of the tolerance\n",
                  sdp_unit_kind_name(unit), t.cases, t.smaller, t.worst_loss, t.worst_running,
                  t.worst_grad);
    assert_true(2 * t.smaller > t.cases);
}

static void test_forward_masking_blocks(void **state) {
    (void)state;
    check_all(SDP_UNIT_BLOCK);
}

static void test_forward_masking_channels(void **state) {
    (void)state;
    check_all(SDP_UNIT_NEURON);
}

/* A block that keeps none of its inner channels is bn2 of zeros (its shift) plus the shortcut:
 * the same as the full block with all its channels zeroed. */
static void test_block_without_channels(void **state) {
    (void)state;
    const sdp_resnet_config c = tiny();
    sdp_layout full;
    sdp_resnet_describe(&full, &c, NULL);
    sdp_subnet_spec spec;
    sdp_subnet_spec_full(&spec, &full);
    spec.kept[1][0] = 0;
    sdp_mem mem = {0};
    sdp_resnet *compact =
        sdp_resnet_create(&c, &spec, BATCH, SDP_MODEL_TRAIN, SDP_GEMM_DNNL, SDP_CONV_DNNL, &mem);
    sdp_resnet *whole =
        sdp_resnet_create(&c, NULL, BATCH, SDP_MODEL_TRAIN, SDP_GEMM_DNNL, SDP_CONV_DNNL, &mem);
    const sdp_layout *cl = sdp_resnet_layout(compact), *wl = sdp_resnet_layout(whole);
    float *cp = sdp_resnet_params(compact), *wp = sdp_resnet_params(whole);
    perturbed_params(wl, wp, 4);
    for (int i = 0; i < wl->nparams; i++) {
        const sdp_param *w = &wl->params[i], *l = sdp_layout_find(cl, w->name);
        if (w->block == 1 && w->group == 0)
            memset(wp + w->offset, 0, w->numel * sizeof(float));
        else
            memcpy(cp + l->offset, wp + w->offset, w->numel * sizeof(float));
    }
    float images[BATCH * IN_CH * SIZE * SIZE];
    int labels[BATCH];
    random_batch(images, labels, 9);
    sdp_metrics mc, mw;
    sdp_resnet_forward(compact, images, labels, BATCH, true, &mc);
    sdp_resnet_forward(whole, images, labels, BATCH, true, &mw);
    assert_true(fabs(mc.loss - mw.loss) <= 1e-5 * fabs(mw.loss));
    sdp_resnet_backward(compact, 1.0f, NULL, NULL);
    sdp_resnet_backward(whole, 1.0f, NULL, NULL);
    const float *cg = sdp_resnet_grads(compact), *wg = sdp_resnet_grads(whole);
    for (int i = 0; i < cl->nparams; i++) {
        const sdp_param *l = &cl->params[i], *w = sdp_layout_find(wl, l->name);
        assert_true(tu_err_ratio_ff(cg + l->offset, wg + w->offset, l->numel, 1e-5, 1e-3) <= 1);
    }
    sdp_resnet_destroy(whole);
    sdp_resnet_destroy(compact);
    sdp_subnet_spec_free(&spec);
    sdp_layout_free(&full);
}

/* ---- sliced and absent gradients, through the generic interface --------------------------- */

typedef struct {
    int calls, order[64];
} done_log;

static void on_block_done(void *ctx, int block) {
    done_log *d = ctx;
    d->order[d->calls++] = block;
}

/* The owned slices of tensor t: channels {0} and [2, width) of its group, packed at *next. */
static void make_slices(const sdp_param *t, sdp_grad_slices *s, long *next) {
    const long rows = t->shape[0], cols = (long)t->numel / rows;
    const long per_channel = t->axis == 0 ? 1 : cols / t->shape[1];
    const long width = t->shape[t->axis], starts[2] = {0, 2}, lens[2] = {1, width - 2};
    s->axis = t->axis;
    s->n = 2;
    s->start = malloc(2 * sizeof(long));
    s->len = malloc(2 * sizeof(long));
    s->dst = malloc(2 * sizeof(long));
    s->ld = malloc(2 * sizeof(long));
    for (int i = 0; i < 2; i++) {
        s->start[i] = starts[i] * per_channel;
        s->len[i] = lens[i] * per_channel;
        s->dst[i] = *next;
        s->ld[i] = t->axis == 0 ? cols : s->len[i];
        *next += t->axis == 0 ? s->len[i] * cols : s->len[i] * rows;
    }
}

/* What make_slices' slices should hold: the same elements of the whole gradient g. */
static void expect_slices(const sdp_param *t, const sdp_grad_slices *s, const float *g,
                          float *want) {
    const long rows = t->shape[0], cols = (long)t->numel / rows;
    for (int i = 0; i < s->n; i++)
        for (long r = 0; r < (t->axis == 0 ? s->len[i] : rows); r++)
            for (long c = 0; c < (t->axis == 0 ? cols : s->len[i]); c++)
                want[s->dst[i] + r * s->ld[i] + c] =
                    t->axis == 0 ? g[(s->start[i] + r) * cols + c] : g[r * cols + s->start[i] + c];
}

static void test_sliced_gradients(void **state) {
    (void)state;
    const sdp_model_family *f = sdp_model_family_find("resnet");
    sdp_model_config mc = {.arch = "resnet",
                           .depth = DEPTH,
                           .channels = WIDTH,
                           .in_channels = IN_CH,
                           .image_size = SIZE,
                           .classes = CLASSES};
    f->finish_config(&mc);
    sdp_mem mem = {0};
    mc.backend = sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    sdp_model ref, bare;
    f->create(&ref, &mc, NULL, BATCH, 1, SDP_MODEL_TRAIN);
    f->create(&bare, &mc, NULL, BATCH, 1, SDP_MODEL_TRAIN_BARE);
    const sdp_layout *L = bare.layout;
    perturbed_params(L, ref.params, 6);
    memcpy(bare.params, ref.params, L->numel * sizeof(float));

    /* Whole gradients from the model that owns its gradient buffer, through use_grads. */
    float *full = calloc(L->numel, sizeof(float));
    long *whole_off = malloc(sizeof(long) * (size_t)L->nparams);
    for (int i = 0; i < L->nparams; i++)
        whole_off[i] = L->params[i].buffer ? -1 : (long)L->params[i].offset;
    ref.ops->use_grads(&ref, full, whole_off, NULL);

    /* In turn: a whole gradient, none, and (for the inner-group tensors) two owned slices. */
    long *off = malloc(sizeof(long) * (size_t)L->nparams), next = 0;
    sdp_grad_slices *slices = calloc((size_t)L->nparams, sizeof *slices);
    int sliced = 0, absent = 0;
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *t = &L->params[i];
        const int pick = i % 3; /* inner-group tensors: sliced, whole, none in turn */
        if (t->buffer || pick == 1) {
            off[i] = -1;
            absent += !t->buffer;
        } else if (t->group >= 0 && (pick == 0 || i % 2 == 0)) {
            off[i] = SDP_GRAD_SLICED;
            make_slices(t, &slices[i], &next);
            sliced++;
        } else {
            off[i] = next;
            next += (long)t->numel;
        }
    }
    float *got = calloc((size_t)next, sizeof(float)), *want = calloc((size_t)next, sizeof(float));
    bare.ops->use_grads(&bare, got, off, slices);
    done_log done = {0};
    bare.layer_done = on_block_done;
    bare.layer_done_ctx = &done;

    float images[BATCH * IN_CH * SIZE * SIZE];
    int labels[BATCH];
    random_batch(images, labels, 4);
    labels[1] = -1; /* ignored */
    sdp_batch b = {.B = BATCH, .T = 1, .images = images, .labels = labels};
    sdp_metrics mr, mb;
    ref.ops->forward(&ref, &b, true, &mr);
    bare.ops->forward(&bare, &b, true, &mb);
    assert_int_equal((int)mb.count, BATCH - 1);
    assert_true(mr.loss == mb.loss);
    ref.ops->backward(&ref, 0.5f);
    bare.ops->backward(&bare, 0.5f);

    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *t = &L->params[i];
        if (off[i] >= 0) memcpy(want + off[i], full + t->offset, t->numel * sizeof(float));
        if (off[i] == SDP_GRAD_SLICED) expect_slices(t, &slices[i], full + t->offset, want);
    }
    print_message("%d tensors sliced, %d without gradient, %ld gradient elements\n", sliced, absent,
                  next);
    assert_true(sliced >= 10 && absent >= 10);
    assert_true(tu_err_ratio_ff(got, want, (size_t)next, 1e-6, 1e-5) <= 1);
    assert_int_equal(done.calls, L->nblocks);
    for (int i = 0; i < done.calls; i++) assert_int_equal(done.order[i], L->nblocks - 1 - i);
    assert_true(bare.ops->train_flops_per_example(&bare) > 0);

    sdp_sync_grad_layout_free(off, slices, L->nparams);
    free(whole_off);
    free(got);
    free(want);
    free(full);
    bare.ops->destroy(&bare);
    ref.ops->destroy(&ref);
    sdp_backend_destroy(mc.backend);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(mem.cur[k], 0);
}

/* ---- FLOPs and memory --------------------------------------------------------------------- */

/* ResNet-18 on 32x32: 0.56 GMACs per image forward (the usual figure for the CIFAR variant). */
static void test_flops(void **state) {
    (void)state;
    sdp_resnet_config c = {.depth = 18, .in_channels = 3, .image_size = 32, .classes = 10};
    sdp_mem mem = {.dry = true};
    sdp_resnet *m =
        sdp_resnet_create(&c, NULL, 2, SDP_MODEL_INFER, SDP_GEMM_DNNL, SDP_CONV_IM2COL, &mem);
    /* Multiply-adds: stem 3*64*9*1024; stage s at 32 >> s pixels; shortcuts; fc. */
    double macs = 3.0 * 64 * 9 * 1024;
    for (int s = 0; s < 4; s++) {
        const double C = 64 << s, px = (32 >> s) * (32 >> s), cin = s ? C / 2 : C;
        macs += (cin * C * 9 + 3 * C * C * 9) * px + (s ? cin * C * px : 0);
    }
    macs += 512 * 10;
    assert_true(fabs(sdp_resnet_train_flops_per_image(m) - 6 * macs) < 1e-9 * macs);
    assert_true(fabs(macs / 0.556e9 - 1) < 0.01);
    sdp_resnet_destroy(m);
}

static void check_dry_run(const sdp_model_config *mc, const sdp_subnet_spec *spec, int B,
                          sdp_model_mode mode) {
    const sdp_model_family *f = sdp_model_family_find("resnet");
    sdp_mem dry = {.dry = true}, real = {0};
    sdp_model_config on_dry = *mc, on_real = *mc;
    on_dry.backend = sdp_backend_cpu(SDP_GEMM_DNNL, &dry);
    on_real.backend = sdp_backend_cpu(SDP_GEMM_DNNL, &real);
    sdp_model m;
    f->create(&m, &on_dry, spec, B, 1, mode);
    m.ops->destroy(&m);
    sdp_backend_destroy(on_dry.backend);
    f->create(&m, &on_real, spec, B, 1, mode);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(dry.peak[k], real.peak[k]);
    assert_true(real.peak[SDP_MEM_PARAMS] > 0 && real.peak[SDP_MEM_ACTS] > 0);
    assert_int_equal(real.peak[SDP_MEM_GRADS] > 0, mode == SDP_MODEL_TRAIN);
    m.ops->destroy(&m);
    sdp_backend_destroy(on_real.backend);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(real.cur[k], 0);
}

static void test_dry_run(void **state) {
    (void)state;
    sdp_model_config mc = {.arch = "resnet",
                           .depth = DEPTH,
                           .channels = WIDTH,
                           .in_channels = IN_CH,
                           .image_size = SIZE,
                           .classes = CLASSES};
    for (int mode = SDP_MODEL_INFER; mode <= SDP_MODEL_TRAIN_BARE; mode++)
        check_dry_run(&mc, NULL, BATCH, (sdp_model_mode)mode);
    sdp_layout full;
    const sdp_model_family *f = sdp_model_family_find("resnet");
    f->describe_full(&full, &mc);
    sdp_subnet_spec spec;
    sdp_subnet_spec_full(&spec, &full);
    spec.keep[2] = false;
    spec.kept[4][0] = 5;
    spec.kept[8][0] = 0;
    check_dry_run(&mc, &spec, BATCH, SDP_MODEL_TRAIN_BARE);
    sdp_subnet_spec_free(&spec);
    sdp_layout_free(&full);
    sdp_model_config r18 = {
        .arch = "resnet", .depth = 18, .in_channels = 3, .image_size = 32, .classes = 10};
    check_dry_run(&r18, NULL, 2, SDP_MODEL_TRAIN);
}

/* Activation bytes of a ResNet of this depth, counted without allocating (a dry mem). */
static size_t resnet_acts(int depth, sdp_model_mode mode, bool recompute) {
    sdp_model_config mc = {.arch = "resnet",
                           .depth = depth,
                           .channels = WIDTH,
                           .in_channels = IN_CH,
                           .image_size = SIZE,
                           .classes = CLASSES,
                           .recompute = recompute};
    sdp_mem dry = {.dry = true};
    mc.backend = sdp_backend_cpu(SDP_GEMM_DNNL, &dry);
    sdp_model m;
    sdp_model_family_find("resnet")->create(&m, &mc, NULL, BATCH, 1, mode);
    m.ops->destroy(&m);
    sdp_backend_destroy(mc.backend);
    return dry.peak[SDP_MEM_ACTS];
}

static size_t resnet_act_bytes(int depth, sdp_model_mode mode) {
    return resnet_acts(depth, mode, false);
}

/* Rank 0 evaluates the assembled full model: built for inference, its activations must not grow
 * with depth (one block's buffers serve every block), while training keeps every block's. Depths
 * 14 and 26: 2 and 4 blocks per stage. */
static void test_infer_acts_do_not_grow_with_depth(void **state) {
    (void)state;
    const size_t two = resnet_act_bytes(14, SDP_MODEL_INFER);
    const size_t four = resnet_act_bytes(26, SDP_MODEL_INFER);
    print_message("inference activations: %zu bytes with 2 blocks a stage, %zu with 4\n", two,
                  four);
    assert_true(two > 0);
    assert_int_equal(two, four);
    assert_true(resnet_act_bytes(26, SDP_MODEL_TRAIN) > resnet_act_bytes(14, SDP_MODEL_TRAIN));
}

/* With shared buffers the forward must compute exactly what a training model's does, in
 * evaluation and in training mode (the assembled model's running statistics are re-estimated
 * with training forwards): the same loss, logits and running statistics, bit for bit, for odd
 * and even numbers of blocks, and with a block that keeps no inner channel. */
static void check_infer_matches_train(int depth, const sdp_subnet_spec *spec) {
    sdp_resnet_config c = {.depth = depth,
                           .width = WIDTH,
                           .in_channels = IN_CH,
                           .image_size = SIZE,
                           .classes = CLASSES};
    sdp_mem mem = {0};
    sdp_resnet *inf =
        sdp_resnet_create(&c, spec, BATCH, SDP_MODEL_INFER, SDP_GEMM_DNNL, SDP_CONV_DNNL, &mem);
    sdp_resnet *train =
        sdp_resnet_create(&c, spec, BATCH, SDP_MODEL_TRAIN, SDP_GEMM_DNNL, SDP_CONV_DNNL, &mem);
    const sdp_layout *L = sdp_resnet_layout(inf);
    perturbed_params(L, sdp_resnet_params(inf), 11);
    memcpy(sdp_resnet_params(train), sdp_resnet_params(inf), L->numel * sizeof(float));
    float images[BATCH * IN_CH * SIZE * SIZE];
    int labels[BATCH];
    for (int pass = 0; pass < 4; pass++) {
        random_batch(images, labels, 20 + (uint64_t)pass);
        const bool training = pass % 2;
        sdp_metrics a, b;
        sdp_resnet_forward(inf, images, labels, BATCH, training, &a);
        sdp_resnet_forward(train, images, labels, BATCH, training, &b);
        assert_true(a.loss == b.loss && a.correct == b.correct && a.count == b.count);
        sdp_resnet_forward(inf, images, NULL, BATCH, training, &a);
        sdp_resnet_forward(train, images, NULL, BATCH, training, &b);
        for (int i = 0; i < BATCH; i++)
            assert_memory_equal(sdp_resnet_logits(inf, i), sdp_resnet_logits(train, i),
                                CLASSES * sizeof(float));
        assert_memory_equal(sdp_resnet_params(inf), sdp_resnet_params(train),
                            L->numel * sizeof(float));
    }
    sdp_resnet_destroy(inf);
    sdp_resnet_destroy(train);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(mem.cur[k], 0);
}

/* A subnetwork of the tiny network that drops block 2, keeps no inner channel in block 4 and two
 * in block 8; full is its layout, to free with the spec. */
static void uneven_spec(sdp_layout *full, sdp_subnet_spec *spec) {
    sdp_model_config mc = {.arch = "resnet",
                           .depth = DEPTH,
                           .channels = WIDTH,
                           .in_channels = IN_CH,
                           .image_size = SIZE,
                           .classes = CLASSES};
    sdp_model_family_find("resnet")->describe_full(full, &mc);
    sdp_subnet_spec_full(spec, full);
    spec->keep[2] = false;
    spec->kept[4][0] = 0;
    spec->kept[8][0] = 2;
}

static void test_infer_matches_train(void **state) {
    (void)state;
    check_infer_matches_train(8, NULL);  /* 3 blocks: the top output in the even blocks' buffer */
    check_infer_matches_train(14, NULL); /* 6 blocks: in the odd blocks' (the stem's) buffer */
    sdp_layout full;
    sdp_subnet_spec spec;
    uneven_spec(&full, &spec);
    check_infer_matches_train(DEPTH, &spec);
    sdp_subnet_spec_free(&spec);
    sdp_layout_free(&full);
}

/* ---- recomputation: one block's activations, the same gradients and statistics ------------- */

/* A recomputing model keeps each block's output (the next one's input) and its batch statistics
 * beside one block's convolution outputs: from 2 to 4 blocks a stage (depth 14 to 26), the 6
 * identity blocks added bring exactly their outputs and their two batch norms' mean and rstd. An
 * inference model is unchanged by the option. */
static void test_recompute_keeps_one_block(void **state) {
    (void)state;
    size_t added = 0;
    for (int s = 0; s < 3; s++) {
        const size_t C = (size_t)WIDTH << s, side = (size_t)SIZE >> s;
        added += 2 * (BATCH * C * side * side + 4 * C) * sizeof(float);
    }
    const size_t two = resnet_acts(14, SDP_MODEL_TRAIN, true);
    const size_t four = resnet_acts(26, SDP_MODEL_TRAIN, true);
    print_message("training activations, 4 blocks a stage: %zu bytes, %zu recomputing (2 blocks a "
                  "stage: %zu)\n",
                  resnet_act_bytes(26, SDP_MODEL_TRAIN), four, two);
    assert_int_equal(four - two, added);
    assert_true(four < resnet_act_bytes(26, SDP_MODEL_TRAIN));
    assert_int_equal(resnet_acts(26, SDP_MODEL_INFER, true), resnet_act_bytes(26, SDP_MODEL_INFER));
}

/* Two models of one (sub)network, the same weights: after two training forwards and backwards the
 * accumulated gradients, the running statistics and the losses must be bitwise equal with and
 * without recomputation (the recomputed forward moves no running statistic). floor: the backward
 * stops below block `floor` (no gradient for the stem or the blocks below, as under backward
 * masking with block units); 0 for the whole pass. */
static void check_recompute_exact(const sdp_subnet_spec *spec, int floor) {
    sdp_mem mem = {0};
    sdp_resnet_config c = tiny();
    sdp_resnet *m[2];
    for (int k = 0; k < 2; k++) {
        c.recompute = k == 1;
        m[k] = sdp_resnet_create(&c, spec, BATCH, SDP_MODEL_TRAIN_BARE, SDP_GEMM_DNNL,
                                 SDP_CONV_DNNL, &mem);
    }
    const sdp_layout *L = sdp_resnet_layout(m[0]);
    perturbed_params(L, sdp_resnet_params(m[0]), 13);
    memcpy(sdp_resnet_params(m[1]), sdp_resnet_params(m[0]), L->numel * sizeof(float));
    long *goff = malloc(sizeof(long) * (size_t)L->nparams);
    float *grads[2];
    for (int i = 0; i < L->nparams; i++) {
        const int b = L->params[i].block;
        const bool kept = b >= floor || (b < 0 && (floor == 0 || !sdp_param_is_stem(L, i)));
        goff[i] = kept && !L->params[i].buffer ? (long)L->params[i].offset : -1;
    }
    for (int k = 0; k < 2; k++) {
        grads[k] = sdp_alloc(&mem, SDP_MEM_GRADS, L->numel * sizeof(float));
        sdp_resnet_use_grads(m[k], grads[k], goff, NULL);
    }
    float images[BATCH * IN_CH * SIZE * SIZE];
    int labels[BATCH];
    for (int pass = 0; pass < 2; pass++) {
        random_batch(images, labels, 40 + (uint64_t)pass);
        sdp_metrics a[2];
        for (int k = 0; k < 2; k++) {
            sdp_resnet_forward(m[k], images, labels, BATCH, true, &a[k]);
            sdp_resnet_backward(m[k], 0.5f, NULL, NULL);
        }
        assert_true(a[0].loss == a[1].loss && a[0].correct == a[1].correct);
    }
    double norm = 0;
    for (size_t i = 0; i < L->numel; i++) norm += (double)grads[0][i] * grads[0][i];
    print_message("%s, floor %d: gradient norm %.6g\n", spec ? "subnetwork" : "full", floor,
                  sqrt(norm));
    assert_true(norm > 0);
    assert_memory_equal(grads[0], grads[1], L->numel * sizeof(float));
    assert_memory_equal(sdp_resnet_params(m[0]), sdp_resnet_params(m[1]),
                        L->numel * sizeof(float)); /* the running statistics */
    for (int k = 0; k < 2; k++) {
        sdp_resnet_destroy(m[k]);
        sdp_free(&mem, grads[k]);
    }
    free(goff);
    for (int k = 0; k < SDP_MEM_NCAT; k++) assert_int_equal(mem.cur[k], 0);
}

/* The full model, and a subnetwork that drops a block, keeps no inner channel in another and part
 * of them in a third, scaling their branches; the whole backward, and one that stops at block 4. */
static void test_recompute_is_exact(void **state) {
    (void)state;
    check_recompute_exact(NULL, 0);
    check_recompute_exact(NULL, 4);
    sdp_layout full;
    sdp_subnet_spec spec;
    uneven_spec(&full, &spec);
    spec.scale[1] = spec.scale[8] = 2.0f;
    check_recompute_exact(&spec, 0);
    check_recompute_exact(&spec, 3);
    sdp_subnet_spec_free(&spec);
    sdp_layout_free(&full);
}

int main(void) {
    sdp_set_threads(1); /* tiny convolutions: more threads only spin */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_full),
        cmocka_unit_test(test_gradients_subnetwork),
        cmocka_unit_test(test_running_statistics),
        cmocka_unit_test(test_layout_resnet18),
        cmocka_unit_test(test_layout_resnet20),
        cmocka_unit_test(test_layout_subnetwork),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_forward_masking_blocks),
        cmocka_unit_test(test_forward_masking_channels),
        cmocka_unit_test(test_block_without_channels),
        cmocka_unit_test(test_sliced_gradients),
        cmocka_unit_test(test_flops),
        cmocka_unit_test(test_dry_run),
        cmocka_unit_test(test_infer_acts_do_not_grow_with_depth),
        cmocka_unit_test(test_infer_matches_train),
        cmocka_unit_test(test_recompute_keeps_one_block),
        cmocka_unit_test(test_recompute_is_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* sdp plan --fit: the largest model that fits a memory limit, mode by mode (plan_fit.h).
 *
 * The sizes tried form a ladder, m = 1, 2, ... up to the largest the family describes:
 * - width (transformers: --width; resnet: --channels, its base width): m times a step. For
 *   transformers the step is the head count (twice it for llama, whose RoPE needs an even head
 *   size), so --heads stays as given and the head size grows. Neuron units must split every group
 *   into their chunks (--sdp-chunks, or the default: the smallest count from N up that divides the
 *   heads): the attention has --heads atoms, so the chunks must divide it at any width, and the
 *   step grows to the smallest that keeps the MLP (4 x width, or llama's 8/3 x width rounded up to
 *   32, unless --d-ff fixes it) a multiple of the chunks. A ResNet's groups are its stages'
 *   widths, base x 2^s: with neuron units the base steps by the chunk count (N by default).
 * - layers (transformers: --layers, step 1; resnet: --depth, 6m + 2, or 18 and 34 for the
 *   four-stage ResNets).
 * An SDP mode considers only sizes where every worker owns at least one unit (fewer layers than
 * that leave some workers nothing to train).
 *
 * Each size is measured with sdp plan's own prediction, and the search doubles m until a size
 * does not fit, then bisects. The largest worker's bytes grow with the width in every mode
 * (tests/test_plan_fit.sh), but not always with the layers under SDP (see lookahead), so the
 * search then tries a few sizes past the boundary and continues from any that fits. */
#include "plan_fit.h"

#include "train/run.h"
#include "train/run_plan.h"

#include "sdp/check.h"
#include "sdp/plan.h"
#include "sdp/resnet.h"
#include "sdp/transformer.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- --fit ---------------------------------------------------------------------------------- */

bool plan_fit_parse_bytes(const char *s, double *bytes) {
    static const struct {
        const char *name;
        double scale;
    } UNITS[] = {{"", 1},      {"B", 1},        {"kB", 1e3},     {"MB", 1e6},     {"GB", 1e9},
                 {"TB", 1e12}, {"KiB", 0x1p10}, {"MiB", 0x1p20}, {"GiB", 0x1p30}, {"TiB", 0x1p40}};
    if (!s || !(isdigit((unsigned char)s[0]) || (s[0] == '.' && isdigit((unsigned char)s[1]))))
        return false; /* no sign, no hexadecimal, no inf or nan */
    char *end;
    const double v = strtod(s, &end);
    if (end == s || s[1] == 'x' || s[1] == 'X') return false;
    for (size_t i = 0; i < sizeof UNITS / sizeof *UNITS; i++)
        if (!strcasecmp(end, UNITS[i].name)) {
            const double b = v * UNITS[i].scale;
            if (!isfinite(b) || b < 1 || b >= 0x1p63) return false;
            *bytes = b;
            return true;
        }
    return false;
}

/* ---- modes and ladders ---------------------------------------------------------------------- */

typedef struct {
    sdp_mask_mode mask; /* SDP_MASK_NONE: data parallelism */
    sdp_unit_kind unit;
    const char *name;
} fit_mode;

static const fit_mode MODES[] = {
    {SDP_MASK_NONE, SDP_UNIT_NEURON, "DDP"},
    {SDP_MASK_FORWARD, SDP_UNIT_BLOCK, "forward block"},
    {SDP_MASK_FORWARD, SDP_UNIT_NEURON, "forward neuron"},
    {SDP_MASK_BACKWARD, SDP_UNIT_BLOCK, "backward block"},
    {SDP_MASK_BACKWARD, SDP_UNIT_NEURON, "backward neuron"},
};

typedef struct {
    bool resnet, llama, by_layers;
    bool four_stages; /* resnet by depth: 18, then 34 */
    const char *dim;  /* the option varied */
    int step;         /* width and layer ladders: the size is m x step */
    int max_m;        /* the largest m the family describes and sdp plans (0: none) */
} ladder;

static int size_at(const ladder *L, int m) {
    if (L->resnet && L->by_layers) return L->four_stages ? (m == 1 ? 18 : 34) : 6 * m + 2;
    return m * L->step;
}

/* t with the ladder's m-th size, in `mode`. */
static train_opts sized(const plan_fit_request *r, const fit_mode *mode, const ladder *L, int m) {
    train_opts t = *r->t;
    const int v = size_at(L, m);
    if (L->by_layers)
        *(L->resnet ? &t.arch.depth : &t.arch.layers) = v;
    else
        *(L->resnet ? &t.arch.channels : &t.arch.width) = v;
    snprintf(t.sdp_mask, sizeof t.sdp_mask, "%s", sdp_mask_mode_name(mode->mask));
    if (mode->mask != SDP_MASK_NONE) /* DDP keeps --sdp-unit, as sdp plan's DDP row does */
        snprintf(t.sdp_unit, sizeof t.sdp_unit, "%s", sdp_unit_kind_name(mode->unit));
    return t;
}

static int gcd(int a, int b) {
    while (b) {
        const int t = a % b;
        a = b, b = t;
    }
    return a;
}

static int lcm(int a, int b) {
    return a / gcd(a, b) * b;
}

/* A transformer's MLP width at `width`, as the family fills it in. */
static int tf_d_ff(const train_opts *t, bool llama, int width) {
    if (t->arch.d_ff) return t->arch.d_ff;
    return llama ? ((8 * width / 3 + 31) / 32) * 32 : 4 * width;
}

/* The chunk count neuron units will have: --sdp-chunks, or the default the plan takes for these
 * group widths (the smallest count from N up that divides them all); 0 when there is none. */
static int chunks_of(const plan_fit_request *r, const int *widths, int n) {
    if (r->t->sdp_chunks > 0) return r->t->sdp_chunks;
    int narrowest = widths[0];
    for (int i = 1; i < n; i++)
        if (widths[i] < narrowest) narrowest = widths[i];
    for (int c = r->world; c <= narrowest; c++) {
        bool splits = true;
        for (int i = 0; i < n; i++) splits = splits && widths[i] % c == 0;
        if (splits) return c;
    }
    return 0;
}

/* Whether sdp describes a transformer of t's shape (sdp_tf_config_finish and the model's batch
 * check, which would otherwise stop the command). */
static bool tf_describable(const train_opts *t, const sdp_model_config *base, bool llama) {
    sdp_tf_config c = {.model = *base}; /* the data's vocabulary, vit's sequence and classes */
    c.model.layers = t->arch.layers;
    c.model.width = t->arch.width;
    c.model.d_ff = t->arch.d_ff;
    if (c.model.width > SDP_TF_MAX_WIDTH || c.model.layers > SDP_TF_MAX_LAYERS ||
        sdp_tf_params_estimate(&c) >= SDP_TF_MAX_PARAMS)
        return false;
    c.model.d_ff = tf_d_ff(t, llama, t->arch.width);
    if (c.model.d_ff > SDP_TF_MAX_D_FF) return false;
    const bool images = !strcmp(t->model, "vit");
    return sdp_tf_batch_fits(&c, t->batch, images ? c.model.seq_len : t->arch.seq_len);
}

void plan_check_worker_blocks(int world, int nblocks, bool forward) {
    SDP_CHECK(!forward || (double)world * nblocks <= PLAN_MAX_WORKER_BLOCKS,
              "--world %d with %d blocks under forward masking is more than sdp plan models "
              "(workers x blocks at most %d, since it counts every worker's model): use fewer "
              "workers or layers",
              world, nblocks, PLAN_MAX_WORKER_BLOCKS);
}

/* A ladder by layers under forward masking stops where plan_check_worker_blocks would refuse. */
static void cap_worker_blocks(const plan_fit_request *r, const fit_mode *mode, ladder *L) {
    if (mode->mask != SDP_MASK_FORWARD || !L->by_layers || L->four_stages) return;
    const int blocks_per_m = L->resnet ? 3 : 1; /* depth 6m + 2: three stages of m blocks */
    const long most = PLAN_MAX_WORKER_BLOCKS / ((long)r->world * blocks_per_m);
    if (most < L->max_m) L->max_m = (int)most;
}

/* The ladder of `mode`, or false with the reason no size of it can be planned. */
static bool ladder_of(const plan_fit_request *r, const fit_mode *mode, const sdp_model_config *base,
                      ladder *L, char *why, size_t len) {
    const train_opts *t = r->t;
    memset(L, 0, sizeof *L);
    L->resnet = !strcmp(t->model, "resnet");
    L->llama = !strcmp(t->model, "llama");
    L->by_layers = !strcmp(r->fit_by, "layers");
    L->dim =
        L->resnet ? (L->by_layers ? "depth" : "channels") : (L->by_layers ? "layers" : "width");
    L->step = 1;
    const bool neuron = mode->mask != SDP_MASK_NONE && mode->unit == SDP_UNIT_NEURON;
    if (L->resnet) {
        /* The groups are the stages' widths, base x 2^s: what splits the base splits them all. */
        const int chunks = r->t->sdp_chunks > 0 ? r->t->sdp_chunks : r->world;
        if (L->by_layers) {
            L->four_stages = base->depth == 18 || base->depth == 34;
            L->max_m = L->four_stages ? 2 : (SDP_RESNET_MAX_DEPTH - 2) / 6;
            const int c = chunks_of(r, &base->channels, 1);
            if (neuron && (c == 0 || base->channels % c)) {
                if (c)
                    snprintf(why, len,
                             "neuron units: --sdp-chunks %d does not split the %d base channels "
                             "into equal chunks: use --sdp-chunks dividing %d",
                             c, base->channels, base->channels);
                else
                    snprintf(why, len,
                             "neuron units: no chunk count from N = %d up splits the %d base "
                             "channels into equal chunks: use --sdp-chunks dividing %d",
                             r->world, base->channels, base->channels);
                return false;
            }
            return true;
        }
        if (neuron) L->step = chunks; /* every stage's width is base x 2^s */
        L->max_m = sdp_resnet_max_width(base->depth) / L->step;
        if (L->max_m < 1) {
            snprintf(why, len,
                     "neuron units: %d chunks are more than the widest base width (%d): use "
                     "--sdp-chunks",
                     chunks, sdp_resnet_max_width(base->depth));
            return false;
        }
        return true;
    }
    /* Transformers: the groups are the attention's heads and the MLP's neurons. */
    if (L->by_layers) {
        L->max_m = SDP_TF_MAX_LAYERS;
        if (neuron) {
            const int widths[2] = {t->arch.heads, base->d_ff}, c = chunks_of(r, widths, 2);
            if (c == 0 || t->arch.heads % c || base->d_ff % c) {
                if (c)
                    snprintf(why, len,
                             "neuron units: --sdp-chunks %d does not split %d heads and %d MLP "
                             "neurons into equal chunks: use --sdp-chunks dividing both",
                             c, t->arch.heads, base->d_ff);
                else
                    snprintf(why, len,
                             "neuron units: no chunk count from N = %d up splits %d heads and %d "
                             "MLP neurons into equal chunks: use --sdp-chunks dividing both",
                             r->world, t->arch.heads, base->d_ff);
                return false;
            }
        }
    } else {
        L->step = t->arch.heads * (L->llama ? 2 : 1);
        if (neuron) {
            const int c = chunks_of(r, &t->arch.heads, 1);
            if (c == 0 || t->arch.heads % c || (t->arch.d_ff && t->arch.d_ff % c)) {
                if (c == 0)
                    snprintf(why, len,
                             "neuron units: the default of one chunk per worker needs at least "
                             "N = %d heads (--heads %d): use --sdp-chunks dividing %d",
                             r->world, t->arch.heads, t->arch.heads);
                else
                    snprintf(why, len,
                             "neuron units: --sdp-chunks %d does not divide the %d heads%s: use a "
                             "divisor of both",
                             c, t->arch.heads, t->arch.d_ff ? " and --d-ff" : "");
                return false;
            }
            if (!t->arch.d_ff && !L->llama) {
                L->step = lcm(L->step, c / gcd(c, 4)); /* d_ff = 4 x width */
            } else if (!t->arch.d_ff && 32 % c) {
                /* llama: with width a multiple of 12, d_ff = 8 x width / 3 exactly */
                L->step = lcm(L->step, 12);
                L->step *= c / gcd(c, 8 * L->step / 3);
            }
        }
        L->max_m = SDP_TF_MAX_WIDTH / L->step;
    }
    /* The largest m describable: the limits grow with the size, so bisect. */
    int lo = 0, hi = L->max_m;
    while (lo < hi) {
        const int m = lo + (hi - lo + 1) / 2;
        const train_opts s = sized(r, mode, L, m);
        if (tf_describable(&s, base, L->llama))
            lo = m;
        else
            hi = m - 1;
    }
    L->max_m = lo;
    if (lo == 0) {
        snprintf(why, len, "even the smallest %s is more than sdp describes", L->dim);
        return false;
    }
    return true;
}

/* Whether the plan of t gives every worker a unit; why not, when not. */
static bool everyone_owns(const train_opts *t, int world, char *why, size_t len) {
    if (!strcmp(t->sdp_mask, "none")) return true;
    sdp_model_config cfg = train_run_model_config(t, train_run_dataset_shape(t));
    sdp_layout full;
    train_run_full_layout(&full, &cfg);
    sdp_plan_cfg pc = train_run_plan_config(t, world, &full);
    sdp_plan p;
    sdp_plan_build(&p, &pc, &full);
    int *owns = sdp_plan_units_per_worker(&p);
    int none = 0;
    for (int w = 0; w < world; w++) none += owns[w] == 0;
    if (none)
        snprintf(why, len, "%d of the %d workers would own no unit (%d unit%s, k = %d owners each)",
                 none, world, p.nunits, p.nunits == 1 ? "" : "s", p.cfg.owners);
    free(owns);
    sdp_plan_free(&p);
    sdp_layout_free(&full);
    return none == 0;
}

/* k for the SDP modes, or 0 with why none can be planned at this N (sdp plan without --fit would
 * refuse them). */
static int sdp_owners(const plan_fit_request *r, char *why, size_t len) {
    const train_opts *t = r->t;
    if (r->world < 2) {
        snprintf(why, len, "SDP needs at least 2 workers (--world 2 or more)");
        return 0;
    }
    if (t->sdp_owners > 0) {
        if (t->sdp_owners <= r->world) return t->sdp_owners;
        snprintf(why, len, "--sdp-owners %d is more than the %d workers", t->sdp_owners, r->world);
        return 0;
    }
    const int k = sdp_owners_from_coverage_or_0(t->sdp_coverage, r->world);
    if (!k)
        snprintf(why, len,
                 "--sdp-coverage %g of %d workers gives no whole k: give --sdp-owners k or a "
                 "coverage that does",
                 t->sdp_coverage, r->world);
    return k;
}

/* ---- the search ----------------------------------------------------------------------------- */

typedef struct {
    const fit_mode *mode;
    ladder L;
    bool planned;  /* false: no size can be planned (why) */
    bool fits;     /* false: not even the smallest fits (at = the smallest) */
    int m, next_m; /* the fitted size and the next one up (0: none, the family's largest) */
    plan_fit_point at, next;
    char why[256];
} fit_result;

static plan_fit_point measure(const plan_fit_request *r, const fit_mode *mode, const ladder *L,
                              int m) {
    const train_opts t = sized(r, mode, L, m);
    return r->measure(r->ctx, &t);
}

/* The smallest m whose plan gives every worker a unit (more units own more), or 0. */
static int smallest_owned(const plan_fit_request *r, const fit_mode *mode, const ladder *L,
                          char *why, size_t len) {
    train_opts t = sized(r, mode, L, 1);
    if (everyone_owns(&t, r->world, why, len)) return 1;
    if (!L->by_layers) return 0; /* the width changes no unit's owners */
    int bad = 1, good = 0, m = 1;
    while (m < L->max_m) {
        m = 2 * m < L->max_m ? 2 * m : L->max_m;
        t = sized(r, mode, L, m);
        char scratch[256];
        if (everyone_owns(&t, r->world, scratch, sizeof scratch)) {
            good = m;
            break;
        }
        bad = m;
    }
    if (!good) return 0;
    while (good - bad > 1) {
        const int m = bad + (good - bad) / 2;
        t = sized(r, mode, L, m);
        char scratch[256];
        if (everyone_owns(&t, r->world, scratch, sizeof scratch))
            good = m;
        else
            bad = m;
    }
    return good;
}

/* From f->m, which fits: doubles until a size does not, then bisects. Returns the size above
 * f->m, which does not fit (f->next), or 0 when f->m is the ladder's largest. */
static int grow(const plan_fit_request *r, double limit, fit_result *f) {
    int bad = 0;
    while (f->m < f->L.max_m) {
        const int m = 2 * f->m < f->L.max_m ? 2 * f->m : f->L.max_m;
        const plan_fit_point p = measure(r, f->mode, &f->L, m);
        if (p.bytes > limit) {
            bad = m, f->next = p;
            break;
        }
        f->m = m, f->at = p;
    }
    while (bad && bad - f->m > 1) {
        const int m = f->m + (bad - f->m) / 2;
        const plan_fit_point p = measure(r, f->mode, &f->L, m);
        if (p.bytes <= limit)
            f->m = m, f->at = p;
        else
            bad = m, f->next = p;
    }
    return bad;
}

/* Sizes past the first that does not fit that are tried too. The largest worker's bytes are not
 * monotone in the layers: how many units share an owner set changes with their number (at N = 64,
 * 127 blocks leave 63 leftover blocks in 2 owner sets, 128 blocks none), and with it backward
 * masking's publish buffer, the largest group, by up to a tenth of the total, and the gathers
 * rank 0 packs; a quarter of the size covers the drops seen (tests/test_plan_fit.sh). No drop was
 * seen in the width, where the units stay the same and grow together, nor under data parallelism,
 * with one owner set: two sizes guard those. */
static int lookahead(const ladder *L, const fit_mode *mode, int m) {
    if (!L->by_layers || mode->mask == SDP_MASK_NONE) return 2;
    const int q = m / 4;
    return q < 4 ? 4 : q > 64 ? 64 : q;
}

static void fit_mode_search(const plan_fit_request *r, double limit, const sdp_model_config *base,
                            fit_result *f) {
    f->planned = ladder_of(r, f->mode, base, &f->L, f->why, sizeof f->why);
    if (f->planned) cap_worker_blocks(r, f->mode, &f->L);
    if (!f->planned) return;
    const int lo = smallest_owned(r, f->mode, &f->L, f->why, sizeof f->why);
    if (lo == 0) {
        f->planned = false;
        return;
    }
    f->m = lo;
    f->at = measure(r, f->mode, &f->L, lo);
    f->fits = f->at.bytes <= limit;
    if (!f->fits) return;
    for (;;) {
        const int bad = grow(r, limit, f);
        f->next_m = bad;
        if (!bad) return;
        /* Look past the boundary (see lookahead): continue from any size there that fits. */
        const int last = bad + lookahead(&f->L, f->mode, f->m);
        bool found = false;
        for (int m = bad + 1; m <= last && m <= f->L.max_m && !found; m++) {
            const plan_fit_point p = measure(r, f->mode, &f->L, m);
            if (p.bytes <= limit) f->m = m, f->at = p, found = true;
        }
        if (!found) return;
    }
}

/* ---- printing ------------------------------------------------------------------------------- */

static const char *fmt_params(char *buf, size_t len, size_t n) {
    if (n >= 1000000000)
        snprintf(buf, len, "%.2fB", (double)n / 1e9);
    else
        snprintf(buf, len, "%.2fM", (double)n / 1e6);
    return buf;
}

static void print_point(const char *key, const fit_result *f, int m, const plan_fit_point *p,
                        bool comma) {
    printf("\"%s\": {\"%s\": %d, \"parameters\": %zu, \"largest_bytes\": %.0f, "
           "\"largest_rank\": %d}%s",
           key, f->L.dim, size_at(&f->L, m), p->params, p->bytes, p->rank, comma ? ", " : "");
}

static void print_json(const plan_fit_request *r, double limit, const fit_result *res, int n) {
    printf("{\n  \"fit_bytes\": %.0f,\n  \"fit_by\": \"%s\",\n  \"model\": \"%s\",\n  \"world\": "
           "%d,\n  \"zero\": %d,\n  \"recompute\": %s,\n  \"modes\": [\n",
           limit, r->fit_by, r->t->model, r->world, train_opts_zero(r->t),
           train_opts_recompute(r->t) ? "true" : "false");
    for (int i = 0; i < n; i++) {
        const fit_result *f = &res[i];
        printf("    {\"mode\": \"%s\", \"mask\": \"%s\", \"unit\": \"%s\", ", f->mode->name,
               sdp_mask_mode_name(f->mode->mask),
               f->mode->mask == SDP_MASK_NONE ? r->t->sdp_unit : sdp_unit_kind_name(f->mode->unit));
        if (!f->planned) {
            printf("\"planned\": false, \"fits\": false, \"reason\": \"%s\"", f->why);
        } else {
            printf("\"planned\": true, \"step\": %d, \"fits\": %s, ",
                   f->L.by_layers && f->L.resnet ? 6 : f->L.step, f->fits ? "true" : "false");
            if (!f->fits)
                print_point("smallest", f, f->m, &f->at, false);
            else {
                print_point("fit", f, f->m, &f->at, true);
                if (f->next_m)
                    print_point("next", f, f->next_m, &f->next, false);
                else
                    printf("\"next\": null");
            }
        }
        printf("}%s\n", i == n - 1 ? "" : ",");
    }
    printf("  ]\n}\n");
}

/* "23.97 GiB": two decimals, as sizes near the limit differ in the third digit. */
static const char *fmt_bytes(char *buf, size_t len, double bytes) {
    static const char *UNITS[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 5) bytes /= 1024.0, u++;
    snprintf(buf, len, u ? "%.2f %s" : "%.0f %s", bytes, UNITS[u]);
    return buf;
}

static void print_title(const plan_fit_request *r, double limit, const sdp_model_config *base) {
    char lim[32];
    fmt_bytes(lim, sizeof lim, limit);
    const bool layers = !strcmp(r->fit_by, "layers");
    printf("sdp plan --fit %s (%.0f bytes): the largest %s ", lim, limit, r->t->model);
    if (!strcmp(r->t->model, "resnet"))
        printf(layers ? "by depth, %d base channels" : "by base channels, depth %d",
               layers ? base->channels : base->depth);
    else if (layers)
        printf("by layers, width %d, %d heads, d_ff %d", base->width, base->heads, base->d_ff);
    else if (r->t->arch.d_ff)
        printf("by width, %d layer%s, %d heads, d_ff %d", base->layers,
               base->layers == 1 ? "" : "s", base->heads, r->t->arch.d_ff);
    else
        printf("by width, %d layer%s, %d heads, d_ff %s", base->layers,
               base->layers == 1 ? "" : "s", base->heads,
               strcmp(r->t->model, "llama") ? "4 x width" : "8/3 x width");
    char why[256];
    const int k = sdp_owners(r, why, sizeof why);
    if (k)
        printf(" | N = %d workers, SDP with k = %d owners (C = %.3g)", r->world, k,
               (double)k / r->world);
    else
        printf(" | N = %d worker%s, SDP not planned", r->world, r->world == 1 ? "" : "s");
    if (train_run_images(r->t))
        printf(" | batch %d images", r->t->batch);
    else
        printf(" | batch %d x %d", r->t->batch, r->t->arch.seq_len);
    printf(" | %s, %s, %d thread%s per worker", r->device, r->dtype, r->threads,
           r->threads == 1 ? "" : "s");
    if (train_opts_zero(r->t) == 1) printf(" | --zero 1: optimizer state sharded in every mode");
    if (train_opts_zero(r->t) == 2)
        printf(" | --zero 2: optimizer state and gradients sharded in every mode");
    if (train_opts_recompute(r->t)) printf(" | --recompute layer in every mode");
    printf("\n");
}

static void print_table(const plan_fit_request *r, double limit, const sdp_model_config *base,
                        const fit_result *res, int n) {
    print_title(r, limit, base);
    const char *dim = res[0].L.dim;
    char next[32];
    snprintf(next, sizeof next, "next %s", dim);
    printf("  %-16s %8s %11s %22s %13s %22s\n", "mode", dim, "parameters", "largest worker (rank)",
           next, "its largest worker");
    for (int i = 0; i < n; i++) {
        const fit_result *f = &res[i];
        char b[32], p[32], cell[48];
        if (!f->planned) {
            printf("  %-16s %8s   not planned: %s\n", f->mode->name, "-", f->why);
            continue;
        }
        fmt_bytes(b, sizeof b, f->at.bytes);
        if (!f->fits) {
            printf("  %-16s %8s   none fits: the smallest, %s %d (%s parameters), needs %s "
                   "(rank %d)\n",
                   f->mode->name, "-", f->L.dim, size_at(&f->L, f->m),
                   fmt_params(p, sizeof p, f->at.params), b, f->at.rank);
            continue;
        }
        snprintf(cell, sizeof cell, "%s (%d)", b, f->at.rank);
        printf("  %-16s %8d %11s %22s", f->mode->name, size_at(&f->L, f->m),
               fmt_params(p, sizeof p, f->at.params), cell);
        if (f->next_m) {
            fmt_bytes(b, sizeof b, f->next.bytes);
            snprintf(cell, sizeof cell, "%s (%d)", b, f->next.rank);
            printf(" %13d %22s\n", size_at(&f->L, f->next_m), cell);
        } else {
            printf("   none: the largest %s sdp plans\n", f->L.dim);
        }
    }
    printf("  largest worker: its total as sdp plan prints it (evaluation and checkpoint buffers "
           "included), at most the limit; the next size up is more\n");
    /* The ladders: each distinct step, with the modes that take it. */
    const fit_result *first = NULL;
    for (int i = 0; i < n && !first; i++)
        if (res[i].planned) first = &res[i];
    if (!first) return;
    if (first->L.resnet && first->L.by_layers) {
        printf("  depths: %s\n",
               first->L.four_stages ? "18, then 34 (four stages)" : "6n + 2 (three stages)");
        return;
    }
    printf("  %s steps:", first->L.dim);
    int shown = 0;
    for (int i = 0; i < n; i++) {
        bool seen = !res[i].planned;
        for (int j = 0; j < i && !seen; j++)
            seen = res[j].planned && res[j].L.step == res[i].L.step;
        if (seen) continue;
        printf("%s %d (", shown++ ? "," : "", res[i].L.step);
        for (int j = i, named = 0; j < n; j++)
            if (res[j].planned && res[j].L.step == res[i].L.step)
                printf("%s%s", named++ ? ", " : "", res[j].mode->name);
        printf(")");
    }
    printf("\n");
}

int plan_fit_run(const plan_fit_request *r) {
    double limit;
    SDP_CHECK(r->fit, "--fit-by %.40s needs --fit BYTES (such as --fit 24GiB)", r->fit_by);
    SDP_CHECK(
        plan_fit_parse_bytes(r->fit, &limit),
        "--fit '%.40s' is not a size in bytes from 1 B to 8 EiB: use a number with an optional "
        "unit (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB), such as 24GiB, 512MiB, 80GB or 1.5e9",
        r->fit);
    SDP_CHECK(!strcmp(r->fit_by, "width") || !strcmp(r->fit_by, "layers"),
              "unknown --fit-by '%.40s': use width or layers", r->fit_by);
    /* The model as given: the fixed options (and the depth or width not varied) come from it. */
    const sdp_model_config base = train_run_model_config(r->t, train_run_dataset_shape(r->t));
    fit_result res[sizeof MODES / sizeof *MODES];
    int n = 0;
    sdp_mask_mode only_mask;
    sdp_unit_kind only_unit;
    SDP_CHECK(sdp_mask_mode_parse(r->t->sdp_mask, &only_mask),
              "unknown --sdp-mask '%s': use none, forward or backward", r->t->sdp_mask);
    SDP_CHECK(sdp_unit_kind_parse(r->t->sdp_unit, &only_unit),
              "unknown --sdp-unit '%s': use block or neuron", r->t->sdp_unit);
    char sdp_why[256];
    const bool sdp_planned = sdp_owners(r, sdp_why, sizeof sdp_why) > 0;
    for (size_t i = 0; i < sizeof MODES / sizeof *MODES; i++) {
        const fit_mode *m = &MODES[i];
        if (m->mask != SDP_MASK_NONE && r->mask_given && m->mask != only_mask) continue;
        if (m->mask != SDP_MASK_NONE && r->unit_given && m->unit != only_unit) continue;
        if (m->mask != SDP_MASK_NONE && r->mask_given && only_mask == SDP_MASK_NONE) continue;
        memset(&res[n], 0, sizeof res[n]);
        res[n].mode = m;
        if (m->mask != SDP_MASK_NONE && !sdp_planned)
            snprintf(res[n].why, sizeof res[n].why, "%s", sdp_why);
        else
            fit_mode_search(r, limit, &base, &res[n]);
        n++;
    }
    if (r->json)
        print_json(r, limit, res, n);
    else
        print_table(r, limit, &base, res, n);
    return 0;
}

/* Convolution through oneDNN's primitives (forward, backward data, backward weights).
 *
 * The plan creates every oneDNN object once: the three convolutions, in the memory layouts oneDNN
 * picks for this shape (blocked, e.g. nChw16c, where its JIT kernels are fastest), and the reorders
 * between those layouts and the caller's NCHW / OIHW buffers. A call only points the memory
 * objects at the caller's buffers and executes. The reordered copies and oneDNN's own scratchpad
 * (user scratchpad mode) live in the caller's scratch, so oneDNN allocates nothing per call.
 *
 * Gradients accumulate for free: the convolution writes the gradient into scratch and the reorder
 * back to the caller's layout adds it in (a sum post-op), which is needed anyway for blocked
 * layouts since oneDNN's backward primitives themselves only overwrite.
 *
 * Executing points oneDNN memory objects at new buffers, so one plan must not run on two threads
 * at once. */
#include "ops/cpu/conv2d.h"

#include "sdp/check.h"

#include <dnnl.h>
#include <stdlib.h>

enum { FLOAT_ALIGN = 16 }; /* scratch regions start on 64-byte boundaries */

static void dnnl_ok(dnnl_status_t status, const char *call) {
    if (status != dnnl_success)
        sdp_fatal("conv2d: oneDNN call %s failed with status %d: use the im2col algorithm", call,
                  (int)status);
}
#define DNNL_OK(call) dnnl_ok((call), #call)

/* A primitive and the memory object for its scratchpad (NULL when it needs none). */
typedef struct {
    dnnl_primitive_t p;
    dnnl_memory_t scratchpad;
} prim;

/* A tensor as the caller holds it and as the convolution reads or writes it. */
typedef enum { READ, WRITE, ACCUMULATE } access;
typedef struct {
    dnnl_memory_t user; /* the caller's NCHW / OIHW buffer */
    dnnl_memory_t conv; /* the convolution's layout: the same object as user unless reordered */
    prim reorder;       /* user -> conv for READ; conv -> user (adding for ACCUMULATE) */
    size_t offset;      /* of the reordered copy in scratch, in floats */
    int arg;            /* DNNL_ARG_* of the convolution */
} operand;

typedef struct {
    prim conv;
    operand in[2], out;
} pass;

struct sdp_conv_dnnl {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    pass fwd, bwd_data, bwd_weights;
    /* Backward weights reads diff_dst in the layout backward data reorders it to: do it once. */
    bool share_diff_dst;
};

/* ---- creation ------------------------------------------------------------------------------ */

/* Hands out 64-byte aligned regions of scratch for the reordered copies. oneDNN's scratchpad goes
 * first, before all of them: one region of the largest size any primitive of the call needs,
 * shared since the primitives run one after another. */
typedef struct {
    size_t scratchpad_bytes, floats;
} scratch_layout;

static size_t aligned_floats(size_t bytes) {
    size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
    return (floats + FLOAT_ALIGN - 1) / FLOAT_ALIGN * FLOAT_ALIGN;
}

static size_t take(scratch_layout *l, size_t bytes) {
    size_t offset = l->floats;
    l->floats += aligned_floats(bytes);
    return offset;
}

static dnnl_primitive_attr_t make_attr(bool accumulate) {
    dnnl_primitive_attr_t attr;
    DNNL_OK(dnnl_primitive_attr_create(&attr));
    DNNL_OK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (accumulate) {
        dnnl_post_ops_t ops;
        DNNL_OK(dnnl_post_ops_create(&ops));
        DNNL_OK(dnnl_post_ops_append_sum(ops, 1.0f));
        DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, ops));
        DNNL_OK(dnnl_post_ops_destroy(ops));
    }
    return attr;
}

/* Takes ownership of pd. */
static prim make_prim(dnnl_primitive_desc_t pd, dnnl_engine_t engine, scratch_layout *l) {
    prim r = {0};
    const dnnl_memory_desc_t *pad_md =
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t bytes = pad_md ? dnnl_memory_desc_get_size(pad_md) : 0;
    if (bytes > 0) DNNL_OK(dnnl_memory_create(&r.scratchpad, pad_md, engine, DNNL_MEMORY_NONE));
    if (bytes > l->scratchpad_bytes) l->scratchpad_bytes = bytes;
    DNNL_OK(dnnl_primitive_create(&r.p, pd));
    DNNL_OK(dnnl_primitive_desc_destroy(pd));
    return r;
}

static prim make_reorder(const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                         bool accumulate, dnnl_engine_t engine, scratch_layout *l) {
    dnnl_primitive_attr_t attr = make_attr(accumulate);
    dnnl_primitive_desc_t pd;
    DNNL_OK(dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, attr));
    DNNL_OK(dnnl_primitive_attr_destroy(attr));
    return make_prim(pd, engine, l);
}

/* A reordered copy takes a region of `copies`; reorder scratchpads count in its scratchpad size. */
static operand make_operand(dnnl_primitive_desc_t conv_pd, int arg, const dnnl_memory_desc_t *user,
                            access how, dnnl_engine_t engine, scratch_layout *copies) {
    operand o = {.arg = arg};
    const dnnl_memory_desc_t *conv =
        dnnl_primitive_desc_query_md(conv_pd, dnnl_query_exec_arg_md, arg);
    DNNL_OK(dnnl_memory_create(&o.user, user, engine, DNNL_MEMORY_NONE));
    if (how != ACCUMULATE && dnnl_memory_desc_equal(conv, user)) {
        o.conv = o.user;
        return o;
    }
    DNNL_OK(dnnl_memory_create(&o.conv, conv, engine, DNNL_MEMORY_NONE));
    o.offset = take(copies, dnnl_memory_desc_get_size(conv));
    if (how == READ)
        o.reorder = make_reorder(user, conv, false, engine, copies);
    else
        o.reorder = make_reorder(conv, user, how == ACCUMULATE, engine, copies);
    return o;
}

static dnnl_memory_desc_t plain_desc(int d0, int d1, int d2, int d3, dnnl_format_tag_t tag) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {d0, d1, d2, d3};
    DNNL_OK(dnnl_memory_desc_init_by_tag(&md, 4, dims, dnnl_f32, tag));
    return md;
}

typedef struct {
    dnnl_memory_desc_t src, weights, dst;
} descs;

static descs make_descs(const cpu_conv_plan *plan, bool user) {
    const sdp_conv_shape *s = &plan->shape;
    dnnl_format_tag_t act = user ? dnnl_nchw : dnnl_format_tag_any;
    dnnl_format_tag_t wei = user ? dnnl_oihw : dnnl_format_tag_any;
    return (descs){plain_desc(s->B, s->IC, s->H, s->W, act),
                   plain_desc(s->OC, s->IC, s->KH, s->KW, wei),
                   plain_desc(s->B, s->OC, plan->OH, plan->OW, act)};
}

/* Creates the three convolution descriptors; make_pass takes them over. */
static void make_conv_pds(const cpu_conv_plan *plan, dnnl_engine_t engine,
                          dnnl_primitive_desc_t pds[3]) {
    const sdp_conv_shape *s = &plan->shape;
    descs any = make_descs(plan, false);
    dnnl_dims_t strides = {s->stride_h, s->stride_w}, pad = {s->pad_h, s->pad_w};
    dnnl_primitive_attr_t attr = make_attr(false);
    dnnl_convolution_desc_t fwd, bwd_data, bwd_weights;
    DNNL_OK(dnnl_convolution_forward_desc_init(&fwd, dnnl_forward_training, dnnl_convolution_direct,
                                               &any.src, &any.weights, NULL, &any.dst, strides, pad,
                                               pad));
    DNNL_OK(dnnl_primitive_desc_create(&pds[0], &fwd, attr, engine, NULL));
    DNNL_OK(dnnl_convolution_backward_data_desc_init(&bwd_data, dnnl_convolution_direct, &any.src,
                                                     &any.weights, &any.dst, strides, pad, pad));
    DNNL_OK(dnnl_primitive_desc_create(&pds[1], &bwd_data, attr, engine, pds[0]));
    DNNL_OK(dnnl_convolution_backward_weights_desc_init(&bwd_weights, dnnl_convolution_direct,
                                                        &any.src, &any.weights, NULL, &any.dst,
                                                        strides, pad, pad));
    DNNL_OK(dnnl_primitive_desc_create(&pds[2], &bwd_weights, attr, engine, pds[0]));
    DNNL_OK(dnnl_primitive_attr_destroy(attr));
}

/* Operands first (they query the descriptor), then the primitive, which takes the descriptor. */
static pass make_pass(dnnl_primitive_desc_t pd, dnnl_engine_t engine, scratch_layout *l,
                      int in_args[2], const dnnl_memory_desc_t *in_user[2], int out_arg,
                      const dnnl_memory_desc_t *out_user, access out_how) {
    pass p;
    for (int k = 0; k < 2; k++) p.in[k] = make_operand(pd, in_args[k], in_user[k], READ, engine, l);
    p.out = make_operand(pd, out_arg, out_user, out_how, engine, l);
    p.conv = make_prim(pd, engine, l);
    return p;
}

sdp_conv_dnnl *sdp_conv_dnnl_create(const cpu_conv_plan *plan, size_t *scratch_floats) {
    sdp_conv_dnnl *d = sdp_xcalloc(1, sizeof *d, "a oneDNN convolution plan");
    DNNL_OK(dnnl_engine_create(&d->engine, dnnl_cpu, 0));
    DNNL_OK(dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags));
    dnnl_primitive_desc_t pds[3];
    make_conv_pds(plan, d->engine, pds);
    descs user = make_descs(plan, true);

    /* Region 0 of each layout is the scratchpad; its size is known only at the end, so the
     * copies are laid out from 0 here and shifted past the scratchpad below. */
    scratch_layout fwd = {0}, bwd = {0};
    d->fwd = make_pass(pds[0], d->engine, &fwd, (int[2]){DNNL_ARG_SRC, DNNL_ARG_WEIGHTS},
                       (const dnnl_memory_desc_t *[2]){&user.src, &user.weights}, DNNL_ARG_DST,
                       &user.dst, WRITE);
    d->bwd_data = make_pass(pds[1], d->engine, &bwd, (int[2]){DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS},
                            (const dnnl_memory_desc_t *[2]){&user.dst, &user.weights},
                            DNNL_ARG_DIFF_SRC, &user.src, ACCUMULATE);
    d->bwd_weights = make_pass(pds[2], d->engine, &bwd, (int[2]){DNNL_ARG_SRC, DNNL_ARG_DIFF_DST},
                               (const dnnl_memory_desc_t *[2]){&user.src, &user.dst},
                               DNNL_ARG_DIFF_WEIGHTS, &user.weights, ACCUMULATE);
    const dnnl_memory_desc_t *a, *b;
    DNNL_OK(dnnl_memory_get_memory_desc(d->bwd_data.in[0].conv, &a));
    DNNL_OK(dnnl_memory_get_memory_desc(d->bwd_weights.in[1].conv, &b));
    d->share_diff_dst = dnnl_memory_desc_equal(a, b);

    size_t fwd_pad = aligned_floats(fwd.scratchpad_bytes);
    size_t bwd_pad = aligned_floats(bwd.scratchpad_bytes);
    pass *passes[3] = {&d->fwd, &d->bwd_data, &d->bwd_weights};
    for (int k = 0; k < 3; k++) {
        size_t shift = k == 0 ? fwd_pad : bwd_pad;
        passes[k]->in[0].offset += shift;
        passes[k]->in[1].offset += shift;
        passes[k]->out.offset += shift;
    }
    size_t fwd_total = fwd_pad + fwd.floats, bwd_total = bwd_pad + bwd.floats;
    *scratch_floats = fwd_total > bwd_total ? fwd_total : bwd_total;
    return d;
}

static void destroy_prim(prim *p) {
    if (p->p) DNNL_OK(dnnl_primitive_destroy(p->p));
    if (p->scratchpad) DNNL_OK(dnnl_memory_destroy(p->scratchpad));
}

static void destroy_operand(operand *o) {
    if (o->conv != o->user) DNNL_OK(dnnl_memory_destroy(o->conv));
    DNNL_OK(dnnl_memory_destroy(o->user));
    destroy_prim(&o->reorder);
}

void sdp_conv_dnnl_destroy(sdp_conv_dnnl *d) {
    pass *passes[3] = {&d->fwd, &d->bwd_data, &d->bwd_weights};
    for (int k = 0; k < 3; k++) {
        destroy_prim(&passes[k]->conv);
        destroy_operand(&passes[k]->in[0]);
        destroy_operand(&passes[k]->in[1]);
        destroy_operand(&passes[k]->out);
    }
    DNNL_OK(dnnl_stream_destroy(d->stream));
    DNNL_OK(dnnl_engine_destroy(d->engine));
    free(d);
}

/* ---- execution ----------------------------------------------------------------------------- */

static void set_handle(dnnl_memory_t m, const void *p) {
    DNNL_OK(dnnl_memory_set_data_handle(m, (void *)p)); /* oneDNN only reads inputs */
}

/* Runs p with args plus its scratchpad, which starts at scratch. */
static void execute(const prim *p, dnnl_stream_t stream, int nargs, dnnl_exec_arg_t *args,
                    float *scratch) {
    if (p->scratchpad) {
        set_handle(p->scratchpad, scratch);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->scratchpad};
    }
    DNNL_OK(dnnl_primitive_execute(p->p, stream, nargs, args));
}

static void run_reorder(const operand *o, dnnl_stream_t stream, bool to_conv, float *scratch) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, to_conv ? o->user : o->conv},
                               {DNNL_ARG_TO, to_conv ? o->conv : o->user}};
    execute(&o->reorder, stream, 2, args, scratch);
}

/* Points an input at the caller's buffer and, if the convolution wants another layout, reorders
 * it into scratch. */
static void bind_input(const operand *o, const float *user, dnnl_stream_t stream, float *scratch) {
    set_handle(o->user, user);
    if (!o->reorder.p) return;
    set_handle(o->conv, scratch + o->offset);
    run_reorder(o, stream, true, scratch);
}

static void bind_output(const operand *o, float *user, float *scratch) {
    set_handle(o->user, user);
    if (o->reorder.p) set_handle(o->conv, scratch + o->offset);
}

static void run_pass(const pass *p, dnnl_stream_t stream, float *scratch) {
    dnnl_exec_arg_t args[4] = {
        {p->in[0].arg, p->in[0].conv}, {p->in[1].arg, p->in[1].conv}, {p->out.arg, p->out.conv}};
    execute(&p->conv, stream, 3, args, scratch);
    if (p->out.reorder.p) run_reorder(&p->out, stream, false, scratch);
}

void sdp_conv_dnnl_fwd(const sdp_conv_dnnl *d, float *out, const float *inp, const float *w,
                       float *scratch) {
    bind_input(&d->fwd.in[0], inp, d->stream, scratch);
    bind_input(&d->fwd.in[1], w, d->stream, scratch);
    bind_output(&d->fwd.out, out, scratch);
    run_pass(&d->fwd, d->stream, scratch);
    DNNL_OK(dnnl_stream_wait(d->stream));
}

void sdp_conv_dnnl_bwd(const sdp_conv_dnnl *d, float *dinp, float *dw, const float *dout,
                       const float *inp, const float *w, float *scratch) {
    if (dinp) {
        bind_input(&d->bwd_data.in[0], dout, d->stream, scratch);
        bind_input(&d->bwd_data.in[1], w, d->stream, scratch);
        bind_output(&d->bwd_data.out, dinp, scratch);
        run_pass(&d->bwd_data, d->stream, scratch);
    }
    if (dw) {
        const operand *dy = &d->bwd_weights.in[1];
        bind_input(&d->bwd_weights.in[0], inp, d->stream, scratch);
        if (dinp && d->share_diff_dst && dy->reorder.p)
            set_handle(dy->conv, scratch + d->bwd_data.in[0].offset);
        else
            bind_input(dy, dout, d->stream, scratch);
        bind_output(&d->bwd_weights.out, dw, scratch);
        run_pass(&d->bwd_weights, d->stream, scratch);
    }
    DNNL_OK(dnnl_stream_wait(d->stream));
}

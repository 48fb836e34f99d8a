#include "sdp/layout.h"

#include "sdp/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

void sdp_layout_init(sdp_layout *L, int nblocks) {
    memset(L, 0, sizeof *L);
    L->nblocks = nblocks;
    L->blocks =
        nblocks ? sdp_xcalloc((size_t)nblocks, sizeof *L->blocks, "the model's blocks") : NULL;
}

void sdp_layout_free(sdp_layout *L) {
    free(L->by_name);
    free(L->params);
    free(L->blocks);
    memset(L, 0, sizeof *L);
}

static uint64_t fnv1a(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* The slot of name in the hash: where its index + 1 is, or the empty slot where it would go. */
static int name_slot(const sdp_layout *L, const char *name) {
    const unsigned mask = (unsigned)L->name_slots - 1;
    unsigned at = (unsigned)fnv1a(name) & mask;
    while (L->by_name[at] && strcmp(L->params[L->by_name[at] - 1].name, name) != 0)
        at = (at + 1) & mask;
    return (int)at;
}

/* Rebuilds the hash with twice the slots once it is half full. */
static void index_grow(sdp_layout *L) {
    if (2 * (L->nparams + 1) <= L->name_slots) return;
    L->name_slots = L->name_slots ? 2 * L->name_slots : 64;
    free(L->by_name);
    L->by_name = sdp_xcalloc((size_t)L->name_slots, sizeof *L->by_name, "the tensor-name index");
    for (int i = 0; i < L->nparams; i++) L->by_name[name_slot(L, L->params[i].name)] = i + 1;
}

int sdp_layout_add(sdp_layout *L, const char *name, int ndim, const int64_t *shape, int block,
                   int group, int axis, int segments, bool decay, sdp_init_kind init,
                   float init_std) {
    SDP_ASSERT(ndim >= 1 && ndim <= 4);
    if (L->nparams == L->cap_params) {
        L->cap_params = L->cap_params ? 2 * L->cap_params : 32;
        L->params = sdp_xrealloc(L->params, (size_t)L->cap_params * sizeof *L->params,
                                 "the model's tensors");
    }
    sdp_param *p = &L->params[L->nparams];
    memset(p, 0, sizeof *p);
    SDP_ASSERT(strlen(name) < SDP_NAME_MAX);
    strcpy(p->name, name);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        SDP_ASSERT(shape[i] >= 0);
        p->shape[i] = shape[i];
        p->numel *= (size_t)shape[i];
    }
    p->offset = L->numel;
    p->block = block;
    p->group = group;
    p->axis = axis;
    p->segments = segments;
    p->decay = decay;
    p->init = init;
    p->init_std = init_std;
    L->numel += p->numel;
    index_grow(L);
    const int at = name_slot(L, name);
    SDP_ASSERT(!L->by_name[at]); /* the families name every tensor once */
    L->by_name[at] = L->nparams + 1;
    return L->nparams++;
}

const sdp_param *sdp_layout_find(const sdp_layout *L, const char *name) {
    if (!L->name_slots) return NULL;
    const int i = L->by_name[name_slot(L, name)];
    return i ? &L->params[i - 1] : NULL;
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Counter-based normal: a hash of (seed, tensor name, element) feeds Box-Muller, so any element
 * can be produced alone, in any order, on any rank. */
float sdp_param_init_value(const sdp_param *p, uint64_t seed, uint64_t index) {
    switch (p->init) {
    case SDP_INIT_ONES:
        return 1.0f;
    case SDP_INIT_ZEROS:
        return 0.0f;
    case SDP_INIT_NORMAL:
        break;
    }
    uint64_t key = mix64(seed ^ mix64(fnv1a(p->name) + index * 0x9e3779b97f4a7c15ull));
    uint64_t key2 = mix64(key + 0x632be59bd9b4e019ull);
    double u1 = ((double)(key >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(key2 >> 11) * (1.0 / 9007199254740992.0);
    double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    return (float)(z * p->init_std);
}

void sdp_layout_init_values(const sdp_layout *L, float *params, uint64_t seed) {
    for (int i = 0; i < L->nparams; i++) {
        const sdp_param *p = &L->params[i];
        float *dst = params + p->offset;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < p->numel; j++) dst[j] = sdp_param_init_value(p, seed, j);
    }
}

bool sdp_param_is_stem(const sdp_layout *L, int i) {
    if (L->params[i].block >= 0) return false;
    for (int j = 0; j < i; j++)
        if (L->params[j].block >= 0) return false;
    return true;
}

int sdp_layout_backward_floor(const sdp_layout *L, const long *grad_offset) {
    int floor = L->nblocks;
    for (int i = 0; i < L->nparams; i++) {
        if (grad_offset[i] == -1) continue;
        const sdp_param *p = &L->params[i];
        if (sdp_param_is_stem(L, i)) return -1;
        if (p->block >= 0 && p->block < floor) floor = p->block;
    }
    return floor;
}

/* The plan's faces to the user: option names, the JSON record saved with a run, and the
 * ownership table printed at startup and by `sdp plan`. */
#include "sdp/plan.h"

#include "sdp/check.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

/* ---- option names ------------------------------------------------------------------------- */

static const char *const MASK_NAMES[] = {"none", "forward", "backward"};
static const char *const UNIT_NAMES[] = {"block", "neuron"};
static const char *const ASSIGN_NAMES[] = {"cyclic", "random"};
static const char *const SCALE_NAMES[] = {"none", "inverse"};

static bool parse_name(const char *s, const char *const *names, int n, int *out) {
    for (int i = 0; s && i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return true;
        }
    }
    return false;
}

static const char *name_of(int v, const char *const *names, int n) {
    return v >= 0 && v < n ? names[v] : "invalid";
}

#define NNAMES(a) ((int)(sizeof(a) / sizeof((a)[0])))

bool sdp_mask_mode_parse(const char *s, sdp_mask_mode *out) {
    int v;
    if (!parse_name(s, MASK_NAMES, NNAMES(MASK_NAMES), &v)) return false;
    *out = (sdp_mask_mode)v;
    return true;
}

bool sdp_unit_kind_parse(const char *s, sdp_unit_kind *out) {
    int v;
    if (!parse_name(s, UNIT_NAMES, NNAMES(UNIT_NAMES), &v)) return false;
    *out = (sdp_unit_kind)v;
    return true;
}

bool sdp_assign_kind_parse(const char *s, sdp_assign_kind *out) {
    int v;
    if (!parse_name(s, ASSIGN_NAMES, NNAMES(ASSIGN_NAMES), &v)) return false;
    *out = (sdp_assign_kind)v;
    return true;
}

bool sdp_branch_scale_parse(const char *s, sdp_branch_scale *out) {
    int v;
    if (!parse_name(s, SCALE_NAMES, NNAMES(SCALE_NAMES), &v)) return false;
    *out = (sdp_branch_scale)v;
    return true;
}

const char *sdp_mask_mode_name(sdp_mask_mode m) {
    return name_of((int)m, MASK_NAMES, NNAMES(MASK_NAMES));
}

const char *sdp_unit_kind_name(sdp_unit_kind u) {
    return name_of((int)u, UNIT_NAMES, NNAMES(UNIT_NAMES));
}

const char *sdp_assign_kind_name(sdp_assign_kind a) {
    return name_of((int)a, ASSIGN_NAMES, NNAMES(ASSIGN_NAMES));
}

const char *sdp_branch_scale_name(sdp_branch_scale s) {
    return name_of((int)s, SCALE_NAMES, NNAMES(SCALE_NAMES));
}

/* ---- JSON --------------------------------------------------------------------------------- */

static cJSON *json_unit(const sdp_plan *p, const sdp_unit *u, const sdp_layout *full) {
    const sdp_block *blk = &full->blocks[u->block];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "block", blk->name);
    if (u->group >= 0) {
        cJSON_AddStringToObject(o, "group", blk->groups[u->group].name);
        int range[2] = {u->start, u->start + u->width};
        cJSON_AddItemToObject(o, "atoms", cJSON_CreateIntArray(range, 2));
    } else {
        cJSON_AddNullToObject(o, "group"); /* a block unit: the whole block */
        cJSON_AddNullToObject(o, "atoms");
    }
    cJSON_AddNumberToObject(o, "chunk", u->chunk);
    cJSON_AddItemToObject(o, "owners", cJSON_CreateIntArray(u->owners, p->cfg.owners));
    return o;
}

char *sdp_plan_to_json(const sdp_plan *p, const sdp_layout *full) {
    const sdp_plan_cfg *c = &p->cfg;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "mask", sdp_mask_mode_name(c->mask));
    cJSON_AddStringToObject(root, "unit", sdp_unit_kind_name(c->unit));
    cJSON_AddStringToObject(root, "assign", sdp_assign_kind_name(c->assign));
    cJSON_AddStringToObject(root, "branch_scale", sdp_branch_scale_name(c->scale));
    cJSON_AddNumberToObject(root, "world", c->world);
    cJSON_AddNumberToObject(root, "owners", c->owners);
    cJSON_AddNumberToObject(root, "coverage", sdp_plan_coverage(p));
    cJSON_AddNumberToObject(root, "chunks", c->chunks);
    /* JSON numbers are doubles: a seed beyond 2^53 is written as a decimal string instead. */
    if (c->seed <= (1ull << 53)) {
        cJSON_AddNumberToObject(root, "seed", (double)c->seed);
    } else {
        char seed[24];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->seed);
        cJSON_AddStringToObject(root, "seed", seed);
    }
    cJSON_AddNumberToObject(root, "owner_groups", p->ngroups);
    cJSON *units = cJSON_AddArrayToObject(root, "units");
    for (int i = 0; i < p->nunits; i++)
        cJSON_AddItemToArray(units, json_unit(p, &p->units[i], full));
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    SDP_CHECK(text, "out of memory writing the SDP plan as JSON");
    return text;
}

/* ---- table -------------------------------------------------------------------------------- */

enum { MAX_COLUMNS = 16, CELL_MAX = 64 };

/* What worker w owns of block b: "#" / "." for a block unit, "=" when shared, else the number
 * of chunks owned of each group, comma-separated. */
static void format_cell(char *cell, const sdp_plan *p, const sdp_block *blk, int b, int w) {
    if (p->cfg.unit == SDP_UNIT_BLOCK) {
        int u = sdp_plan_unit_of(p, b, -1, 0);
        snprintf(cell, CELL_MAX, "%s", u < 0 ? "=" : (sdp_plan_owns(p, u, w) ? "#" : "."));
        return;
    }
    if (blk->ngroups == 0) {
        snprintf(cell, CELL_MAX, "=");
        return;
    }
    size_t used = 0;
    for (int g = 0; g < blk->ngroups; g++) {
        int first = sdp_plan_unit_of(p, b, g, 0), owned = 0;
        for (int c = 0; c < p->cfg.chunks; c++) owned += sdp_plan_owns(p, first + c, w);
        used += (size_t)snprintf(cell + used, CELL_MAX - used, "%s%d", g ? "," : "", owned);
        if (used >= CELL_MAX) break;
    }
}

static void print_legend(const sdp_plan *p, const sdp_layout *full, FILE *f) {
    if (p->cfg.unit == SDP_UNIT_BLOCK) {
        fprintf(f, "legend: # owns the block, . does not, = shared by all (not droppable)\n");
        return;
    }
    const sdp_block *named = NULL; /* group names from the first block that has groups */
    for (int b = 0; b < full->nblocks && !named; b++)
        if (full->blocks[b].ngroups) named = &full->blocks[b];
    char names[CELL_MAX * SDP_MAX_GROUPS] = "";
    for (int g = 0; named && g < named->ngroups; g++) {
        if (g) strcat(names, ",");
        strcat(names, named->groups[g].name);
    }
    fprintf(f, "legend: chunks owned of each group (%s), out of %d per group; = shared by all\n",
            names, p->cfg.chunks);
}

static void print_units_per_worker(const sdp_plan *p, FILE *f) {
    const int N = p->cfg.world;
    int *count = sdp_plan_units_per_worker(p);
    int lo = count[0], hi = count[0];
    for (int w = 1; w < N; w++) {
        if (count[w] < lo) lo = count[w];
        if (count[w] > hi) hi = count[w];
    }
    fprintf(f, "units per worker: min %d, max %d (of %d units)\n", lo, hi, p->nunits);
    free(count);
}

void sdp_plan_print(const sdp_plan *p, const sdp_layout *full, FILE *f) {
    const sdp_plan_cfg *c = &p->cfg;
    const int N = c->world, shown = N < MAX_COLUMNS ? N : MAX_COLUMNS;
    fprintf(f, "SDP plan: mask %s, %s units", sdp_mask_mode_name(c->mask),
            sdp_unit_kind_name(c->unit));
    if (c->unit == SDP_UNIT_NEURON) fprintf(f, " (%d chunks per group)", c->chunks);
    fprintf(f, ", %s assignment, %d workers, k = %d (coverage %g), %d owner groups\n",
            sdp_assign_kind_name(c->assign), N, c->owners, sdp_plan_coverage(p), p->ngroups);
    print_legend(p, full, f);

    char cell[CELL_MAX];
    int name_w = (int)strlen("block"), cell_w = snprintf(cell, sizeof cell, "w%d", shown - 1);
    for (int b = 0; b < full->nblocks; b++) {
        int len = (int)strlen(full->blocks[b].name);
        if (len > name_w) name_w = len;
        for (int w = 0; w < shown; w++) {
            format_cell(cell, p, &full->blocks[b], b, w);
            if ((int)strlen(cell) > cell_w) cell_w = (int)strlen(cell);
        }
    }
    fprintf(f, "%-*s", name_w, "block");
    for (int w = 0; w < shown; w++) {
        snprintf(cell, sizeof cell, "w%d", w);
        fprintf(f, " %*s", cell_w, cell);
    }
    fputc('\n', f);
    for (int b = 0; b < full->nblocks; b++) {
        fprintf(f, "%-*s", name_w, full->blocks[b].name);
        for (int w = 0; w < shown; w++) {
            format_cell(cell, p, &full->blocks[b], b, w);
            fprintf(f, " %*s", cell_w, cell);
        }
        fputc('\n', f);
    }
    if (N > shown) fprintf(f, "... and %d more workers\n", N - shown);
    print_units_per_worker(p, f);
}

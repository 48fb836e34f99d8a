/* safetensors: an 8-byte little-endian header length N, N bytes of JSON, then the data section.
 * The JSON maps each tensor name to {"dtype","shape","data_offsets":[begin,end)} relative to the
 * data section, plus "__metadata__" (string -> string), where we keep the data section's CRC32. */
#include "sdp/ckpt.h"

#include "io/atomic_file.h"
#include "sdp/check.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors stores little-endian data; this code writes host memory as is"
#endif

#define CRC_KEY      "sdp.crc32"
#define METADATA_KEY "__metadata__"

/* zlib's crc32 takes 32-bit lengths, so big buffers are fed in pieces. */
enum { CRC_CHUNK = 1 << 30 };

static uint32_t crc32_update(uint32_t crc, const void *data, size_t len) {
    const unsigned char *p = data;
    while (len > 0) {
        size_t piece = len < CRC_CHUNK ? len : CRC_CHUNK;
        crc = (uint32_t)crc32(crc, p, (uInt)piece);
        p += piece;
        len -= piece;
    }
    return crc;
}

/* ---------------------------------------------------------------- writing */

static size_t f32_tensor_bytes(const sdp_st_tensor *t) {
    SDP_CHECK(t->name && t->name[0], "cannot write a tensor without a name: give every tensor one");
    SDP_CHECK(strcmp(t->name, METADATA_KEY) != 0,
              "tensor name '%s' is reserved by safetensors: rename the tensor", t->name);
    SDP_CHECK(t->ndim >= 0 && t->ndim <= SDP_ST_MAX_DIMS,
              "tensor '%s' has %d dimensions; safetensors files here allow 0 to %d", t->name,
              t->ndim, SDP_ST_MAX_DIMS);
    size_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        SDP_CHECK(t->shape[d] >= 0, "tensor '%s' has negative dimension %" PRId64, t->name,
                  t->shape[d]);
        SDP_CHECK(t->shape[d] == 0 || count <= SIZE_MAX / 4 / (size_t)t->shape[d],
                  "tensor '%s' is too large to address", t->name);
        count *= (size_t)t->shape[d];
    }
    SDP_CHECK(count == 0 || t->data, "tensor '%s' has no data pointer", t->name);
    return count * sizeof(float);
}

/* Integers are written as raw text so that offsets past 2^31 never turn into "1e+10". */
static cJSON *json_int_array(const int64_t *v, int n) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        char num[32];
        snprintf(num, sizeof num, "%" PRId64, v[i]);
        cJSON_AddItemToArray(arr, cJSON_CreateRaw(num));
    }
    return arr;
}

static void add_metadata(cJSON *root, const char *const *meta, uint32_t crc) {
    cJSON *m = cJSON_AddObjectToObject(root, METADATA_KEY);
    for (int i = 0; meta && meta[i]; i += 2) {
        SDP_CHECK(meta[i + 1], "metadata key '%s' has no value: pass key, value pairs", meta[i]);
        SDP_CHECK(strcmp(meta[i], CRC_KEY) != 0,
                  "metadata key '" CRC_KEY "' is reserved for the checksum: use another key");
        SDP_CHECK(!cJSON_GetObjectItemCaseSensitive(m, meta[i]),
                  "metadata key '%s' is given twice: pass each key once", meta[i]);
        cJSON_AddStringToObject(m, meta[i], meta[i + 1]);
    }
    char hex[16];
    snprintf(hex, sizeof hex, "%08" PRIx32, crc);
    cJSON_AddStringToObject(m, CRC_KEY, hex);
}

/* The JSON header, padded with spaces so that the data section starts 8-byte aligned. */
static char *build_header(const sdp_st_tensor *tensors, int n, const char *const *meta,
                          size_t *header_len) {
    cJSON *root = cJSON_CreateObject();
    uint32_t crc = (uint32_t)crc32(0, Z_NULL, 0);
    for (int i = 0; i < n; i++)
        crc = crc32_update(crc, tensors[i].data, f32_tensor_bytes(&tensors[i]));
    add_metadata(root, meta, crc);
    int64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const sdp_st_tensor *t = &tensors[i];
        SDP_CHECK(!cJSON_GetObjectItemCaseSensitive(root, t->name),
                  "tensor name '%s' is used twice: give each tensor a unique name", t->name);
        int64_t range[2] = {offset, offset + (int64_t)f32_tensor_bytes(t)};
        cJSON *entry = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(entry, "dtype", "F32");
        cJSON_AddItemToObject(entry, "shape", json_int_array(t->shape, t->ndim));
        cJSON_AddItemToObject(entry, "data_offsets", json_int_array(range, 2));
        offset = range[1];
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    SDP_CHECK(json, "out of memory building a safetensors header");
    size_t len = strlen(json), padded = (len + 7) & ~(size_t)7;
    char *header = realloc(json, padded);
    SDP_CHECK(header, "out of memory building a safetensors header");
    memset(header + len, ' ', padded - len);
    *header_len = padded;
    return header;
}

void sdp_st_write(const char *path, const sdp_st_tensor *tensors, int n, const char *const *meta) {
    SDP_CHECK(n >= 0 && (n == 0 || tensors), "sdp_st_write: bad tensor list for '%s'", path);
    size_t header_len;
    char *header = build_header(tensors, n, meta, &header_len);
    unsigned char len_le[8];
    for (int b = 0; b < 8; b++) len_le[b] = (unsigned char)((uint64_t)header_len >> (8 * b));

    sdp_atomic_file a;
    sdp_atomic_open(&a, path);
    sdp_atomic_write(&a, len_le, sizeof len_le);
    sdp_atomic_write(&a, header, header_len);
    for (int i = 0; i < n; i++)
        sdp_atomic_write(&a, tensors[i].data, f32_tensor_bytes(&tensors[i]));
    sdp_atomic_commit(&a);
    free(header);
}

/* ---------------------------------------------------------------- reading */

/* Every validation failure names the file and says what is wrong with it. */
#define BAD_FILE(path, fmt, ...)                                                                   \
    sdp_fatal("cannot load '%s': " fmt "; check the path or restore the file from a backup", path, \
              __VA_ARGS__)

typedef struct {
    const char *name;
    size_t size;
} dtype_info;

static const dtype_info DTYPES[] = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8}, {"I64", 8},
                                    {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U8", 1},  {"BOOL", 1}};

static size_t dtype_size(const char *name) {
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (strcmp(DTYPES[i].name, name) == 0) return DTYPES[i].size;
    return 0;
}

static void read_whole_file(sdp_st_file *f, const char *path, sdp_mem *mem) {
    FILE *fp = sdp_fopen(path, "rb");
    struct stat st;
    SDP_CHECK(fstat(fileno(fp), &st) == 0 && S_ISREG(st.st_mode),
              "cannot load '%s': not a regular file; pass the path of a .safetensors file", path);
    f->len = (size_t)st.st_size;
    f->buf = sdp_alloc(mem, SDP_MEM_SCRATCH, f->len);
    size_t got = 0;
    while (got < f->len) {
        size_t r = fread((char *)f->buf + got, 1, f->len - got, fp);
        SDP_CHECK(r > 0, "cannot read '%s' (%s): check the disk and the file", path,
                  ferror(fp) ? strerror(errno) : "file shrank while reading");
        got += r;
    }
    fclose(fp);
}

/* A JSON number that is a non-negative integer exactly representable in a double. */
static int json_uint(const cJSON *j, int64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(int64_t)v) return 0;
    *out = (int64_t)v;
    return 1;
}

/* The header must be one JSON object followed only by padding whitespace. */
static cJSON *parse_header(const char *path, const char *header, size_t len) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(header, len, &end, 0);
    if (!root || !cJSON_IsObject(root))
        BAD_FILE(path, "not a safetensors file (the %zu-byte header is not a JSON object)", len);
    for (const char *p = end; p < header + len; p++)
        if (!strchr(" \t\r\n", *p) || *p == 0)
            BAD_FILE(path, "not a safetensors file (junk after the JSON header at byte %zu)",
                     (size_t)(p - header) + 8);
    return root;
}

static char *scratch_strdup(sdp_mem *mem, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = sdp_alloc(mem, SDP_MEM_SCRATCH, n);
    memcpy(d, s, n);
    return d;
}

static void read_metadata(sdp_st_file *f, const char *path, const cJSON *m, sdp_mem *mem) {
    if (!cJSON_IsObject(m)) BAD_FILE(path, "%s", METADATA_KEY " is not a JSON object");
    int n = cJSON_GetArraySize(m);
    f->meta_keys = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)n * sizeof(char *));
    f->meta_vals = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)n * sizeof(char *));
    const cJSON *kv;
    cJSON_ArrayForEach(kv, m) {
        if (!cJSON_IsString(kv))
            BAD_FILE(path, "metadata value for '%s' is not a string", kv->string);
        f->meta_keys[f->nmeta] = scratch_strdup(mem, kv->string);
        f->meta_vals[f->nmeta] = scratch_strdup(mem, kv->valuestring);
        f->nmeta++;
    }
}

/* Fills `e` from one header entry; checks types, dtype, and that shape matches the byte range. */
static void read_entry(sdp_st_entry *e, const char *path, const cJSON *j, size_t data_len,
                       int64_t range[2], sdp_mem *mem) {
    const char *name = j->string;
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(j, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsObject(j) || !cJSON_IsString(dtype) || !cJSON_IsArray(shape) ||
        !cJSON_IsArray(offs))
        BAD_FILE(path, "tensor '%s' lacks a string dtype, an array shape or array data_offsets",
                 name);
    size_t esize = dtype_size(dtype->valuestring);
    if (!esize) BAD_FILE(path, "tensor '%s' has unknown dtype '%s'", name, dtype->valuestring);
    e->ndim = cJSON_GetArraySize(shape);
    if (e->ndim > SDP_ST_MAX_DIMS)
        BAD_FILE(path, "tensor '%s' has %d dimensions, more than %d", name, e->ndim,
                 SDP_ST_MAX_DIMS);
    uint64_t count = 1, nbytes = 0;
    int overflow = 0, empty = 0;
    for (int d = 0; d < e->ndim; d++) {
        if (!json_uint(cJSON_GetArrayItem(shape, d), &e->shape[d]))
            BAD_FILE(path, "tensor '%s' has a shape entry that is not a non-negative integer",
                     name);
        empty |= e->shape[d] == 0;
        overflow |= __builtin_mul_overflow(count, (uint64_t)e->shape[d], &count);
    }
    overflow |= __builtin_mul_overflow(count, (uint64_t)esize, &nbytes);
    if (empty) nbytes = 0, overflow = 0;
    if (cJSON_GetArraySize(offs) != 2 || !json_uint(cJSON_GetArrayItem(offs, 0), &range[0]) ||
        !json_uint(cJSON_GetArrayItem(offs, 1), &range[1]) || range[0] > range[1])
        BAD_FILE(path, "tensor '%s' data_offsets is not [begin, end] with begin <= end", name);
    if ((uint64_t)range[1] > data_len)
        BAD_FILE(path,
                 "tensor '%s' ends at byte %" PRId64 " of a data section of %zu bytes: the file "
                 "is truncated or corrupt",
                 name, range[1], data_len);
    if (overflow || nbytes != (uint64_t)(range[1] - range[0]))
        BAD_FILE(path,
                 "corrupt: tensor '%s' shape does not match its data_offsets [%" PRId64 ", %" PRId64
                 ")",
                 name, range[0], range[1]);
    e->name = scratch_strdup(mem, name);
    snprintf(e->dtype, sizeof e->dtype, "%s", dtype->valuestring);
    e->nbytes = (size_t)(range[1] - range[0]);
}

typedef struct {
    int64_t begin, end;
    int idx;
} byte_range;

static int by_begin(const void *a, const void *b) {
    const byte_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Non-empty ranges must not share a byte; tensor names must be unique. */
static void check_disjoint(const sdp_st_file *f, const char *path, byte_range *r) {
    qsort(r, (size_t)f->n, sizeof *r, by_begin);
    int64_t prev_end = 0;
    int prev = -1;
    for (int i = 0; i < f->n; i++) {
        if (r[i].begin == r[i].end) continue;
        if (r[i].begin < prev_end)
            BAD_FILE(path, "corrupt: tensors '%s' and '%s' overlap in the data section",
                     f->entries[prev].name, f->entries[r[i].idx].name);
        prev_end = r[i].end;
        prev = r[i].idx;
    }
    for (int i = 0; i < f->n; i++)
        for (int k = 0; k < i; k++)
            if (strcmp(f->entries[i].name, f->entries[k].name) == 0)
                BAD_FILE(path, "corrupt: tensor name '%s' appears twice", f->entries[i].name);
}

static void verify_checksum(const sdp_st_file *f, const char *path, const void *data,
                            size_t data_len) {
    const char *stored = sdp_st_meta(f, CRC_KEY);
    if (!stored) return; /* written by another tool: nothing to verify against */
    char *end = NULL;
    unsigned long want = strtoul(stored, &end, 16);
    if (strlen(stored) != 8 || *end != 0)
        BAD_FILE(path, "corrupt: checksum field '%s' is not 8 hex digits", stored);
    uint32_t got = crc32_update((uint32_t)crc32(0, Z_NULL, 0), data, data_len);
    if ((uint32_t)want != got)
        sdp_fatal("cannot load '%s': corrupt: checksum mismatch (stored %s, computed %08" PRIx32
                  "); the file was damaged, restore it from a backup or retrain",
                  path, stored, got);
}

void sdp_st_read(sdp_st_file *f, const char *path, sdp_mem *mem) {
    memset(f, 0, sizeof *f);
    read_whole_file(f, path, mem);
    const unsigned char *bytes = f->buf;
    if (f->len < 8) BAD_FILE(path, "not a safetensors file (only %zu bytes long)", f->len);
    uint64_t header_len = 0;
    for (int b = 0; b < 8; b++) header_len |= (uint64_t)bytes[b] << (8 * b);
    if (header_len > f->len - 8)
        BAD_FILE(path,
                 "not a safetensors file, or truncated (header length %" PRIu64
                 " exceeds the %zu-byte file)",
                 header_len, f->len);
    cJSON *root = parse_header(path, (const char *)bytes + 8, (size_t)header_len);
    const unsigned char *data = bytes + 8 + header_len;
    size_t data_len = f->len - 8 - (size_t)header_len;

    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, METADATA_KEY);
    if (meta) read_metadata(f, path, meta, mem);
    int ntotal = cJSON_GetArraySize(root);
    f->entries = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)ntotal * sizeof(sdp_st_entry));
    byte_range *ranges = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)ntotal * sizeof(byte_range));
    const cJSON *j;
    cJSON_ArrayForEach(j, root) {
        if (j == meta) continue;
        int64_t range[2];
        sdp_st_entry *e = &f->entries[f->n];
        read_entry(e, path, j, data_len, range, mem);
        e->data = data + range[0];
        ranges[f->n] = (byte_range){range[0], range[1], f->n};
        f->n++;
    }
    cJSON_Delete(root);
    check_disjoint(f, path, ranges);
    sdp_free(mem, ranges);
    verify_checksum(f, path, data, data_len);
}

const sdp_st_entry *sdp_st_find(const sdp_st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->entries[i].name, name) == 0) return &f->entries[i];
    return NULL;
}

const char *sdp_st_meta(const sdp_st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

void sdp_st_close(sdp_st_file *f, sdp_mem *mem) {
    for (int i = 0; i < f->n; i++) sdp_free(mem, f->entries[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        sdp_free(mem, f->meta_keys[i]);
        sdp_free(mem, f->meta_vals[i]);
    }
    sdp_free(mem, f->entries);
    sdp_free(mem, f->meta_keys);
    sdp_free(mem, f->meta_vals);
    sdp_free(mem, f->buf);
    memset(f, 0, sizeof *f);
}

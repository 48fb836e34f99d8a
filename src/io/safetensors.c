/* safetensors: an 8-byte little-endian header length N, N bytes of JSON, then the data section.
 * The JSON maps each tensor name to {"dtype","shape","data_offsets":[begin,end)} relative to the
 * data section, plus "__metadata__" (string -> string), where we keep a CRC32 of the whole file.
 *
 * The checksum cannot cover its own digits, so it sits where a reader finds them without trusting
 * the JSON: the header opens with {"__metadata__":{"sdp.file_crc32":"XXXXXXXX", and the CRC is of
 * every byte of the file but those eight. Files from before it carry "sdp.crc32", the CRC of the
 * data section alone; they are still read, and the caller learns which kind it got. */
#include "sdp/safetensors.h"

#include "sdp/atomic_file.h"
#include "sdp/check.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors stores little-endian data; this code writes host memory as is"
#endif

#define CRC_KEY      "sdp.crc32" /* the data section's CRC, in files from before FILE_CRC_KEY */
#define FILE_CRC_KEY "sdp.file_crc32"
#define METADATA_KEY "__metadata__"

static const char FILE_CRC_PREFIX[] = "{\"" METADATA_KEY "\":{\"" FILE_CRC_KEY "\":\"";
enum { CRC_DIGITS = 8, CRC_AT = 8 + sizeof FILE_CRC_PREFIX - 1 }; /* digits' offset in the file */

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

/* The tensor's byte count; with need_data, it must also point at its values (the streaming
 * writer takes the values later, so its descriptors carry none). */
static size_t f32_tensor_bytes(const sdp_st_tensor *t, bool need_data) {
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
    SDP_CHECK(!need_data || count == 0 || t->data, "tensor '%s' has no data pointer", t->name);
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

/* The metadata, the checksum first with placeholder digits (see the top of the file). */
static void add_metadata(cJSON *root, const char *const *meta) {
    cJSON *m = cJSON_AddObjectToObject(root, METADATA_KEY);
    cJSON_AddStringToObject(m, FILE_CRC_KEY, "00000000");
    for (int i = 0; meta && meta[i]; i += 2) {
        SDP_CHECK(meta[i + 1], "metadata key '%s' has no value: pass key, value pairs", meta[i]);
        SDP_CHECK(strcmp(meta[i], CRC_KEY) != 0 && strcmp(meta[i], FILE_CRC_KEY) != 0,
                  "metadata key '%s' is reserved for the checksum: use another key", meta[i]);
        SDP_CHECK(!cJSON_GetObjectItemCaseSensitive(m, meta[i]),
                  "metadata key '%s' is given twice: pass each key once", meta[i]);
        cJSON_AddStringToObject(m, meta[i], meta[i + 1]);
    }
}

static int by_string(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted, a repeated name shows as two neighbours: n log n, where asking the JSON object for each
 * name before adding it cost n^2 (minutes for a model of a few thousand layers). */
static void check_unique_names(const sdp_st_tensor *tensors, int n) {
    const char **names = sdp_xmalloc((size_t)n * sizeof *names, "checking tensor names");
    for (int i = 0; i < n; i++) names[i] = tensors[i].name;
    qsort(names, (size_t)n, sizeof *names, by_string);
    for (int i = 1; i < n; i++)
        SDP_CHECK(strcmp(names[i - 1], names[i]) != 0,
                  "tensor name '%s' is used twice: give each tensor a unique name", names[i]);
    free(names);
}

/* The JSON header, padded with spaces so that the data section starts 8-byte aligned. */
static char *build_header(const sdp_st_tensor *tensors, int n, const char *const *meta,
                          size_t *header_len, uint64_t *data_len) {
    check_unique_names(tensors, n);
    cJSON *root = cJSON_CreateObject();
    add_metadata(root, meta);
    int64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const sdp_st_tensor *t = &tensors[i];
        SDP_CHECK(strcmp(t->name, METADATA_KEY) != 0,
                  "tensor name '%s' is reserved for the metadata: use another name", t->name);
        int64_t range[2] = {offset, offset + (int64_t)f32_tensor_bytes(t, false)};
        cJSON *entry = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(entry, "dtype", "F32");
        cJSON_AddItemToObject(entry, "shape", json_int_array(t->shape, t->ndim));
        cJSON_AddItemToObject(entry, "data_offsets", json_int_array(range, 2));
        offset = range[1];
    }
    *data_len = (uint64_t)offset;
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    SDP_CHECK(json, "out of memory building a safetensors header");
    size_t len = strlen(json), padded = (len + 7) & ~(size_t)7;
    char *header = sdp_xrealloc(json, padded, "a safetensors header");
    memset(header + len, ' ', padded - len);
    *header_len = padded;
    SDP_ASSERT(strncmp(header, FILE_CRC_PREFIX, sizeof FILE_CRC_PREFIX - 1) == 0);
    return header;
}

/* The writer keeps the header, with placeholder digits, only until it is written: the CRC of
 * everything but the digits runs on as the data is appended, and the digits go in last. */
void sdp_st_writer_open(sdp_st_writer *w, const char *path, const sdp_st_tensor *tensors, int n,
                        const char *const *meta) {
    SDP_CHECK(n >= 0 && (n == 0 || tensors), "sdp_st_writer_open: bad tensor list for '%s'", path);
    memset(w, 0, sizeof *w);
    size_t header_len;
    char *header = build_header(tensors, n, meta, &header_len, &w->data_len);
    unsigned char len_le[8];
    for (int b = 0; b < 8; b++) len_le[b] = (unsigned char)((uint64_t)header_len >> (8 * b));
    const size_t at = CRC_AT - 8;
    w->crc = crc32_update((uint32_t)crc32(0, Z_NULL, 0), len_le, 8);
    w->crc = crc32_update(w->crc, header, at);
    w->crc = crc32_update(w->crc, header + at + CRC_DIGITS, header_len - at - CRC_DIGITS);
    sdp_atomic_open(&w->file, path);
    sdp_atomic_write(&w->file, len_le, sizeof len_le);
    sdp_atomic_write(&w->file, header, header_len);
    free(header);
}

void sdp_st_writer_append(sdp_st_writer *w, const void *data, size_t len) {
    SDP_CHECK(len <= w->data_len - w->written,
              "sdp_st_writer_append: '%s' would get more than the %" PRIu64
              " data bytes its header declares",
              w->file.path, w->data_len);
    w->crc = crc32_update(w->crc, data, len);
    sdp_atomic_write(&w->file, data, len);
    w->written += len;
}

void sdp_st_writer_commit(sdp_st_writer *w) {
    /* A short file would carry a header that describes bytes it lacks: refuse before the rename,
     * so the previous file stays. */
    SDP_CHECK(w->written == w->data_len,
              "sdp_st_writer_commit: '%s' got %" PRIu64
              " data bytes, but its header declares %" PRIu64,
              w->file.path, w->written, w->data_len);
    char hex[CRC_DIGITS + 1];
    snprintf(hex, sizeof hex, "%08" PRIx32, w->crc);
    sdp_atomic_write_at(&w->file, hex, CRC_DIGITS, CRC_AT);
    sdp_atomic_commit(&w->file);
    memset(w, 0, sizeof *w);
}

void sdp_st_write(const char *path, const sdp_st_tensor *tensors, int n, const char *const *meta) {
    SDP_CHECK(n >= 0 && (n == 0 || tensors), "sdp_st_write: bad tensor list for '%s'", path);
    for (int i = 0; i < n; i++) f32_tensor_bytes(&tensors[i], true);
    sdp_st_writer w;
    sdp_st_writer_open(&w, path, tensors, n, meta);
    for (int i = 0; i < n; i++)
        sdp_st_writer_append(&w, tensors[i].data, f32_tensor_bytes(&tensors[i], false));
    sdp_st_writer_commit(&w);
}

/* ---------------------------------------------------------------- reading */

/* Every validation failure names the file and says what is wrong with it. */
#define BAD_FILE(path, fmt, ...)                                                                   \
    sdp_fatal("cannot load '%s': " fmt "; check the path or restore the file from a backup", path, \
              __VA_ARGS__)

/* The safetensors format's own limit on the header: a larger length is damage, and is refused
 * before that much is read. */
enum { MAX_HEADER = 100000000 };

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

static void read_exact(FILE *fp, const char *path, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        size_t r = fread((char *)buf + got, 1, n - got, fp);
        SDP_CHECK(r > 0, "cannot read '%s' (%s): check the disk and the file", path,
                  ferror(fp) ? strerror(errno) : "file shrank while reading");
        got += r;
    }
}

/* The header's length, checked against the file's size before anything of that size is read. */
static size_t header_length(FILE *fp, const char *path, size_t file_len) {
    if (file_len < 8) BAD_FILE(path, "not a safetensors file (only %zu bytes long)", file_len);
    unsigned char le[8];
    read_exact(fp, path, le, sizeof le);
    uint64_t n = 0;
    for (int b = 0; b < 8; b++) n |= (uint64_t)le[b] << (8 * b);
    if (n > file_len - 8)
        BAD_FILE(path,
                 "not a safetensors file, or truncated (header length %" PRIu64
                 " exceeds the %zu-byte file)",
                 n, file_len);
    if (n > MAX_HEADER)
        BAD_FILE(path, "not a safetensors file (header length %" PRIu64 " is over the format's %d)",
                 n, MAX_HEADER);
    return (size_t)n;
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
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root); /* valid JSON of another kind: the fuzz builds return from BAD_FILE */
        BAD_FILE(path, "not a safetensors file (the %zu-byte header is not a JSON object)", len);
    }
    for (const char *p = end; p < header + len; p++)
        if (!strchr(" \t\r\n", *p) || *p == 0) {
            cJSON_Delete(root);
            BAD_FILE(path, "not a safetensors file (junk after the JSON header at byte %zu)",
                     (size_t)(p - header) + 8);
        }
    return root;
}

static char *scratch_strdup(sdp_mem *mem, const char *s) {
    size_t n = strlen(s) + 1;
    char *d = sdp_alloc(mem, SDP_MEM_SCRATCH, n);
    memcpy(d, s, n);
    return d;
}

typedef struct {
    const char *name;
    int idx;
} named;

static int by_name(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* Indices 0..n-1 ordered by names[i], for binary search, and in *twice the first name that
 * occurs twice (or NULL): after sorting, a repeat shows as two neighbours, so a header of many
 * entries costs n log n to check rather than n^2. */
static int *sorted_by_name(const char *const *names, int n, const char **twice, sdp_mem *mem) {
    named *v = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)n * sizeof *v);
    for (int i = 0; i < n; i++) v[i] = (named){names[i], i};
    qsort(v, (size_t)n, sizeof *v, by_name);
    int *order = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)n * sizeof *order);
    *twice = NULL;
    for (int i = 0; i < n; i++) {
        order[i] = v[i].idx;
        if (i > 0 && !*twice && strcmp(v[i - 1].name, v[i].name) == 0) *twice = v[i].name;
    }
    sdp_free(mem, v);
    return order;
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
    const char *twice;
    sdp_free(mem, sorted_by_name((const char *const *)f->meta_keys, f->nmeta, &twice, mem));
    if (twice) BAD_FILE(path, "corrupt: metadata key '%s' appears twice", twice);
}

/* Fills `e` from one header entry; checks types, dtype, and that shape matches the byte range. */
static void read_entry(sdp_st_entry *e, const char *path, const cJSON *j, size_t data_len,
                       int64_t range[2], sdp_mem *mem) {
    const char *name = j->string;
    if (strcmp(name, METADATA_KEY) == 0) BAD_FILE(path, "corrupt: '%s' appears twice", name);
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

/* The tensors must tile the data section, as the format requires: no shared byte, no gap, and
 * nothing after the last, so a damaged header cannot describe a file other than the one read. */
static void check_tiling(const sdp_st_file *f, const char *path, byte_range *r, size_t data_len) {
    qsort(r, (size_t)f->n, sizeof *r, by_begin);
    int64_t prev_end = 0;
    int prev = -1;
    for (int i = 0; i < f->n; i++) {
        if (r[i].begin == r[i].end) continue;
        if (r[i].begin < prev_end)
            BAD_FILE(path, "corrupt: tensors '%s' and '%s' overlap in the data section",
                     f->entries[prev].name, f->entries[r[i].idx].name);
        if (r[i].begin > prev_end)
            BAD_FILE(path,
                     "corrupt: bytes %" PRId64 " to %" PRId64 " of the data section belong to no "
                     "tensor",
                     prev_end, r[i].begin);
        prev_end = r[i].end;
        prev = r[i].idx;
    }
    if ((uint64_t)prev_end != data_len)
        BAD_FILE(path,
                 "corrupt: the data section holds %zu bytes, but its tensors end at byte %" PRId64,
                 data_len, prev_end);
}

static void check_names(sdp_st_file *f, const char *path, sdp_mem *mem) {
    const char **names = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)f->n * sizeof *names);
    for (int i = 0; i < f->n; i++) names[i] = f->entries[i].name;
    const char *twice;
    f->by_name = sorted_by_name(names, f->n, &twice, mem);
    sdp_free(mem, names);
    if (twice) BAD_FILE(path, "corrupt: tensor name '%s' appears twice", twice);
}

/* A stored CRC: exactly eight lowercase hex digits, as sdp writes them. */
static uint32_t stored_crc(const char *path, const char *key, const char *hex) {
    if (strlen(hex) != CRC_DIGITS || strspn(hex, "0123456789abcdef") != CRC_DIGITS)
        BAD_FILE(path, "corrupt: checksum field %s is '%s', not 8 hex digits", key, hex);
    return (uint32_t)strtoul(hex, NULL, 16);
}

/* Which checksum the file carries; the whole-file one must be where sdp writes it, the first
 * bytes of the header, or it could not have been computed over the header around it. */
static sdp_st_checksum checksum_kind(const sdp_st_file *f, const char *path, const char *header,
                                     size_t header_len) {
    const char *file_crc = sdp_st_meta(f, FILE_CRC_KEY), *data_crc = sdp_st_meta(f, CRC_KEY);
    if (file_crc) {
        stored_crc(path, FILE_CRC_KEY, file_crc);
        const size_t at = CRC_AT - 8;
        if (header_len < at + CRC_DIGITS || memcmp(header, FILE_CRC_PREFIX, at) != 0 ||
            memcmp(header + at, file_crc, CRC_DIGITS) != 0)
            BAD_FILE(path, "%s", "corrupt: the checksum " FILE_CRC_KEY " does not open the header");
        return SDP_ST_FILE_CHECKSUM;
    }
    if (data_crc) {
        stored_crc(path, CRC_KEY, data_crc);
        return SDP_ST_DATA_CHECKSUM;
    }
    return SDP_ST_NO_CHECKSUM;
}

/* Streaming verification reads the file through a buffer of at most this many bytes. */
enum { VERIFY_CHUNK = 4 << 20 };

static void pread_exact(FILE *fp, const char *path, void *dst, size_t len, size_t at) {
    char *p = dst;
    while (len > 0) {
        ssize_t r = pread(fileno(fp), p, len, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        SDP_CHECK(r > 0, "cannot read '%s' (%s): check the disk and the file", path,
                  r < 0 ? strerror(errno) : "file shrank while reading");
        p += r;
        len -= (size_t)r;
        at += (size_t)r;
    }
}

/* The CRC continued over the file's bytes [from, to): from f->buf when the whole file is in
 * memory, else read from the open file through `chunk` bytes of scratch. */
static uint32_t crc_of_span(const sdp_st_file *f, uint32_t crc, size_t from, size_t to,
                            unsigned char *scratch, size_t chunk) {
    if (f->buf) return crc32_update(crc, (const unsigned char *)f->buf + from, to - from);
    for (size_t at = from; at < to; at += chunk) {
        const size_t n = to - at < chunk ? to - at : chunk;
        pread_exact(f->fp, f->path, scratch, n, at);
        crc = crc32_update(crc, scratch, n);
    }
    return crc;
}

static void verify_checksum(const sdp_st_file *f, const char *path, size_t header_len,
                            sdp_mem *mem) {
    if (f->checksum == SDP_ST_NO_CHECKSUM) return; /* written by another tool: nothing to verify */
    const size_t chunk = f->len < VERIFY_CHUNK ? f->len + 1 : VERIFY_CHUNK;
    unsigned char *scratch = f->buf ? NULL : sdp_alloc(mem, SDP_MEM_SCRATCH, chunk);
    uint32_t want, got = (uint32_t)crc32(0, Z_NULL, 0);
    if (f->checksum == SDP_ST_FILE_CHECKSUM) {
        want = stored_crc(path, FILE_CRC_KEY, sdp_st_meta(f, FILE_CRC_KEY));
        got = crc_of_span(f, got, 0, CRC_AT, scratch, chunk);
        got = crc_of_span(f, got, CRC_AT + CRC_DIGITS, f->len, scratch, chunk);
    } else {
        want = stored_crc(path, CRC_KEY, sdp_st_meta(f, CRC_KEY));
        got = crc_of_span(f, got, 8 + header_len, f->len, scratch, chunk);
    }
    if (scratch) sdp_free(mem, scratch);
    if (want != got)
        sdp_fatal("cannot load '%s': corrupt: checksum mismatch (stored %08" PRIx32
                  ", computed %08" PRIx32 "); the file was damaged, restore it from a backup or "
                  "retrain",
                  path, want, got);
}

/* Parses and checks the header against a data section of data_len bytes; the byte range of entry
 * i goes to ranges (in an order of their own: see byte_range.idx). */
static void read_header(sdp_st_file *f, const char *path, const char *header, size_t header_len,
                        size_t data_len, byte_range *ranges[], sdp_mem *mem) {
    cJSON *root = parse_header(path, header, header_len);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, METADATA_KEY);
    if (meta) read_metadata(f, path, meta, mem);
    f->checksum = checksum_kind(f, path, header, header_len);
    int ntotal = cJSON_GetArraySize(root);
    f->entries = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)ntotal * sizeof(sdp_st_entry));
    byte_range *r = sdp_alloc(mem, SDP_MEM_SCRATCH, (size_t)ntotal * sizeof(byte_range));
    const cJSON *j;
    cJSON_ArrayForEach(j, root) {
        if (j == meta) continue;
        int64_t range[2];
        read_entry(&f->entries[f->n], path, j, data_len, range, mem);
        r[f->n] = (byte_range){range[0], range[1], f->n};
        f->n++;
    }
    cJSON_Delete(root);
    check_tiling(f, path, r, data_len);
    check_names(f, path, mem);
    *ranges = r;
}

/* Opens the file and reads and checks its header: entries get their offsets in the file, no data.
 * Returns the header's length; the file stays open in f->fp. */
static size_t open_header(sdp_st_file *f, const char *path, sdp_mem *mem) {
    memset(f, 0, sizeof *f);
    f->fp = sdp_fopen_input(path, "safetensors file", &f->len);
    f->path = scratch_strdup(mem, path);
    const size_t header_len = header_length(f->fp, path, f->len), data_at = 8 + header_len;
    char *header = sdp_alloc(mem, SDP_MEM_SCRATCH, header_len);
    read_exact(f->fp, path, header, header_len);
    byte_range *ranges;
    read_header(f, path, header, header_len, f->len - data_at, &ranges, mem);
    sdp_free(mem, header);
    for (int i = 0; i < f->n; i++)
        f->entries[ranges[i].idx].offset = data_at + (size_t)ranges[i].begin;
    sdp_free(mem, ranges);
    return header_len;
}

void sdp_st_read(sdp_st_file *f, const char *path, sdp_mem *mem) {
    const size_t header_len = open_header(f, path, mem);
    /* Only a header that fits the file's size gets the file read: a damaged one costs no more
     * than its own bytes. */
    f->buf = sdp_alloc(mem, SDP_MEM_SCRATCH, f->len);
    pread_exact(f->fp, path, f->buf, f->len, 0);
    fclose(f->fp);
    f->fp = NULL;
    for (int i = 0; i < f->n; i++)
        f->entries[i].data = (const unsigned char *)f->buf + f->entries[i].offset;
    verify_checksum(f, path, header_len, mem);
}

void sdp_st_open(sdp_st_file *f, const char *path, sdp_mem *mem) {
    const size_t header_len = open_header(f, path, mem);
    verify_checksum(f, path, header_len, mem);
}

void sdp_st_open_header(sdp_st_file *f, const char *path, sdp_mem *mem) {
    open_header(f, path, mem);
}

void sdp_st_pread(const sdp_st_file *f, const sdp_st_entry *e, size_t at, void *dst, size_t len) {
    SDP_CHECK(at <= e->nbytes && len <= e->nbytes - at,
              "sdp_st_pread: bytes [%zu, %zu) are outside tensor '%s' of %zu bytes in '%s'", at,
              at + len, e->name, e->nbytes, f->path);
    if (f->buf) {
        memcpy(dst, (const unsigned char *)f->buf + e->offset + at, len);
        return;
    }
    pread_exact(f->fp, f->path, dst, len, e->offset + at);
}

const sdp_st_entry *sdp_st_find(const sdp_st_file *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const sdp_st_entry *e = &f->entries[f->by_name[mid]];
        int c = strcmp(e->name, name);
        if (c == 0) return e;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

const char *sdp_st_meta(const sdp_st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

/* A number as sdp writes one: an integer is [-]digits; a real number is decimal, with no
 * "nan", "inf", hex or surrounding space, which strtod alone would take. */
static bool parse_number(const char *s, size_t len, bool integer, double *out) {
    char buf[64];
    if (len == 0 || len >= sizeof buf) return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    const char *body = integer && buf[0] == '-' ? buf + 1 : buf;
    const char *allowed = integer ? "0123456789" : "-+.eE0123456789";
    if (strspn(body, allowed) != strlen(body)) return false;
    char *end;
    errno = 0;
    *out = strtod(buf, &end);
    return end != buf && *end == 0 && errno == 0 && isfinite(*out);
}

static void range_text(char *out, size_t n, int count, double lo, double hi, bool integer) {
    const char *what =
        integer ? (count == 1 ? "an integer" : "integers") : (count == 1 ? "a number" : "numbers");
    int k = count == 1 ? snprintf(out, n, "%s", what) : snprintf(out, n, "%d %s", count, what);
    if (hi >= DBL_MAX)
        snprintf(out + k, n - (size_t)k, " of at least %.17g", lo);
    else
        snprintf(out + k, n - (size_t)k, " from %.17g to %.17g", lo, hi);
}

void sdp_st_meta_numbers(const sdp_st_file *f, const char *key, int count, double *out, double lo,
                         double hi, bool integer) {
    const char *v = sdp_st_meta(f, key);
    SDP_CHECK(v,
              "cannot load '%s': it has no '%s' metadata, which sdp train writes: it was not "
              "written by sdp train, or has been edited",
              f->path, key);
    const char *p = v;
    bool ok = true;
    for (int i = 0; i < count && ok; i++) {
        size_t len = strcspn(p, " ");
        ok = parse_number(p, len, integer, &out[i]) && out[i] >= lo && out[i] <= hi &&
             (!integer || out[i] == floor(out[i]));
        p += len;
        if (ok && i < count - 1) ok = *p++ == ' ';
    }
    if (ok && *p == 0) return;
    char want[96];
    range_text(want, sizeof want, count, lo, hi, integer);
    sdp_fatal("cannot load '%s': metadata '%s' is '%.40s', not %s: the file is damaged or was not "
              "written by sdp train",
              f->path, key, v, want);
}

double sdp_st_meta_number(const sdp_st_file *f, const char *key, double lo, double hi,
                          bool integer) {
    double v;
    sdp_st_meta_numbers(f, key, 1, &v, lo, hi, integer);
    return v;
}

void sdp_st_close(sdp_st_file *f, sdp_mem *mem) {
    for (int i = 0; i < f->n; i++) sdp_free(mem, f->entries[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        sdp_free(mem, f->meta_keys[i]);
        sdp_free(mem, f->meta_vals[i]);
    }
    sdp_free(mem, f->entries);
    sdp_free(mem, f->by_name);
    sdp_free(mem, f->meta_keys);
    sdp_free(mem, f->meta_vals);
    sdp_free(mem, f->path);
    sdp_free(mem, f->buf);
    if (f->fp) fclose(f->fp);
    memset(f, 0, sizeof *f);
}

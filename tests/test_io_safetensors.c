/* safetensors checkpoints: round trips, the on-disk layout checked by an independent parse,
 * files written by hand (as another tool would), every kind of damage, and atomic replacement. */
#include "testutil.h"

#include "sdp/atomic_file.h"
#include "sdp/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <zlib.h>

/* ---------------------------------------------------------------- helpers */

typedef struct {
    char dir[512];
} fixture;

static int setup(void **state) {
    static fixture fx;
    const char *base = getenv("SDP_TEST_TMP");
    if (!base || !*base) base = "/tmp";
    mkdir(base, 0755); /* the build's test_tmp may not exist yet; EEXIST is fine */
    snprintf(fx.dir, sizeof fx.dir, "%s/io_st_XXXXXX", base);
    if (!mkdtemp(fx.dir)) return -1;
    *state = &fx;
    return 0;
}

static void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int teardown(void **state) {
    remove_tree(((fixture *)*state)->dir);
    return 0;
}

static void path_in(char *out, size_t n, void **state, const char *name) {
    snprintf(out, n, "%s/%s", ((fixture *)*state)->dir, name);
}

/* Number of entries in `dir`, and whether any looks like a leftover temp file. */
static int count_entries(const char *dir, int *temps) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    *temps = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        if (strstr(e->d_name, ".tmp.")) (*temps)++;
    }
    closedir(d);
    return n;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(*len + 1);
    assert_int_equal(fread(buf, 1, *len, f), *len);
    fclose(f);
    return buf;
}

static void spit(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

/* A safetensors file built by hand, without the writer: length, header as given, data. */
static void write_raw(const char *path, const char *header, const void *data, size_t data_len) {
    size_t hlen = strlen(header);
    unsigned char *buf = malloc(8 + hlen + data_len);
    for (int b = 0; b < 8; b++) buf[b] = (unsigned char)((uint64_t)hlen >> (8 * b));
    memcpy(buf + 8, header, hlen);
    if (data_len) memcpy(buf + 8 + hlen, data, data_len);
    spit(path, buf, 8 + hlen + data_len);
    free(buf);
}

static size_t numel(const sdp_st_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

/* Tensors of assorted ranks, including a scalar and an empty one, with random contents. */
enum { NT = 5 };
typedef struct {
    sdp_st_tensor t[NT];
    float *buf[NT];
} tensor_set;

static void make_tensors(tensor_set *s, uint64_t seed) {
    static const char *names[NT] = {"wte.weight", "h.0.attn.qkv", "scale", "h.0.mlp.fc", "empty"};
    static const int ndims[NT] = {2, 3, 0, 1, 2};
    static const int64_t shapes[NT][3] = {{7, 5}, {2, 3, 4}, {0}, {11}, {0, 3}};
    sdp_rng r = sdp_rng_make(seed, 0);
    for (int i = 0; i < NT; i++) {
        sdp_st_tensor *t = &s->t[i];
        memset(t, 0, sizeof *t);
        t->name = names[i];
        t->ndim = ndims[i];
        for (int d = 0; d < t->ndim; d++) t->shape[d] = shapes[i][d];
        s->buf[i] = malloc(numel(t) * sizeof(float) + 1);
        tu_fill(s->buf[i], numel(t), &r, 1.0f);
        t->data = s->buf[i];
    }
}

static void free_tensors(tensor_set *s) {
    for (int i = 0; i < NT; i++) free(s->buf[i]);
}

static const char *const META[] = {"step", "1200", "model", "gpt2-\"tiny\"", NULL};

/* The file's entries equal `s` exactly: order, names, dtype, shapes and bytes. */
static void expect_same(const sdp_st_file *f, const tensor_set *s) {
    assert_int_equal(f->n, NT);
    for (int i = 0; i < NT; i++) {
        const sdp_st_entry *e = &f->entries[i];
        assert_string_equal(e->name, s->t[i].name);
        assert_string_equal(e->dtype, "F32");
        assert_int_equal(e->ndim, s->t[i].ndim);
        for (int d = 0; d < e->ndim; d++) assert_int_equal(e->shape[d], s->t[i].shape[d]);
        assert_int_equal(e->nbytes, numel(&s->t[i]) * sizeof(float));
        assert_memory_equal(e->data, s->t[i].data, e->nbytes);
        assert_ptr_equal(sdp_st_find(f, s->t[i].name), e);
    }
}

/* ---------------------------------------------------------------- round trips */

static void test_round_trip(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "rt.safetensors");
    tensor_set s;
    make_tensors(&s, 1);
    sdp_st_write(path, s.t, NT, META);

    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_read(&f, path, &mem);
    expect_same(&f, &s);
    assert_string_equal(sdp_st_meta(&f, "step"), "1200");
    assert_string_equal(sdp_st_meta(&f, "model"), "gpt2-\"tiny\"");
    assert_null(sdp_st_meta(&f, "nope"));
    assert_null(sdp_st_find(&f, "nope"));
    assert_int_equal(f.nmeta, 3); /* the two given pairs and the checksum */

    assert_int_equal(f.checksum, SDP_ST_FILE_CHECKSUM);
    assert_null(sdp_st_meta(&f, "sdp.crc32")); /* the data-only checksum of older files */

    /* Everything the reader allocated is returned by close. */
    assert_true(mem.total_cur > 0);
    sdp_st_close(&f, &mem);
    assert_int_equal(mem.total_cur, 0);
    assert_int_equal(mem.nallocs, 0);
    free_tensors(&s);
}

/* Several MB, so the writer and the reader go through more than one I/O chunk. */
static void test_large_tensor(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "large.safetensors");
    sdp_st_tensor t[2] = {{.name = "big", .ndim = 2, .shape = {1000, 2600}},
                          {.name = "tail", .ndim = 1, .shape = {3}}};
    size_t n0 = 1000 * 2600;
    float *a = malloc(n0 * sizeof(float)), b[3] = {1, 2, 3};
    sdp_rng r = sdp_rng_make(7, 0);
    tu_fill(a, n0, &r, 3.0f);
    t[0].data = a;
    t[1].data = b;
    sdp_st_write(path, t, 2, NULL);

    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_read(&f, path, &mem);
    const sdp_st_entry *e = sdp_st_find(&f, "big");
    assert_non_null(e);
    assert_int_equal(e->nbytes, n0 * sizeof(float));
    assert_memory_equal(e->data, a, e->nbytes);
    assert_memory_equal(sdp_st_find(&f, "tail")->data, b, sizeof b);
    sdp_st_close(&f, &mem);
    free(a);
}

/* The raw bytes, parsed here independently of the reader, follow the safetensors layout. */
static void test_layout(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "layout.safetensors");
    tensor_set s;
    make_tensors(&s, 2);
    sdp_st_write(path, s.t, NT, META);

    size_t len;
    unsigned char *raw = slurp(path, &len);
    assert_true(len >= 8);
    uint64_t n = 0;
    for (int b = 0; b < 8; b++) n |= (uint64_t)raw[b] << (8 * b);
    assert_true(8 + n <= len);
    assert_int_equal((8 + n) % 8, 0);
    assert_int_equal(raw[8], '{');
    cJSON *root = cJSON_ParseWithLength((const char *)raw + 8, n);
    assert_non_null(root);
    assert_true(cJSON_IsObject(root));

    const unsigned char *data = raw + 8 + n;
    double offset = 0;
    for (int i = 0; i < NT; i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, s.t[i].name);
        assert_non_null(t);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(t, "dtype")->valuestring, "F32");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        assert_int_equal(cJSON_GetArraySize(shape), s.t[i].ndim);
        for (int d = 0; d < s.t[i].ndim; d++)
            assert_true(cJSON_GetArrayItem(shape, d)->valuedouble == (double)s.t[i].shape[d]);
        const cJSON *offs = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        assert_int_equal(cJSON_GetArraySize(offs), 2);
        double begin = cJSON_GetArrayItem(offs, 0)->valuedouble;
        double end = cJSON_GetArrayItem(offs, 1)->valuedouble;
        size_t bytes = numel(&s.t[i]) * sizeof(float);
        assert_true(begin == offset); /* laid out in the order given, contiguous */
        assert_true(end - begin == (double)bytes);
        assert_memory_equal(data + (size_t)begin, s.t[i].data, bytes);
        offset = end;
    }
    assert_true(offset == (double)(len - 8 - n)); /* nothing after the last tensor */
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    assert_true(cJSON_IsObject(meta));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(meta, "step")->valuestring, "1200");
    /* The checksum opens the header, and is zlib's CRC32 of every other byte of the file, as
     * lowercase hex. */
    static const char prefix[] = "{\"__metadata__\":{\"sdp.file_crc32\":\"";
    const size_t at = 8 + strlen(prefix);
    assert_memory_equal(raw + 8, prefix, strlen(prefix));
    const char *crc = cJSON_GetObjectItemCaseSensitive(meta, "sdp.file_crc32")->valuestring;
    assert_memory_equal(raw + at, crc, 8);
    uLong want = crc32(crc32(0, raw, (uInt)at), raw + at + 8, (uInt)(len - at - 8));
    char hex[16];
    snprintf(hex, sizeof hex, "%08lx", want);
    assert_string_equal(crc, hex);
    assert_int_equal(cJSON_GetArraySize(root), NT + 1);
    cJSON_Delete(root);
    free(raw);
    free_tensors(&s);
}

/* A file as another tool writes it: no checksum, other dtypes, unpadded header. */
static void test_foreign_file(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "foreign.safetensors");
    unsigned char data[19];
    float a[2] = {1.5f, -2.0f};
    int64_t b = -42;
    memcpy(data, a, 8);
    memcpy(data + 8, &b, 8);
    data[16] = 7, data[17] = 8, data[18] = 9;
    write_raw(path,
              "{\"__metadata__\":{\"format\":\"pt\"},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[8,16]},"
              "\"c\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[16,19]}}",
              data, sizeof data);
    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_read(&f, path, &mem);
    assert_int_equal(f.n, 3);
    assert_null(sdp_st_meta(&f, "sdp.crc32"));
    assert_string_equal(sdp_st_meta(&f, "format"), "pt");
    const sdp_st_entry *ea = sdp_st_find(&f, "a"), *eb = sdp_st_find(&f, "b");
    const sdp_st_entry *ec = sdp_st_find(&f, "c");
    assert_string_equal(ea->dtype, "F32");
    assert_memory_equal(ea->data, a, 8);
    assert_string_equal(eb->dtype, "I64");
    assert_int_equal(eb->ndim, 2);
    assert_memory_equal(eb->data, &b, 8);
    assert_string_equal(ec->dtype, "U8");
    assert_int_equal(ec->nbytes, 3);
    assert_int_equal(((const unsigned char *)ec->data)[2], 9);
    sdp_st_close(&f, &mem);
    assert_int_equal(mem.total_cur, 0);
}

static void test_write_file_atomic(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "config.json");
    const char *first = "{\"n_layer\": 12, \"n_head\": 12, \"n_embd\": 768}";
    sdp_write_file_atomic(path, first, strlen(first));
    size_t len;
    unsigned char *got = slurp(path, &len);
    assert_int_equal(len, strlen(first));
    assert_memory_equal(got, first, len);
    free(got);
    sdp_write_file_atomic(path, "{}", 2); /* shorter: nothing of the old contents may remain */
    got = slurp(path, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(got, "{}", 2);
    free(got);
}

/* ---------------------------------------------------------------- damaged files */

static void read_and_close(void *path) {
    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_read(&f, path, &mem);
    sdp_st_close(&f, &mem);
}

static void write_valid(const char *path) {
    tensor_set s;
    make_tensors(&s, 3);
    sdp_st_write(path, s.t, NT, META);
    free_tensors(&s);
}

static void test_truncated(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "trunc.safetensors");
    write_valid(path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 1), 0);
    tu_expect_fatal(read_and_close, path, "truncated");
    assert_int_equal(truncate(path, 5), 0);
    tu_expect_fatal(read_and_close, path, "not a safetensors file");
}

static void test_flipped_byte(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "flip.safetensors");
    write_valid(path);
    size_t len;
    unsigned char *raw = slurp(path, &len);
    raw[len - 10] ^= 0x10; /* inside the data section, which ends the file */
    spit(path, raw, len);
    tu_expect_fatal(read_and_close, path, "corrupt: checksum mismatch (stored ");
    tu_expect_fatal(read_and_close, path, "restore it from a backup or retrain");
    raw[len - 10] ^= 0x10;
    spit(path, raw, len);
    read_and_close(path); /* the unflipped bytes still load: the test can tell them apart */
    free(raw);
}

static void test_header_length_too_big(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "biglen.safetensors");
    write_valid(path);
    size_t len;
    unsigned char *raw = slurp(path, &len);
    for (int b = 0; b < 8; b++) raw[b] = (unsigned char)((uint64_t)(len - 7) >> (8 * b));
    spit(path, raw, len);
    tu_expect_fatal(read_and_close, path, "exceeds");
    free(raw);
}

static void test_missing_file(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "does-not-exist.safetensors");
    tu_expect_fatal(read_and_close, path, "does-not-exist.safetensors");
    tu_expect_fatal(read_and_close, path, "No such file");
}

/* Hand-built headers, each broken in one way, over 16 bytes of data. */
static void test_bad_headers(void **state) {
    static const struct {
        const char *header, *needle;
    } cases[] = {
        {"this is not json at all", "not a safetensors file"},
        {"[1, 2, 3]", "not a safetensors file"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}} x", "junk"},
        {"{\"a\":{\"shape\":[4],\"data_offsets\":[0,16]}}", "tensor 'a' lacks"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", "tensor 'a' lacks"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}", "tensor 'a' lacks"},
        {"{\"a\":{\"dtype\":5,\"shape\":[4],\"data_offsets\":[0,16]}}", "tensor 'a' lacks"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", "tensor 'a' lacks"},
        {"{\"a\":[1]}", "tensor 'a' lacks"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}", "unknown dtype 'Q4'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", "shape entry"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,16]}}", "shape entry"},
        /* bad offsets: past the data section, reversed, wrong arity */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", "truncated"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,0]}}", "begin <= end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", "begin <= end"},
        /* overlapping */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         "overlap"},
        /* shape and byte range disagree, also through dtype size and overflowing shapes */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", "does not match"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[4],\"data_offsets\":[0,16]}}", "does not match"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4,1048577,1099510579201],\"data_offsets\":[0,16]}}",
         "does not match"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
         "appears twice"},
        {"{\"__metadata__\":{\"k\":1}}", "not a string"},
        {"{\"__metadata__\":{\"sdp.crc32\":\"xyz\"}}", "not 8 hex digits"},
    };
    char path[1024];
    path_in(path, sizeof path, state, "bad.safetensors");
    unsigned char data[16] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw(path, cases[i].header, data, sizeof data);
        tu_expect_fatal(read_and_close, path, cases[i].needle);
        tu_expect_fatal(read_and_close, path, "bad.safetensors"); /* the message names the file */
    }
    /* A correct header of the same shape loads, so the cases above fail for their own reason. */
    write_raw(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}  ", data,
              sizeof data);
    read_and_close(path);
}

/* ---------------------------------------------------------------- hostile files */

static char *find_bytes(unsigned char *raw, size_t len, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(raw + i, s, n) == 0) return (char *)raw + i;
    return NULL;
}

/* The checksum covers the header: an edited metadata value or shape is caught, as damage to the
 * data is, and the checksum must sit where the writer puts it. */
static void test_header_edit_detected(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "edited.safetensors");
    write_valid(path);
    size_t len;
    unsigned char *raw = slurp(path, &len);
    char *step = find_bytes(raw, len, "\"1200\"");
    assert_non_null(step);
    step[4] = '1'; /* "1200" -> "1210": still valid JSON, still a plausible step */
    spit(path, raw, len);
    tu_expect_fatal_quick(read_and_close, path, "corrupt: checksum mismatch", 2);
    step[4] = '0';
    char *shape = find_bytes(raw, len, "[7,5]");
    assert_non_null(shape);
    memcpy(shape, "[5,7]", 5); /* same byte count, so only the checksum can tell */
    spit(path, raw, len);
    tu_expect_fatal_quick(read_and_close, path, "corrupt: checksum mismatch", 2);
    memcpy(shape, "[7,5]", 5);
    spit(path, raw, len);
    read_and_close(path);
    free(raw);
    /* The same checksum key anywhere but first cannot have been computed around its digits. */
    unsigned char data[16] = {0};
    write_raw(path,
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
              "\"__metadata__\":{\"sdp.file_crc32\":\"00000000\"}}",
              data, sizeof data);
    tu_expect_fatal_quick(read_and_close, path, "sdp.file_crc32 does not open the header", 2);
}

/* Checkpoints from before the header checksum carry sdp.crc32 over the data alone: still read,
 * still verified, and marked so that sdp's checkpoint loader can refuse them. */
static void test_data_only_checksum(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "legacy.safetensors");
    float x[4] = {1, 2, 3, 4};
    char header[256];
    snprintf(header, sizeof header,
             "{\"__metadata__\":{\"sdp.crc32\":\"%08lx\"},"
             "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
             crc32(0, (const Bytef *)x, sizeof x));
    write_raw(path, header, x, sizeof x);
    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_read(&f, path, &mem);
    assert_int_equal(f.checksum, SDP_ST_DATA_CHECKSUM);
    sdp_st_close(&f, &mem);
    x[2] = 5;
    write_raw(path, header, x, sizeof x);
    tu_expect_fatal_quick(read_and_close, path, "checksum mismatch", 2);
}

/* 100,000 tensors whose last name repeats the first: a check that compares every pair takes
 * half a minute here; sorting the names takes milliseconds. */
static void test_many_tensors_rejected_fast(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "many.safetensors");
    enum { N = 100000 };
    size_t cap = (size_t)N * 80, len = 0;
    char *h = malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{");
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(h + len, cap - len,
                                "\"model.layers.%06d.weight\":{\"dtype\":\"F32\",\"shape\":[0],"
                                "\"data_offsets\":[0,0]},",
                                i == N - 1 ? 0 : i);
    h[len - 1] = '}';
    write_raw(path, h, NULL, 0);
    free(h);
    tu_expect_fatal_quick(read_and_close, path, "'model.layers.000000.weight' appears twice", 3);
}

/* A 1 GiB file (sparse: no disk is used) with a header that cannot describe it. Reading it
 * whole before looking at the header would take seconds and 1 GiB of memory; the reader runs
 * here under an address-space limit of 256 MiB above what the process already maps. */
typedef struct {
    const char *path;
} huge_case;

static void read_with_little_memory(void *path) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%lu", &pages), 1);
    fclose(f);
    struct rlimit lim;
    assert_int_equal(getrlimit(RLIMIT_AS, &lim), 0);
    lim.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)256 << 20);
    assert_int_equal(setrlimit(RLIMIT_AS, &lim), 0);
    read_and_close(path);
}

static void write_huge(const char *path, const char *header, uint64_t header_len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char le[8];
    for (int b = 0; b < 8; b++) le[b] = (unsigned char)(header_len >> (8 * b));
    assert_int_equal(fwrite(le, 1, 8, f), 8);
    assert_int_equal(fwrite(header, 1, strlen(header), f), strlen(header));
    assert_int_equal(ftruncate(fileno(f), (off_t)1 << 30), 0);
    fclose(f);
}

static void test_huge_file_header_checked_first(void **state) {
    static const char ok_entry[] =
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    static const char past_end[] =
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[2147483648],\"data_offsets\":[0,2147483648]}}";
    static const struct {
        const char *header;
        uint64_t header_len; /* 0: the header's own length */
        const char *needle;
    } cases[] = {
        {ok_entry, (uint64_t)3 << 30, "exceeds the 1073741824-byte file"},
        {ok_entry, 200000000, "is over the format's 100000000"},
        {"this is no JSON", 0, "is not a JSON object"},
        {past_end, 0, "the file is truncated or corrupt"},
        {ok_entry, 0, "but its tensors end at byte 16"},
    };
    char path[1024];
    path_in(path, sizeof path, state, "huge.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint64_t n = cases[i].header_len ? cases[i].header_len : strlen(cases[i].header);
        write_huge(path, cases[i].header, n);
        tu_expect_fatal_quick(read_with_little_memory, path, cases[i].needle, 2);
    }
    unlink(path);
}

/* A FIFO blocks open() until a writer comes: the reader must refuse it without waiting. */
static void test_fifo_refused(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "pipe.safetensors");
    assert_int_equal(mkfifo(path, 0644), 0);
    tu_expect_fatal_quick(read_and_close, path, "pipe.safetensors' is not a regular file", 2);
    tu_expect_fatal_quick(read_and_close, path, "a named pipe", 2);
    unlink(path);
}

/* A name with a newline and terminal escapes is quoted escaped, on the error's one line. */
static void test_hostile_names_escaped(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "names.safetensors");
    unsigned char data[16] = {0};
    write_raw(path,
              "{\"evil\\nsdp: error: forged\\u001b[2J\\u009b31m\":{\"dtype\":\"Q4\",\"shape\":[4],"
              "\"data_offsets\":[0,16]}}",
              data, sizeof data);
    tu_expect_fatal_quick(read_and_close, path,
                          "tensor 'evil\\nsdp: error: forged\\x1b[2J\\xc2\\x9b31m' has unknown "
                          "dtype 'Q4'",
                          2);
    write_raw(path,
              "{\"__metadata__\":{\"sdp.crc32\":\"\\u001b]0;title\\u0007\"},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
              data, sizeof data);
    tu_expect_fatal_quick(read_and_close, path, "is '\\x1b]0;title\\x07', not 8 hex digits", 2);
}

/* Metadata numbers are read as sdp writes them, in range, or the file and field are named. */
typedef struct {
    const char *path, *key;
    int count;
    double lo, hi;
    bool integer;
} meta_case;

static void read_meta_numbers(void *ctx) {
    const meta_case *c = ctx;
    sdp_mem mem = {0};
    sdp_st_file f;
    double v[3];
    sdp_st_read(&f, c->path, &mem);
    sdp_st_meta_numbers(&f, c->key, c->count, v, c->lo, c->hi, c->integer);
}

static void test_meta_numbers(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "meta.safetensors");
    float x = 1;
    sdp_st_tensor t = {.name = "w", .ndim = 0, .data = &x};
    const char *meta[] = {"int",  "42",    "neg",   "-3",      "real",  "2.5e3", "hex",
                          "0x10", "space", " 1",    "nan",     "nan",   "big",   "1e999",
                          "exp",  "1e3",   "shape", "3 32 10", "short", "3 32",  NULL};
    sdp_st_write(path, &t, 1, meta);
    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_read(&f, path, &mem);
    assert_true(sdp_st_meta_number(&f, "int", 0, 100, true) == 42);
    assert_true(sdp_st_meta_number(&f, "neg", -5, 0, true) == -3);
    assert_true(sdp_st_meta_number(&f, "real", 0, DBL_MAX, false) == 2500);
    assert_true(sdp_st_meta_number(&f, "exp", 0, DBL_MAX, false) == 1000);
    double v[3];
    sdp_st_meta_numbers(&f, "shape", 3, v, 0, 100, true);
    assert_true(v[0] == 3 && v[1] == 32 && v[2] == 10);
    sdp_st_close(&f, &mem);
    static const struct {
        meta_case c;
        const char *needle;
    } bad[] = {
        {{NULL, "int", 1, 0, 41, true}, "metadata 'int' is '42', not an integer from 0 to 41"},
        {{NULL, "neg", 1, 0, 100, true}, "'neg' is '-3'"},
        {{NULL, "real", 1, 0, 100, true}, "'real' is '2.5e3', not an integer"},
        {{NULL, "exp", 1, 0, 1e6, true}, "'exp' is '1e3', not an integer"},
        {{NULL, "hex", 1, 0, 100, false}, "'hex' is '0x10'"},
        {{NULL, "space", 1, 0, 100, true}, "'space' is ' 1'"},
        {{NULL, "nan", 1, 0, DBL_MAX, false}, "'nan' is 'nan', not a number of at least 0"},
        {{NULL, "big", 1, 0, DBL_MAX, false}, "'big' is '1e999'"},
        {{NULL, "short", 3, 0, 100, true}, "'short' is '3 32', not 3 integers from 0 to 100"},
        {{NULL, "shape", 2, 0, 100, true}, "'shape' is '3 32 10', not 2 integers"},
        {{NULL, "missing", 1, 0, 1, true}, "it has no 'missing' metadata"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        meta_case c = bad[i].c;
        c.path = path;
        tu_expect_fatal_quick(read_meta_numbers, &c, bad[i].needle, 2);
        tu_expect_fatal_quick(read_meta_numbers, &c, "meta.safetensors", 2);
    }
}

/* ---------------------------------------------------------------- atomic replacement */

static void test_no_temp_left(void **state) {
    char dir[768], path[1024];
    path_in(dir, sizeof dir, state, "clean");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_valid(path);
    write_valid(path);
    sdp_write_file_atomic(path, "x", 1);
    int temps;
    assert_int_equal(count_entries(dir, &temps), 1);
    assert_int_equal(temps, 0);
}

static void test_overwrite_replaces(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "over.safetensors");
    write_valid(path);
    float small[2] = {4, 5};
    sdp_st_tensor t = {.name = "only", .ndim = 1, .shape = {2}, .data = small};
    sdp_st_write(path, &t, 1, NULL);
    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_read(&f, path, &mem);
    assert_int_equal(f.n, 1);
    assert_null(sdp_st_find(&f, "wte.weight"));
    assert_null(sdp_st_meta(&f, "step"));
    assert_memory_equal(sdp_st_find(&f, "only")->data, small, sizeof small);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((size_t)st.st_size, f.len);
    assert_int_equal((size_t)((const char *)f.entries[0].data - (const char *)f.buf) + 8, f.len);
    sdp_st_close(&f, &mem);
}

static void write_valid_ctx(void *path) {
    write_valid(path);
}

static void test_missing_directory(void **state) {
    char dir[768], path[1024];
    path_in(dir, sizeof dir, state, "nodir");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int temps, before = count_entries(((fixture *)*state)->dir, &temps);
    tu_expect_fatal(write_valid_ctx, path, "cannot write '");
    tu_expect_fatal(write_valid_ctx, path, "nodir/model.safetensors");
    tu_expect_fatal(write_valid_ctx, path, "No such file or directory");
    struct stat st;
    assert_int_equal(stat(dir, &st), -1);
    assert_int_equal(count_entries(((fixture *)*state)->dir, &temps), before);
}

/* rename() cannot put a file over a directory: the temp file must go and the directory stay. */
static void test_rename_failure_cleans_up(void **state) {
    char dir[768], target[1024];
    path_in(dir, sizeof dir, state, "renamefail");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(target, sizeof target, "%s/model.safetensors", dir);
    assert_int_equal(mkdir(target, 0755), 0);
    tu_expect_fatal(write_valid_ctx, target, "Is a directory");
    int temps;
    assert_int_equal(count_entries(dir, &temps), 1);
    assert_int_equal(temps, 0);
    struct stat st;
    assert_int_equal(stat(target, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
}

/* A write that runs out of room (here a file size limit, as a full disk would) fails, removes its
 * temp file and leaves the previous checkpoint byte for byte as it was. */
static void write_big_with_small_fsize_limit(void *path) {
    signal(SIGXFSZ, SIG_IGN); /* get EFBIG from write() instead of being killed */
    struct rlimit lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &lim), 0);
    lim.rlim_cur = 64 * 1024;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    static float big[1 << 18];
    sdp_st_tensor t = {.name = "big", .ndim = 1, .shape = {1 << 18}, .data = big};
    sdp_st_write(path, &t, 1, NULL);
}

static void test_io_error_keeps_old_file(void **state) {
    char dir[768], path[1024];
    path_in(dir, sizeof dir, state, "ioerr");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_valid(path);
    size_t old_len, new_len;
    unsigned char *old = slurp(path, &old_len);
    tu_expect_fatal(write_big_with_small_fsize_limit, path, "File too large");
    unsigned char *now = slurp(path, &new_len);
    assert_int_equal(new_len, old_len);
    assert_memory_equal(now, old, old_len);
    int temps;
    assert_int_equal(count_entries(dir, &temps), 1);
    assert_int_equal(temps, 0);
    free(old);
    free(now);
}

/* ---------------------------------------------------------------- bad writer input */

/* ---------------------------------------------------------------- streaming */

/* Fixed tensors whose file, written by sdp_st_write before the streaming writer existed (commit
 * 97460f4), was GOLDEN_SIZE bytes with this CRC32 of the whole file: both writers must still
 * produce exactly those bytes, whatever pieces the data comes in. */
static const char *const GOLDEN_META[] = {"format", "pt", "sdp.step", "42", NULL};
enum { GOLDEN_A = 3 * 1001, GOLDEN_D = 5, GOLDEN_SIZE = 12396 };
#define GOLDEN_CRC 0x9f5f8a3dUL

typedef struct {
    sdp_st_tensor t[4];
    float a[GOLDEN_A], b, d[GOLDEN_D];
} golden;

static void golden_tensors(golden *g) {
    for (int i = 0; i < GOLDEN_A; i++) g->a[i] = (float)i * 0.001f - 1.0f;
    for (int i = 0; i < GOLDEN_D; i++) g->d[i] = -(float)i / 3.0f;
    g->b = 2.5f;
    g->t[0] =
        (sdp_st_tensor){.name = "h.0.attn.weight", .ndim = 2, .shape = {3, 1001}, .data = g->a};
    g->t[1] = (sdp_st_tensor){.name = "scale", .ndim = 0, .data = &g->b};
    g->t[2] = (sdp_st_tensor){.name = "empty", .ndim = 2, .shape = {0, 4}, .data = NULL};
    g->t[3] = (sdp_st_tensor){.name = "ln_f.bias", .ndim = 1, .shape = {5}, .data = g->d};
}

static void expect_golden_file(const char *path) {
    size_t len;
    unsigned char *bytes = slurp(path, &len);
    assert_int_equal(len, GOLDEN_SIZE);
    assert_int_equal(crc32(0, bytes, (uInt)len), GOLDEN_CRC);
    free(bytes);
}

/* The data section streamed in pieces of `piece` bytes that straddle tensor boundaries. */
static void write_streamed(const char *path, const golden *g, size_t piece) {
    static unsigned char data[GOLDEN_SIZE];
    size_t n = 0;
    memcpy(data + n, g->a, sizeof g->a), n += sizeof g->a;
    memcpy(data + n, &g->b, sizeof g->b), n += sizeof g->b;
    memcpy(data + n, g->d, sizeof g->d), n += sizeof g->d;
    sdp_st_writer w;
    sdp_st_writer_open(&w, path, g->t, 4, GOLDEN_META);
    for (size_t at = 0; at < n; at += piece)
        sdp_st_writer_append(&w, data + at, n - at < piece ? n - at : piece);
    sdp_st_writer_commit(&w);
}

static void test_streamed_writer_matches_old_files(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "golden.safetensors");
    static golden g;
    golden_tensors(&g);
    sdp_st_write(path, g.t, 4, GOLDEN_META);
    expect_golden_file(path);
    const size_t pieces[] = {1, 7, 4096, 1 << 20};
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        write_streamed(path, &g, pieces[i]);
        expect_golden_file(path);
    }
}

/* A writer that gets fewer bytes than its header declares must not replace the old file. */
static void commit_short(void *path) {
    static golden g;
    golden_tensors(&g);
    sdp_st_writer w;
    sdp_st_writer_open(&w, path, g.t, 4, GOLDEN_META);
    sdp_st_writer_append(&w, g.a, sizeof g.a);
    sdp_st_writer_commit(&w);
}

static void append_too_much(void *path) {
    static golden g;
    golden_tensors(&g);
    sdp_st_writer w;
    sdp_st_writer_open(&w, path, g.t, 4, GOLDEN_META);
    sdp_st_writer_append(&w, g.a, sizeof g.a);
    sdp_st_writer_append(&w, g.a, sizeof g.a);
}

static void test_streamed_writer_counts_bytes(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "short.safetensors");
    static golden g;
    golden_tensors(&g);
    sdp_st_write(path, g.t, 4, GOLDEN_META);
    tu_expect_fatal(commit_short, path, "header declares");
    tu_expect_fatal(append_too_much, path, "header declares");
    expect_golden_file(path);
}

/* The streaming reader: the same validation and checksum, any byte range on demand. */
static void open_and_close(void *path) {
    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_open(&f, path, &mem);
    sdp_st_close(&f, &mem);
}

static void test_streaming_reader(void **state) {
    char path[1024];
    path_in(path, sizeof path, state, "open.safetensors");
    static golden g;
    golden_tensors(&g);
    write_streamed(path, &g, 1000);
    sdp_mem mem = {0};
    sdp_st_file f;
    sdp_st_open(&f, path, &mem);
    assert_null(f.buf);
    assert_int_equal(f.n, 4);
    assert_string_equal(sdp_st_meta(&f, "sdp.step"), "42");
    const sdp_st_entry *e = sdp_st_find(&f, "h.0.attn.weight");
    assert_non_null(e);
    assert_null(e->data);
    float got[10];
    sdp_st_pread(&f, e, 1500 * sizeof(float), got, sizeof got);
    assert_memory_equal(got, g.a + 1500, sizeof got);
    sdp_st_pread(&f, sdp_st_find(&f, "ln_f.bias"), 0, got, sizeof g.d);
    assert_memory_equal(got, g.d, sizeof g.d);
    sdp_st_close(&f, &mem);
    assert_int_equal(mem.total_cur, 0);
    /* damage anywhere in the data is found before any tensor is read */
    size_t len;
    unsigned char *bytes = slurp(path, &len);
    bytes[len - 3] ^= 0x10;
    spit(path, bytes, len);
    free(bytes);
    tu_expect_fatal(open_and_close, path, "checksum mismatch");
}

static void write_duplicate_names(void *path) {
    float x = 1;
    sdp_st_tensor t[2] = {{.name = "w", .ndim = 0, .data = &x},
                          {.name = "w", .ndim = 0, .data = &x}};
    sdp_st_write(path, t, 2, NULL);
}

static void write_reserved_meta(void *path) {
    float x = 1;
    sdp_st_tensor t = {.name = "w", .ndim = 0, .data = &x};
    const char *meta[] = {"sdp.crc32", "00000000", NULL};
    sdp_st_write(path, &t, 1, meta);
}

static void test_writer_rejects_bad_input(void **state) {
    char dir[768], path[1024];
    path_in(dir, sizeof dir, state, "badinput");
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tu_expect_fatal(write_duplicate_names, path, "'w' is used twice");
    tu_expect_fatal(write_reserved_meta, path, "reserved");
    int temps;
    assert_int_equal(count_entries(dir, &temps), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_large_tensor),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_foreign_file),
        cmocka_unit_test(test_write_file_atomic),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_flipped_byte),
        cmocka_unit_test(test_header_length_too_big),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_no_temp_left),
        cmocka_unit_test(test_overwrite_replaces),
        cmocka_unit_test(test_missing_directory),
        cmocka_unit_test(test_rename_failure_cleans_up),
        cmocka_unit_test(test_io_error_keeps_old_file),
        cmocka_unit_test(test_writer_rejects_bad_input),
        cmocka_unit_test(test_header_edit_detected),
        cmocka_unit_test(test_data_only_checksum),
        cmocka_unit_test(test_many_tensors_rejected_fast),
        cmocka_unit_test(test_huge_file_header_checked_first),
        cmocka_unit_test(test_fifo_refused),
        cmocka_unit_test(test_hostile_names_escaped),
        cmocka_unit_test(test_meta_numbers),
        cmocka_unit_test(test_streamed_writer_matches_old_files),
        cmocka_unit_test(test_streamed_writer_counts_bytes),
        cmocka_unit_test(test_streaming_reader),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

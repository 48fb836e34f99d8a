#include "sdp/image_loader.h"

#include "sdp/check.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* The IDX format (yann.lecun.com/exdb/mnist): a big-endian magic whose third byte is the
 * element type (0x08 = uint8) and fourth the number of dimensions, then each dimension as a
 * big-endian uint32, then the elements in row-major order. */
enum {
    IDX_IMAGES_MAGIC = 0x00000803,
    IDX_LABELS_MAGIC = 0x00000801,
    IDX_CLASSES = 10,
    IDX_MAX_SIDE = 65535, /* keeps n * rows * cols inside 64 bits */
    /* deflate never compresses better than about 1032:1, so a gzipped file of s bytes cannot
     * hold more than this many times s: a header claiming more is corrupt. */
    DEFLATE_MAX_RATIO = 1032,
    IDX_PATH_LEN = 4096,
};

typedef struct {
    char path[IDX_PATH_LEN];
    gzFile gz;
    size_t file_bytes; /* on disk, compressed or not */
} idx_file;

/* The one-line advice for a missing directory or file, which depends on whether the user asked
 * for the packaged Fashion-MNIST or a directory of their own. */
static const char *install_hint(bool default_dir) {
    return default_dir ? "install Fashion-MNIST with 'apt-get install dataset-fashion-mnist'"
                       : "the directory must hold the MNIST-layout files "
                         "{train,t10k}-{images-idx3,labels-idx1}-ubyte, gzipped (.gz) or not";
}

/* Prefers name.gz (how MNIST and Fashion-MNIST are distributed) and falls back to name. */
static void open_idx(idx_file *f, const char *dir, const char *name, bool default_dir) {
    snprintf(f->path, sizeof f->path, "%s/%s.gz", dir, name);
    if (access(f->path, F_OK) != 0) snprintf(f->path, sizeof f->path, "%s/%s", dir, name);
    SDP_CHECK_ALL(access(f->path, F_OK) == 0, "'%s' holds neither %s.gz nor %s: %s", dir, name,
                  name, install_hint(default_dir));
    struct stat st;
    SDP_CHECK_ALL(stat(f->path, &st) == 0 && S_ISREG(st.st_mode),
                  "'%s' is not a regular file: give the directory of an IDX dataset", f->path);
    f->file_bytes = (size_t)st.st_size;
    f->gz = gzopen(f->path, "rb"); /* reads plain files unchanged */
    SDP_CHECK_ALL(f->gz, "cannot open '%s' (%s): check its permissions", f->path, strerror(errno));
    gzbuffer(f->gz, 1 << 17);
}

/* " (gzip: <what zlib says>)" when zlib reports an error, else "". */
static void gzip_detail(const idx_file *f, char *buf, size_t len) {
    int errnum = Z_OK;
    const char *msg = gzerror(f->gz, &errnum);
    buf[0] = 0;
    if (errnum == Z_OK) return;
    /* zlib prefixes its message with the path, which the caller's message names already. */
    size_t plen = strlen(f->path);
    if (strncmp(msg, f->path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0) msg += plen + 2;
    snprintf(buf, len, " (gzip: %s)", msg);
}

/* Reads exactly n bytes; fewer means the file ends early or its gzip stream is damaged. */
static void read_exact(idx_file *f, void *buf, size_t n, const char *what) {
    size_t done = 0;
    while (done < n) {
        size_t want = n - done < (size_t)INT_MAX ? n - done : (size_t)INT_MAX;
        int got = gzread(f->gz, (char *)buf + done, (unsigned)want);
        if (got <= 0) {
            char detail[160];
            gzip_detail(f, detail, sizeof detail);
            sdp_fatal_all("'%s' is truncated or corrupt: it ends after %zu of the %zu bytes of its "
                          "%s%s; re-download or reinstall it",
                          f->path, done, n, what, detail);
        }
        done += (size_t)got;
    }
}

/* Reads `count` big-endian uint32 words of the header. */
static void read_header_words(idx_file *f, uint32_t *words, int count) {
    unsigned char b[16];
    SDP_ASSERT(count <= 4);
    read_exact(f, b, 4 * (size_t)count, "header");
    for (int i = 0; i < count; i++)
        words[i] = (uint32_t)b[4 * i] << 24 | (uint32_t)b[4 * i + 1] << 16 |
                   (uint32_t)b[4 * i + 2] << 8 | (uint32_t)b[4 * i + 3];
}

/* The magic is read on its own first, so that a file of another kind is named as such even
 * when it is shorter than an IDX header. */
static void expect_magic(idx_file *f, uint32_t expected, const char *kind) {
    uint32_t magic;
    read_header_words(f, &magic, 1);
    SDP_CHECK_ALL(magic == expected,
                  "'%s' is not an IDX %s file: its magic number is 0x%08X, expected 0x%08X; "
                  "give the MNIST-layout %s file",
                  f->path, kind, magic, expected, kind);
}

/* Rejects a header that promises more data than the file can hold before allocating for it. */
static void check_plausible_size(const idx_file *f, size_t header, size_t body) {
    size_t bytes = header + body;
    bool plain = gzdirect(f->gz);
    bool fits = plain ? bytes <= f->file_bytes : body / DEFLATE_MAX_RATIO <= f->file_bytes;
    SDP_CHECK_ALL(fits,
                  "'%s' is truncated or corrupt: its header promises %zu bytes of data but the "
                  "file holds only %zu%s; re-download or reinstall it",
                  f->path, body, f->file_bytes, plain ? "" : " compressed");
}

/* Data past what the header describes means the header is wrong, so nothing read is trusted. */
static void expect_end(idx_file *f, const char *what) {
    char extra;
    SDP_CHECK_ALL(gzread(f->gz, &extra, 1) == 0,
                  "'%s' is corrupt: it holds more bytes than its header's %s; re-download or "
                  "reinstall it",
                  f->path, what);
}

/* Returns the path it read in `path` (for messages about the labels). */
static void read_images(sdp_images *out, const char *dir, const char *name, bool default_dir,
                        char *path, sdp_mem *mem) {
    idx_file f;
    open_idx(&f, dir, name, default_dir);
    expect_magic(&f, IDX_IMAGES_MAGIC, "images");
    uint32_t dims[3];
    read_header_words(&f, dims, 3);
    uint32_t n = dims[0], rows = dims[1], cols = dims[2];
    SDP_CHECK_ALL(n >= 1 && rows >= 1 && cols >= 1 && rows <= IDX_MAX_SIDE && cols <= IDX_MAX_SIDE,
                  "'%s' declares %u images of %u x %u pixels: that is not a usable image set; "
                  "check the file",
                  f.path, n, rows, cols);
    size_t bytes = (size_t)n * rows * cols;
    check_plausible_size(&f, 16, bytes);
    out->n = n;
    out->C = 1;
    out->H = (int)rows;
    out->W = (int)cols;
    out->pixels = sdp_alloc(mem, SDP_MEM_DATA, bytes);
    read_exact(&f, out->pixels, bytes, "pixels");
    char what[96];
    snprintf(what, sizeof what, "%u images of %u x %u", n, rows, cols);
    expect_end(&f, what);
    gzclose(f.gz);
    memcpy(path, f.path, IDX_PATH_LEN);
}

static void read_labels(sdp_images *out, const char *dir, const char *name, const char *images,
                        bool default_dir, sdp_mem *mem) {
    idx_file f;
    open_idx(&f, dir, name, default_dir);
    expect_magic(&f, IDX_LABELS_MAGIC, "labels");
    uint32_t n;
    read_header_words(&f, &n, 1);
    SDP_CHECK_ALL(
        n == out->n,
        "'%s' holds %u labels but '%s' holds %zu images: use the images and labels files of "
        "the same split of the same dataset",
        f.path, n, images, out->n);
    check_plausible_size(&f, 8, n);
    out->labels = sdp_alloc(mem, SDP_MEM_DATA, n);
    read_exact(&f, out->labels, n, "labels");
    char what[64];
    snprintf(what, sizeof what, "%u labels", n);
    expect_end(&f, what);
    for (size_t i = 0; i < n; i++)
        SDP_CHECK_ALL(out->labels[i] < IDX_CLASSES,
                      "'%s' gives sample %zu the label %d, outside 0..%d: it is not a %d-class "
                      "label file",
                      f.path, i, out->labels[i], IDX_CLASSES - 1, IDX_CLASSES);
    out->nclasses = IDX_CLASSES;
    gzclose(f.gz);
}

void sdp_images_load_idx(sdp_images *out, const char *dir, const char *split, sdp_mem *mem) {
    bool default_dir = dir == NULL;
    if (default_dir) dir = SDP_FASHION_MNIST_DIR;
    bool train = strcmp(split, "train") == 0;
    SDP_CHECK_ALL(train || strcmp(split, "test") == 0,
                  "unknown split '%s' for the IDX dataset in '%s': use train or test", split, dir);
    struct stat st;
    SDP_CHECK_ALL(stat(dir, &st) == 0, "IDX dataset directory '%s' does not exist: %s", dir,
                  install_hint(default_dir));
    SDP_CHECK_ALL(S_ISDIR(st.st_mode),
                  "'%s' is a file, not the directory of an IDX dataset: give --data the directory "
                  "that holds {train,t10k}-{images-idx3,labels-idx1}-ubyte(.gz)",
                  dir);
    memset(out, 0, sizeof *out);
    const char *prefix = train ? "train" : "t10k";
    char images[64], labels[64], images_path[IDX_PATH_LEN];
    snprintf(images, sizeof images, "%s-images-idx3-ubyte", prefix);
    snprintf(labels, sizeof labels, "%s-labels-idx1-ubyte", prefix);
    read_images(out, dir, images, default_dir, images_path, mem);
    read_labels(out, dir, labels, images_path, default_dir, mem);
}

void sdp_images_free(sdp_images *d, sdp_mem *mem) {
    sdp_free(mem, d->pixels);
    sdp_free(mem, d->labels);
    memset(d, 0, sizeof *d);
}

#include "sdp/image_loader.h"

#include "sdp/check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* The binary versions of CIFAR-10 and CIFAR-100 (www.cs.toronto.edu/~kriz/cifar.html): files of
 * fixed-size records, each the label byte(s) then 3072 pixel bytes laid out as the red, green
 * and blue planes of a 32x32 image, rows top to bottom. That is already [C, H, W] order, so a
 * record's pixels are copied as they are. */
enum { CIFAR_C = 3, CIFAR_SIDE = 32, CIFAR_PIXELS = CIFAR_C * CIFAR_SIDE * CIFAR_SIDE };

enum { MAX_FILES = 5 };

typedef struct {
    const char *name; /* for messages */
    const char *url;  /* where the binary version is downloaded from */
    int label_bytes;  /* labels before the pixels of each record */
    int nclasses[2];  /* range of each label byte */
    int label_used;   /* which label byte is the label */
    const char *train[MAX_FILES + 1], *test[MAX_FILES + 1]; /* NULL-terminated file names */
} cifar_format;

static const cifar_format CIFAR10 = {
    .name = "CIFAR-10",
    .url = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz (extract it and pass its "
           "cifar-10-batches-bin directory)",
    .label_bytes = 1,
    .nclasses = {10, 0},
    .label_used = 0,
    .train = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
              "data_batch_5.bin", NULL},
    .test = {"test_batch.bin", NULL},
};

/* Each CIFAR-100 record starts with the coarse label (20 superclasses), then the fine one. */
static const cifar_format CIFAR100 = {
    .name = "CIFAR-100",
    .url = "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz (extract it and pass its "
           "cifar-100-binary directory)",
    .label_bytes = 2,
    .nclasses = {20, 100},
    .label_used = 1,
    .train = {"train.bin", NULL},
    .test = {"test.bin", NULL},
};

static size_t record_bytes(const cifar_format *fmt) {
    return (size_t)fmt->label_bytes + CIFAR_PIXELS;
}

/* Records in one file, after checking that it exists and holds only whole records. */
static size_t count_records(const cifar_format *fmt, const char *path) {
    struct stat st;
    SDP_CHECK_ALL(stat(path, &st) == 0,
                  "%s file '%s' is missing (%s): download the binary version from %s", fmt->name,
                  path, strerror(errno), fmt->url);
    SDP_CHECK_ALL(S_ISREG(st.st_mode), "'%s' is not a regular file: give the %s binary directory",
                  path, fmt->name);
    size_t bytes = (size_t)st.st_size, rec = record_bytes(fmt);
    SDP_CHECK_ALL(bytes > 0 && bytes % rec == 0,
                  "%s file '%s' holds %zu bytes, not a whole number of %zu-byte records: it is "
                  "truncated or not the binary version; download it again from %s",
                  fmt->name, path, bytes, rec, fmt->url);
    return bytes / rec;
}

static void read_records(const cifar_format *fmt, const char *path, size_t n, uint8_t *pixels,
                         uint8_t *labels) {
    FILE *f = sdp_fopen_input_all(path, "CIFAR file", NULL);
    unsigned char rec[2 + CIFAR_PIXELS];
    size_t rb = record_bytes(fmt);
    for (size_t i = 0; i < n; i++) {
        SDP_CHECK_ALL(fread(rec, 1, rb, f) == rb,
                      "cannot read record %zu of %s file '%s' (%s): check that it is readable", i,
                      fmt->name, path, ferror(f) ? strerror(errno) : "file shrank while reading");
        for (int k = 0; k < fmt->label_bytes; k++)
            SDP_CHECK_ALL(
                rec[k] < fmt->nclasses[k],
                "%s file '%s' gives record %zu label byte %d the value %d, outside 0..%d: "
                "it is corrupt or not a %s file; download it again from %s",
                fmt->name, path, i, k, rec[k], fmt->nclasses[k] - 1, fmt->name, fmt->url);
        labels[i] = rec[fmt->label_used];
        memcpy(pixels + i * CIFAR_PIXELS, rec + fmt->label_bytes, CIFAR_PIXELS);
    }
    fclose(f);
}

static void load_cifar(sdp_images *out, const cifar_format *fmt, const char *dir, const char *split,
                       sdp_mem *mem) {
    bool train = strcmp(split, "train") == 0;
    SDP_CHECK_ALL(train || strcmp(split, "test") == 0,
                  "unknown split '%s' for %s in '%s': use train or test", split, fmt->name, dir);
    struct stat st;
    SDP_CHECK_ALL(stat(dir, &st) == 0,
                  "%s directory '%s' does not exist: download the binary version from %s",
                  fmt->name, dir, fmt->url);
    SDP_CHECK_ALL(S_ISDIR(st.st_mode),
                  "'%s' is a file, not the %s directory: give --data the directory of its binary "
                  "version",
                  dir, fmt->name);
    const char *const *names = train ? fmt->train : fmt->test;
    char path[MAX_FILES][4096];
    size_t count[MAX_FILES], total = 0;
    int nfiles = 0;
    /* Every file is checked before anything is allocated, so a bad file fails fast. */
    for (; names[nfiles]; nfiles++) {
        snprintf(path[nfiles], sizeof path[nfiles], "%s/%s", dir, names[nfiles]);
        count[nfiles] = count_records(fmt, path[nfiles]);
        total += count[nfiles];
    }
    memset(out, 0, sizeof *out);
    out->n = total;
    out->C = CIFAR_C;
    out->H = out->W = CIFAR_SIDE;
    out->nclasses = fmt->nclasses[fmt->label_used];
    out->pixels = sdp_alloc(mem, SDP_MEM_DATA, total * CIFAR_PIXELS);
    out->labels = sdp_alloc(mem, SDP_MEM_DATA, total);
    size_t done = 0;
    for (int k = 0; k < nfiles; k++) {
        read_records(fmt, path[k], count[k], out->pixels + done * CIFAR_PIXELS, out->labels + done);
        done += count[k];
    }
}

void sdp_images_load_cifar10(sdp_images *out, const char *dir, const char *split, sdp_mem *mem) {
    load_cifar(out, &CIFAR10, dir, split, mem);
}

void sdp_images_load_cifar100(sdp_images *out, const char *dir, const char *split, sdp_mem *mem) {
    load_cifar(out, &CIFAR100, dir, split, mem);
}

#include "sdp/data.h"

#include "sdp/check.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Byte-level text: each byte is one token, so the vocabulary is always 256. */
enum { TEXT_VOCAB = 256 };

static FILE *open_text(const char *path, size_t *bytes) {
    FILE *f = sdp_fopen_input_all(path, "text file", bytes);
    SDP_CHECK_ALL(*bytes > 0, "text file '%s' is empty: give a file with some text in it", path);
    return f;
}

/* Reads n bytes from f, widening each into a token. Reads in chunks so that no second
 * full-size byte buffer is needed. */
static void read_bytes_as_tokens(FILE *f, const char *path, uint16_t *tok, size_t n) {
    unsigned char chunk[1 << 16];
    size_t done = 0;
    while (done < n) {
        size_t want = n - done < sizeof chunk ? n - done : sizeof chunk;
        size_t got = fread(chunk, 1, want, f);
        SDP_CHECK_ALL(got == want, "cannot read text file '%s' (%s): check that it is readable",
                      path, ferror(f) ? strerror(errno) : "file shrank while reading");
        for (size_t i = 0; i < got; i++) tok[done + i] = chunk[i];
        done += got;
    }
}

/* Each split owns its tokens, read straight from the file, so train and val can be freed
 * independently and no byte is held twice. */
static void read_split(sdp_tokens *t, FILE *f, const char *path, size_t n, sdp_mem *mem) {
    memset(t, 0, sizeof *t);
    t->owned = sdp_alloc(mem, SDP_MEM_DATA, n * sizeof *t->owned);
    read_bytes_as_tokens(f, path, t->owned, n);
    t->spans = sdp_alloc(mem, SDP_MEM_DATA, sizeof *t->spans);
    t->spans[0] = (sdp_token_span){t->owned, n};
    t->nspans = 1;
    t->vocab = TEXT_VOCAB;
    t->ntokens = n;
}

void sdp_tokens_load_text(sdp_tokens *train, sdp_tokens *val, const char *path, double val_frac,
                          sdp_mem *mem) {
    SDP_CHECK_ALL(val_frac >= 0.0 && val_frac < 1.0,
                  "validation fraction %g for '%s' is out of range: use a value in [0, 1)",
                  val_frac, path);
    size_t n = 0;
    FILE *f = open_text(path, &n);
    /* The validation split is the tail, so it is text the model never sees in training.
     * val_frac < 1 keeps at least one byte for training. */
    size_t nval = val ? (size_t)(val_frac * (double)n) : 0;
    read_split(train, f, path, n - nval, mem);
    if (val) read_split(val, f, path, nval, mem);
    fclose(f);
}

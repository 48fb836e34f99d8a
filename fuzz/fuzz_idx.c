/* IDX datasets (MNIST layout), gzipped or plain: the images and labels files' headers, their
 * agreement, and zlib's view of a hostile stream. The input is one control byte (bit 0: images
 * gzipped by name, bit 1: labels), two bytes giving the images file's length, then the images
 * file and the labels file. */
#include "harness.h"

#include "sdp/image_loader.h"

static void read_idx(void *dir) {
    sdp_mem mem = {0};
    sdp_images d;
    sdp_images_load_idx(&d, dir, "test", &mem);
    sdp_images_free(&d, &mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    const int gz_images = data[0] & 1, gz_labels = data[0] & 2;
    size_t n_images = (size_t)data[1] | (size_t)data[2] << 8;
    data += 3, size -= 3;
    if (n_images > size) n_images = size;
    const char *images = "t10k-images-idx3-ubyte", *labels = "t10k-labels-idx1-ubyte";
    const char *gi = "t10k-images-idx3-ubyte.gz", *gl = "t10k-labels-idx1-ubyte.gz";
    fuzz_remove(0, gz_images ? images : gi); /* only one of the two names may exist */
    fuzz_remove(1, gz_labels ? labels : gl);
    fuzz_file(0, gz_images ? gi : images, data, n_images);
    fuzz_file(1, gz_labels ? gl : labels, data + n_images, size - n_images);
    fuzz_run(read_idx, (void *)fuzz_dir());
    return 0;
}

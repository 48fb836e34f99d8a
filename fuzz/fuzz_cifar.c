/* CIFAR-10 and CIFAR-100 binary files: record sizes and labels. */
#include "harness.h"

#include "sdp/image_loader.h"

static void read_cifar10(void *dir) {
    sdp_mem mem = {0};
    sdp_images d;
    sdp_images_load_cifar10(&d, dir, "test", &mem);
    sdp_images_free(&d, &mem);
}

static void read_cifar100(void *dir) {
    sdp_mem mem = {0};
    sdp_images d;
    sdp_images_load_cifar100(&d, dir, "test", &mem);
    sdp_images_free(&d, &mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_file(0, "test_batch.bin", data, size);
    fuzz_file(1, "test.bin", data, size);
    fuzz_run(read_cifar10, (void *)fuzz_dir());
    fuzz_run(read_cifar100, (void *)fuzz_dir());
    return 0;
}

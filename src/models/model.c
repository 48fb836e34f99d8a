/* The model families sdp can build, by architecture name. */
#include "sdp/model.h"

#include <stdio.h>
#include <string.h>

extern const sdp_model_family SDP_FAMILY_GPT, SDP_FAMILY_LLAMA, SDP_FAMILY_RESNET, SDP_FAMILY_VIT;

static const sdp_model_family *const FAMILIES[] = {&SDP_FAMILY_GPT, &SDP_FAMILY_LLAMA,
                                                   &SDP_FAMILY_RESNET, &SDP_FAMILY_VIT};

const sdp_model_family *sdp_model_family_find(const char *arch) {
    for (size_t i = 0; i < sizeof FAMILIES / sizeof *FAMILIES; i++)
        if (strcmp(FAMILIES[i]->arch, arch) == 0) return FAMILIES[i];
    return NULL;
}

const char *sdp_model_family_names(char *buf, size_t n) {
    buf[0] = 0;
    for (size_t i = 0, at = 0; i < sizeof FAMILIES / sizeof *FAMILIES && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i ? ", " : "", FAMILIES[i]->arch);
    return buf;
}

/* Batch-norm running statistics after sdp_sync_average_buffers under backward masking, on real
 * MPI ranks, for a ResNet with block and neuron units and every k from 1 to N.
 *
 * Every worker holds the whole model under backward masking and evaluates it, and rank 0's copy
 * is what the checkpoint holds. So after the averaging, every rank, owner or not, must hold each
 * unit's statistics averaged over that unit's owners (shared ones over every worker), and the
 * trained parameters must be left alone.
 *
 * Each rank starts from values of its own, base(element) + 8 * rank: the owners' average is then
 * base + 8 * (mean of the owners' ranks), known here without communication. The check runs with
 * the sync on host memory and told that the buffers are a stand-in device's
 * (sdp_backend_emulated), as `sdp train --device emulated` runs it.
 *
 * usage: mpiexec -n N mpi_bn_average (exit status 0 when every check holds) */
#include "sdp/check.h"
#include "sdp/plan.h"
#include "sdp/resnet.h"
#include "sdp/subnet.h"
#include "sdp/sync.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

/* Two identity blocks per stage (depth 14), four inner channels each. */
static sdp_resnet_config resnet_config(void) {
    sdp_resnet_config c = {
        .depth = 14, .width = 4, .in_channels = 1, .image_size = 8, .classes = 3};
    sdp_resnet_config_finish(&c);
    return c;
}

static float base(size_t global) {
    return (float)(global % 7);
}

static float start_value(size_t global, int rank) {
    return base(global) + 8.0f * (float)rank;
}

/* What element `global` of run r holds after the averaging. */
static double expected(const sdp_run *r, size_t global, const sdp_plan *p, int rank, int world) {
    if (!r->buffer) return start_value(global, rank); /* untouched */
    double sum = 0;
    int owners = 0;
    for (int q = 0; q < world; q++)
        if (r->unit < 0 || sdp_plan_owns(p, r->unit, q)) sum += q, owners++;
    return base(global) + 8.0 * sum / owners;
}

/* Mismatched elements on this rank for one plan; on_device: the sync is told about a device. */
static long check(const sdp_resnet_config *c, const sdp_layout *full, sdp_unit_kind unit,
                  int owners, bool on_device, int rank, int world) {
    sdp_plan_cfg pc = {.mask = SDP_MASK_BACKWARD, .unit = unit, .world = world, .owners = owners};
    sdp_plan plan;
    sdp_plan_build(&plan, &pc, full);
    sdp_subnet_spec spec;
    sdp_subnet_spec_make(&spec, &plan, full, rank);
    sdp_layout local;
    sdp_resnet_describe(&local, c, &spec);
    sdp_subnet_spec_free(&spec);
    sdp_subnet_map map;
    sdp_subnet_map_build(&map, full, &local, &plan, rank, false);
    int *layer_of = malloc(sizeof(int) * (size_t)(local.nparams + 1));
    SDP_CHECK(layer_of, "out of memory");
    for (int i = 0; i < local.nparams; i++) layer_of[i] = local.params[i].block;
    sdp_mem mem = {0};
    sdp_sync sync;
    sdp_sync_init(&sync, &plan, &map, layer_of, rank, world, &mem);
    free(layer_of);
    sdp_backend *be = on_device ? sdp_backend_emulated(SDP_GEMM_DNNL, false)
                                : sdp_backend_cpu(SDP_GEMM_DNNL, &mem);
    sdp_sync_use_backend(&sync, be);

    float *params = malloc(sizeof(float) * local.numel);
    SDP_CHECK(params, "out of memory");
    for (int i = 0; i < map.nruns; i++)
        for (size_t e = 0; e < map.runs[i].len; e++)
            params[map.runs[i].local + e] = start_value(map.runs[i].global + e, rank);
    sdp_sync_average_buffers(&sync, params);
    long bad = 0;
    for (int i = 0; i < map.nruns; i++) {
        const sdp_run *r = &map.runs[i];
        for (size_t e = 0; e < r->len; e++) {
            const double want = expected(r, r->global + e, &plan, rank, world);
            const double got = params[r->local + e];
            if (fabs(got - want) <= 1e-6 * fabs(want)) continue;
            if (bad++ == 0)
                fprintf(stderr, "rank %d, %s: %s holds %g, expected %g (%s)\n", rank,
                        sdp_unit_kind_name(unit), full->params[r->param].name, got, want,
                        r->buffer ? "the owners' average" : "a trained tensor, untouched");
        }
    }
    free(params);
    sdp_sync_free(&sync);
    sdp_backend_destroy(be);
    sdp_subnet_map_free(&map);
    sdp_layout_free(&local);
    sdp_plan_free(&plan);
    return bad;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    sdp_resnet_config c = resnet_config();
    sdp_layout full;
    sdp_resnet_describe(&full, &c, NULL);
    int failed = 0;
    for (int u = 0; u < 2; u++)
        for (int k = 1; k <= world; k++)
            for (int dev = 0; dev < 2; dev++) {
                const sdp_unit_kind unit = u ? SDP_UNIT_NEURON : SDP_UNIT_BLOCK;
                long bad = check(&c, &full, unit, k, dev, rank, world);
                MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
                if (rank == 0)
                    printf("%s: backward %s k=%d of %d (%s): %ld elements wrong\n",
                           bad ? "FAIL" : "ok", sdp_unit_kind_name(unit), k, world,
                           dev ? "emulated device" : "host", bad);
                failed |= bad != 0;
            }
    sdp_layout_free(&full);
    MPI_Finalize();
    return failed;
}

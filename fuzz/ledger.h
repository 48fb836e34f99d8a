/* The fuzz targets' ledger of what a reader holds (fuzz/ledger.c): heap and sdp_alloc blocks,
 * descriptors, FILE and gzip streams, mappings, globs and cJSON trees. */
#ifndef SDP_FUZZ_LEDGER_H
#define SDP_FUZZ_LEDGER_H

/* Starts recording what is acquired and not yet released. */
void fuzz_ledger_start(void);
/* The reader returned: stops recording and forgets the ledger (what it still holds is a leak). */
void fuzz_ledger_accept(void);
/* The reader failed: releases everything it held, and stops recording. */
void fuzz_ledger_release(void);

#endif

/* pk_main.c: the step program.  Reads batches from batch.bin (or, when the batch is constant data in
   the image, runs one step on it), runs the compiled schedule and the update once per batch, and
   writes results to out.bin:

     batch.bin  header {'PKB1', steps, bytes per step, 0} (uint32 each), then each step's batch;
     out.bin    header {'PKO1', steps, bytes per step, final bytes}, then per step the loss (8 bytes,
                little-endian, float32 or float64) and the gradients (the PK_SP_GRAD space), then the
                parameters after the last update and the buffers (the PK_SP_PARAM and PK_SP_BUFFER
                spaces).

   --weights stream: the parameters are in weights.bin and their gradients go to grads.bin (the
   layers' blocks, pk_wstream_zoo.c), both moved through the staging buffer; after the update the
   weight traffic is printed ("pk-ws: read_bytes N" ...), what the Python side compares with the
   schedule's priced traffic.

   Dropout draws from a counter-based hash (pk_rng.h) seeded per step: step s of a run draws with
   pk_rng_step_seed(rng_seed, s), as poet/cbackend/rng.py does for the check against PyTorch.

   pk_mark: PK_MARK_BEGIN before each step's first instruction, the instruction's index after each,
   PK_MARK_UPDATE after the update, so an instruction counter attributes every count.
   Exit code 0 on success, else enum pk_exit_code (pk_runtime.h) with a "pk-error:" line. */
#include <string.h>

#include "pk_platform.h"
#include "pk_rng.h"
#include "pk_runtime.h"
#include "pk_wstream.h"

#define PK_MARK_BEGIN 0xFFFFFFF0u
#define PK_MARK_UPDATE 0xFFFFFFF1u
#define PK_MAGIC_BATCH 0x31424B50u /* "PKB1" */
#define PK_MAGIC_OUT 0x314F4B50u   /* "PKO1" */

static int fail(const char *what, int code) {
    pkr_print_kv(what, 0, 0, 0, 0.0);
    return code;
}

int main(void) {
    const pkr_model *m = &pkr_the_model;
    if (pk_platform_init() != 0) return fail("pk-error: the platform did not start", PK_EXIT_IO);
    int fb = -1;
    uint32_t steps = 1; /* a constant batch (the paper's setting): one step on it, no batch.bin */
    if (!m->batch_const) {
        fb = pk_file_open("batch.bin", PK_READ);
        if (fb < 0) return fail("pk-error: cannot open batch.bin", PK_EXIT_IO);
        uint32_t head[4];
        if (pk_file_read(fb, 0, head, sizeof head) != 0 || head[0] != PK_MAGIC_BATCH)
            return fail("pk-error: batch.bin is not a batch file (no PKB1 header)", PK_EXIT_BATCH);
        if (head[2] != m->batch_bytes) {
            pkr_print_kv("pk-error: batch.bin has batches of the wrong size;", "bytes", head[2], 0, 0.0);
            return PK_EXIT_BATCH;
        }
        steps = head[1];
    }
    int fp = -1;
    if (m->pages_bytes) {
        fp = pk_file_open("pages.bin", PK_RW);
        if (fp < 0) return fail("pk-error: cannot open pages.bin", PK_EXIT_IO);
    }
    int fw = -1, fg = -1;
    if (m->ws_nblocks) {
        fw = pk_file_open("weights.bin", PK_RW);
        fg = pk_file_open("grads.bin", PK_RW);
        if (fw < 0 || fg < 0) return fail("pk-error: cannot open weights.bin and grads.bin", PK_EXIT_IO);
        pk_ws_bind(fw, fg, m->ws_staging, m->ws_staging_bytes);
        pk_ws_reset();
    }
    int fo = pk_file_open("out.bin", PK_WRITE);
    if (fo < 0) return fail("pk-error: cannot create out.bin", PK_EXIT_IO);
    const uint32_t per_step = 8u + m->grad_bytes;
    const uint32_t final_at = 16u + steps * per_step;
    uint32_t out_head[4] = {PK_MAGIC_OUT, steps, per_step, m->param_bytes + m->buffer_bytes};
    if (pk_file_write(fo, 0, out_head, sizeof out_head) != 0) return fail("pk-error: cannot write out.bin", PK_EXIT_IO);

    pkr_print_kv("pk: step", "instructions", m->nsteps, 0, 0.0);
    for (uint32_t s = 0; s < steps; s++) {
        if (fb >= 0 && pk_file_read(fb, 16u + s * m->batch_bytes, m->space[PK_SP_BATCH], m->batch_bytes) != 0)
            return fail("pk-error: batch.bin ends early", PK_EXIT_BATCH);
        pk_rng_set_seed(pk_rng_step_seed(m->rng_seed, s)); /* dropout masks: poet/cbackend/rng.py */
        pk_mark(PK_MARK_BEGIN);
        int rc = pkr_run_schedule(m, fp);
        if (rc) return rc;
        uint8_t loss[8] = {0};
        memcpy(loss, m->space[PK_SP_LOSS], m->loss_bytes);
        const uint32_t at = 16u + s * per_step;
        if (pk_file_write(fo, at, loss, 8) != 0 ||
            (m->grad_bytes && pk_file_write(fo, at + 8u, m->space[PK_SP_GRAD], m->grad_bytes) != 0))
            return fail("pk-error: cannot write out.bin", PK_EXIT_IO);
        if (s + 1 == steps && !m->params_writable) {
            /* const parameters: the final values go to out.bin; the update writes the trained ones */
            if (pk_file_write(fo, final_at, m->space[PK_SP_PARAM], m->param_bytes) != 0)
                return fail("pk-error: cannot write out.bin", PK_EXIT_IO);
        }
        rc = pkr_apply_update(m, s, fo, final_at);
        if (rc) return fail("pk-error: cannot write the updated parameters to out.bin", rc);
        pk_mark(PK_MARK_UPDATE);
        double lv = m->loss_bytes == 8 ? *(const double *)(const void *)loss : (double)*(const float *)(const void *)loss;
        pkr_print_kv("pk: step", "done", (int64_t)s + 1, "loss", lv);
    }
    if (m->params_writable && m->param_bytes &&
        pk_file_write(fo, final_at, m->space[PK_SP_PARAM], m->param_bytes) != 0)
        return fail("pk-error: cannot write out.bin", PK_EXIT_IO);
    if (m->buffer_bytes && pk_file_write(fo, final_at + m->param_bytes, m->space[PK_SP_BUFFER], m->buffer_bytes) != 0)
        return fail("pk-error: cannot write out.bin", PK_EXIT_IO);
    if (m->ws_nblocks) {
        uint64_t moved[4];
        pk_ws_counters(moved);
        pkr_print_kv("pk-ws:", "read_bytes", (int64_t)moved[0], 0, 0.0);
        pkr_print_kv("pk-ws:", "write_bytes", (int64_t)moved[1], 0, 0.0);
        pkr_print_kv("pk-ws:", "reads", (int64_t)moved[2], 0, 0.0);
        pkr_print_kv("pk-ws:", "writes", (int64_t)moved[3], 0, 0.0);
        pk_file_close(fg);
        pk_file_close(fw);
    }
    pk_file_close(fo);
    if (fp >= 0) pk_file_close(fp);
    if (fb >= 0) pk_file_close(fb);
    pk_print("pk: ok");
    return PK_EXIT_OK;
}

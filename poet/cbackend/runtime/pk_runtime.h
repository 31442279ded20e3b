/* pk_runtime.h: a compiled training step as constant tables, and the small interpreter that runs them.

   poet/cbackend/emit.py writes the tables (pk_model.c) for one validated schedule: every schedule
   instruction is a pkr_step; a compute step runs its pkr_calls (one kernel each, its tensor arguments
   pk_args whose byte offsets were resolved at compile time, its scalars in a constant pool); a page
   step moves one arena block to or from its slot in the paging store; a free step only ends a
   residency (its bytes are reused by later blocks the arena plan put there).  Graph outputs (loss,
   gradients, buffer updates) are copied to their places by the pk_copies of the compute step after
   which they are first complete.  After the schedule: buffer updates over the buffers, then SGD.
   Nothing here allocates: every buffer is a static array of the size the tables were made for. */
#ifndef PK_RUNTIME_H
#define PK_RUNTIME_H

#include <stdint.h>

#include "pk.h"

/* memory spaces: where an argument's offset points (the order of poet/cbackend/ir.py SPACES) */
enum pk_space {
    PK_SP_ARENA = 0,   /* the one arena: every residency of a node is a block in it */
    PK_SP_PARAM = 1,   /* parameters (flash in the paper's setting, RAM when the budget holds them) */
    PK_SP_GRAD = 2,    /* parameter gradients */
    PK_SP_BUFFER = 3,  /* buffers (BatchNorm running statistics) */
    PK_SP_STAGING = 4, /* buffer updates, copied over the buffers after the schedule */
    PK_SP_BATCH = 5,   /* the current batch (inputs, then targets) */
    PK_SP_CONST = 6,   /* constants: the loss tangent, constants of the traced graph */
    PK_SP_LOSS = 7,    /* the step's loss */
    PK_NSPACES = 8
};

enum pk_op { PK_OP_COMPUTE = 0, PK_OP_PAGE_OUT = 1, PK_OP_PAGE_IN = 2, PK_OP_FREE = 3 };

/* exit codes of the step program (0: success) */
enum pk_exit_code {
    PK_EXIT_OK = 0,
    PK_EXIT_KERNEL = 3,  /* a kernel returned an error */
    PK_EXIT_IO = 4,      /* a file could not be opened, read or written */
    PK_EXIT_PAGE = 5,    /* a page came back with a wrong size or checksum */
    PK_EXIT_BATCH = 6,   /* batch.bin is not a batch file for this step */
    PK_EXIT_CONFIG = 7   /* the tables are inconsistent (a bug: please report it) */
};

typedef struct {
    uint8_t space;   /* enum pk_space */
    uint8_t dtype;   /* enum pk_dtype; PK_NONE: an absent optional tensor */
    uint8_t ndim;
    uint8_t pad_;
    uint32_t offset; /* bytes from the start of the space */
    uint32_t dims;   /* index in pkr_model.dims: ndim sizes, then ndim strides (elements) */
} pkr_arg;

typedef struct {
    uint16_t kernel;  /* index in pkr_model.kernels */
    uint8_t nt;       /* tensors: inputs then outputs */
    uint8_t ns;       /* scalars */
    uint32_t args;    /* first of nt entries in pkr_model.args */
    uint32_t scalars; /* first of ns entries in pkr_model.scalars */
} pkr_call;

typedef struct {
    uint8_t op;       /* enum pk_op */
    uint8_t pad_;
    uint16_t ncopies; /* compute: graph outputs complete after this step */
    uint32_t node;
    uint32_t a;       /* compute: first call; page/free: the block's arena offset */
    uint32_t b;       /* compute: number of calls; page/free: the block's bytes */
    uint32_t c;       /* compute: first copy; page: the node's slot in the paging store */
} pkr_step;

typedef struct {
    uint32_t src, dst; /* indices in pkr_model.args */
} pkr_copy;

typedef struct {
    uint32_t param;  /* byte offset in the parameter space (float32) */
    uint32_t grad;   /* byte offset in the gradient space */
    uint32_t numel;
} pkr_update;

typedef struct {
    uint32_t staging, buffer, nbytes; /* a buffer update copied over its buffer */
} pkr_buffer_update;

typedef struct {
    uint32_t offset, nbytes; /* --weights stream: a layer's block in the weight and gradient files */
} pkr_ws_block;

typedef struct {
    const char *name;
    uint32_t nsteps, ncalls, nargs;
    const pkr_step *steps;
    const pkr_call *calls;
    const pkr_arg *args;
    const int32_t *dims;
    const pk_scalar *scalars;
    const pkr_copy *copies;
    const pk_kernel_fn *kernels;
    const char *const *kernel_names;
    const char *const *node_names; /* NULL when the tables were built without names */
    uint8_t *const *space;         /* base address of each pk_space */
    const uint32_t *space_bytes;   /* and its size */
    uint32_t batch_bytes;          /* one step's batch: the PK_SP_BATCH space */
    uint32_t pages_bytes;          /* the paging store (0: the schedule never pages) */
    uint32_t nupdates;
    const pkr_update *updates;      /* SGD on these parameters (params writable) */
    uint32_t nbuffer_updates;
    const pkr_buffer_update *buffer_updates;
    uint64_t rng_seed;             /* dropout: step s of a run draws with pk_rng_step_seed(rng_seed, s) */
    float lr, momentum;            /* momentum 0: plain SGD */
    float *momentum_buf;           /* gradient-sized, or NULL */
    uint8_t params_writable;       /* 0: parameters are const; the update is written out, not applied */
    uint8_t poison_freed;          /* 1: freed blocks are filled with 0xFF (NaN) to catch stale reads */
    uint8_t zero_grads;            /* 1: the gradient space is zeroed before the schedule (kernels add into it) */
    uint8_t batch_const;           /* 1: the batch is constant data in the image (one step); batch.bin is not read */
    uint8_t loss_bytes;
    uint32_t grad_bytes, param_bytes, buffer_bytes;
    /* --weights stream: the parameters live in weights.bin, their gradients in grads.bin (pk_wstream.h),
       moved through the staging buffer; the update streams through both (ws_nblocks 0: not streamed) */
    uint32_t ws_nblocks;
    const pkr_ws_block *ws_blocks;
    float *ws_staging;
    uint32_t ws_staging_bytes;
} pkr_model;

extern const pkr_model pkr_the_model;

/* Run the schedule once (the batch already in its space); pages through file `pages` (-1: none).
   pk_mark(i) after instruction i.  0, or an exit code after printing what failed. */
int pkr_run_schedule(const pkr_model *m, int pages);

/* Buffer updates over the buffers, then the SGD step (step: 0 for the first, for momentum).
   With const parameters, the updated parameters are written to file `out` at `offset` instead; with
   streamed weights the update reads weights and gradients from their files and writes the weights. */
int pkr_apply_update(const pkr_model *m, uint32_t step, int out, uint32_t offset);

uint32_t pkr_crc32(uint32_t crc, const uint8_t *p, uint32_t n);

/* a line with a label and numbers, without printf (no libc beyond <string.h> in the step) */
void pkr_print_kv(const char *label, const char *key, int64_t value, const char *key2, double value2);

#endif

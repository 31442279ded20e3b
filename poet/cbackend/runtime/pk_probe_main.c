/* pk_probe_main.c: a firmware that runs a list of kernel calls, one by one, each between two
   pk_mark calls, so the instruction counter measures every call alone (poet/cbackend/probe.py writes
   the calls and the generated pk_probe_table.c; `poet profile --target qemu-m4` and the host/emulator
   bit-identity tests use it).

   batch.bin, little-endian:
     header   u32 magic 'PKPB', u32 version 1, u32 number of calls, u32 data bytes
     data     the data block's initial contents (every tensor of every call lives in it)
     calls    per call: u32 kernel index, u32 nt, u32 ns, then nt tensors (i32 dtype, i32 ndim,
              i32 size[8], i32 stride[8], u32 byte offset into the data block), then ns scalars
              (8 bytes each, as pk_scalar)
   out.bin: the data block after the last call.  Exit code 0, or 10 + the failing kernel's status. */
#include <stdint.h>

#include "pk.h"
#include "pk_platform.h"

extern const pk_kernel_fn pk_probe_kernels[];
extern const uint32_t pk_probe_n_kernels;
extern uint8_t pk_probe_data[];
extern const uint32_t pk_probe_data_bytes;

#define PROBE_MAGIC 0x42504B50u /* "PKPB" */
#define PROBE_MAX_TENSORS 16
#define PROBE_MAX_SCALARS 32

typedef struct {
    int32_t dtype, ndim, size[PK_MAXDIM], stride[PK_MAXDIM];
    uint32_t offset;
} probe_tensor;

/* the calibration call: everything a kernel call costs around the kernel itself */
static int probe_nop(pk_tensor *t, int nt, const pk_scalar *s, int ns) {
    (void)t;
    (void)nt;
    (void)s;
    (void)ns;
    return PK_OK;
}

static int fail(const char *what, int code) {
    pk_print(what);
    return code;
}

int main(void) {
    if (pk_platform_init() != 0) return fail("probe: platform init failed", 2);
    int in = pk_file_open("batch.bin", PK_READ);
    if (in < 0) return fail("probe: cannot open batch.bin", 3);
    uint32_t head[4];
    if (pk_file_read(in, 0, head, sizeof head) != 0 || head[0] != PROBE_MAGIC || head[1] != 1)
        return fail("probe: batch.bin is not a probe file of version 1", 4);
    uint32_t n_calls = head[2], data_bytes = head[3];
    if (data_bytes > pk_probe_data_bytes) return fail("probe: the data block is larger than the firmware's", 5);
    if (pk_file_read(in, sizeof head, pk_probe_data, data_bytes) != 0) return fail("probe: short data block", 6);
    uint32_t pos = (uint32_t)sizeof head + data_bytes;

    static pk_tensor t[PROBE_MAX_TENSORS];
    static pk_scalar s[PROBE_MAX_SCALARS];
    for (uint32_t c = 0; c <= n_calls; c++) {
        pk_kernel_fn fn = probe_nop; /* call 0 calibrates; the file's calls follow */
        uint32_t nt = 0, ns = 0;
        if (c > 0) {
            uint32_t call[3];
            if (pk_file_read(in, pos, call, sizeof call) != 0) return fail("probe: short call table", 7);
            pos += sizeof call;
            if (call[0] >= pk_probe_n_kernels || call[1] > PROBE_MAX_TENSORS || call[2] > PROBE_MAX_SCALARS)
                return fail("probe: a call names no kernel of this firmware or has too many arguments", 8);
            fn = pk_probe_kernels[call[0]];
            nt = call[1];
            ns = call[2];
            for (uint32_t i = 0; i < nt; i++) {
                probe_tensor d;
                if (pk_file_read(in, pos, &d, sizeof d) != 0) return fail("probe: short tensor table", 7);
                pos += sizeof d;
                t[i].data = d.dtype == PK_NONE ? 0 : pk_probe_data + d.offset;
                t[i].dtype = d.dtype;
                t[i].ndim = d.ndim;
                for (int k = 0; k < PK_MAXDIM; k++) {
                    t[i].size[k] = d.size[k];
                    t[i].stride[k] = d.stride[k];
                }
            }
            if (ns && pk_file_read(in, pos, s, ns * (uint32_t)sizeof(pk_scalar)) != 0)
                return fail("probe: short scalar table", 7);
            pos += ns * (uint32_t)sizeof(pk_scalar);
        }
        pk_kernel_fn volatile call_fn = fn; /* one indirect call for the nop and every kernel alike */
        pk_mark(2 * c);
        int rc = call_fn(t, (int)nt, s, (int)ns);
        pk_mark(2 * c + 1);
        if (rc != PK_OK) return fail("probe: a kernel returned an error", 10 + rc);
    }
    pk_file_close(in);
    int out = pk_file_open("out.bin", PK_WRITE);
    if (out < 0 || pk_file_write(out, 0, pk_probe_data, data_bytes) != 0) return fail("probe: cannot write out.bin", 9);
    pk_file_close(out);
    return 0;
}

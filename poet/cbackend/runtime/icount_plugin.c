/* icount_plugin.c: a QEMU TCG plugin that counts the guest's executed instructions and records the
   running count each time the instruction at one address (pk_mark's first) executes.

   Built on the host at run time (poet/cbackend/icount.py: cc -shared), loaded with
       -plugin libicount.so,mark=0xADDR,out=FILE
   and written at exit as text: "insns N" (all executed instructions), then one "mark C" line per
   execution of the mark address, in order, where C counts the instructions executed before it.

   Counting is inline per translation block (QEMU adds the block's length to one counter when the
   block starts), so it costs almost nothing and repeats exactly from run to run; a block left early
   (a fault, a semihosting trap) still counts whole.  The mark callback subtracts the instructions
   of its block from the mark on, which were added but have not run yet.

   Debian's QEMU ships no plugin headers, but its binary exports the plugin API: the declarations
   below are the few this plugin uses, written from QEMU 7.2's documented qemu-plugin.h (plugin API
   version 1); their meaning is QEMU's, their spelling here is ours. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct {
    const char *target_name;
    struct {
        int min, cur;
    } version;
    bool system_emulation;
    union {
        struct {
            int smp_vcpus, max_vcpus;
        } system;
    };
} qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS };
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*tb_trans_cb)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*vcpu_udata_cb)(unsigned int vcpu_index, void *userdata);
typedef void (*udata_cb)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, tb_trans_cb cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op, void *ptr,
                                              uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, vcpu_udata_cb cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, udata_cb cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

static uint64_t executed;  /* instructions of every block started so far */
static uint64_t mark_addr; /* 0: no mark */
static uint64_t *marks;
static size_t n_marks, cap_marks;
static const char *out_path;
static bool out_of_memory;

static void on_mark(unsigned int vcpu, void *not_yet_run) {
    (void)vcpu;
    if (n_marks == cap_marks) {
        size_t cap = cap_marks ? 2 * cap_marks : 4096;
        uint64_t *grown = realloc(marks, cap * sizeof *marks);
        if (!grown) {
            out_of_memory = true;
            return;
        }
        marks = grown;
        cap_marks = cap;
    }
    marks[n_marks++] = executed - (uint64_t)(uintptr_t)not_yet_run;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &executed, n);
    if (!mark_addr) return;
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        if (qemu_plugin_insn_vaddr(insn) == mark_addr)
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_mark, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)(n - i));
    }
}

/* written to FILE.tmp, then renamed: a reader never sees half a file */
static void on_exit_write(qemu_plugin_id_t id, void *userdata) {
    (void)id;
    (void)userdata;
    size_t len = strlen(out_path);
    char *tmp = malloc(len + 5);
    if (!tmp) return;
    memcpy(tmp, out_path, len);
    memcpy(tmp + len, ".tmp", 5);
    FILE *f = fopen(tmp, "w");
    if (f) {
        bool ok = fprintf(f, "insns %llu\n", (unsigned long long)executed) > 0;
        for (size_t i = 0; ok && i < n_marks; i++) ok = fprintf(f, "mark %llu\n", (unsigned long long)marks[i]) > 0;
        if (out_of_memory) ok = false;
        if (fclose(f) == 0 && ok) rename(tmp, out_path);
    }
    free(tmp);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                                               int argc, char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "mark=", 5) == 0) mark_addr = strtoull(argv[i] + 5, NULL, 0);
        else if (strncmp(argv[i], "out=", 4) == 0) out_path = argv[i] + 4;
        else {
            fprintf(stderr, "icount plugin: unknown argument %s (takes mark=ADDR and out=FILE)\n", argv[i]);
            return 1;
        }
    }
    if (!out_path) {
        fprintf(stderr, "icount plugin: no out=FILE given\n");
        return 1;
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit_write, NULL);
    return 0;
}

/* pk_platform_semihost.c: pk_platform.h over ARM semihosting (qemu-m4: the emulator's host files in
   the run folder stand in for the board's SD card, its stderr for a UART).

   Board hook.  Every function here except pk_mark is weak: a port to a real board links one more C
   file that defines the ones it replaces, and those win, with no change to this file or the step:
     pk_platform_init                     bring up clocks, the UART, the SD card or flash driver;
     pk_file_open/read/write/close        the named files (batch.bin, pages.bin, out.bin) over the
                                          board's storage: a FAT driver, or fixed flash partitions
                                          where the name picks the partition;
     pk_print                             a line to the UART (or nowhere);
     pk_exit                              halt, blink, or reset (never return).
   Semihosting traps into a debugger: on a board with none attached, a call that is not replaced
   stops the core.  docs/mcu.md walks through a port. */
#include <stdint.h>

#include "pk_m4.h"
#include "pk_platform.h"

#define PK_WEAK __attribute__((weak))

enum {
    SYS_OPEN = 0x01,
    SYS_CLOSE = 0x02,
    SYS_WRITE0 = 0x04,
    SYS_WRITE = 0x05,
    SYS_READ = 0x06,
    SYS_SEEK = 0x0A,
    SYS_EXIT_EXTENDED = 0x20,
};
#define ADP_STOPPED_APPLICATION_EXIT 0x20026u

/* SYS_OPEN modes are indexes into fopen's: 1 "rb", 3 "r+b", 5 "wb", 7 "w+b" */
enum { OPEN_RB = 1, OPEN_RPB = 3, OPEN_WB = 5, OPEN_WPB = 7 };

static int32_t semihost(uint32_t op, const void *arg) {
    register uint32_t r0 __asm__("r0") = op;
    register const void *r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return (int32_t)r0;
}

PK_WEAK int pk_platform_init(void) { return 0; }

static int open_mode(const char *name, uint32_t mode) {
    uint32_t len = 0;
    while (name[len]) len++;
    uint32_t args[3] = {(uint32_t)(uintptr_t)name, mode, len};
    return semihost(SYS_OPEN, args);
}

PK_WEAK int pk_file_open(const char *name, int mode) {
    if (mode == PK_READ) return open_mode(name, OPEN_RB);
    if (mode == PK_WRITE) return open_mode(name, OPEN_WB);
    int f = open_mode(name, OPEN_RPB); /* read-write: keep the file if it is there, else create it */
    return f >= 0 ? f : open_mode(name, OPEN_WPB);
}

static int seek(int f, uint32_t offset) {
    uint32_t args[2] = {(uint32_t)f, offset};
    return semihost(SYS_SEEK, args) == 0 ? 0 : -1;
}

/* SYS_READ and SYS_WRITE return how many bytes were NOT transferred */
PK_WEAK int pk_file_read(int f, uint32_t offset, void *dst, uint32_t n) {
    if (seek(f, offset) != 0) return -1;
    uint32_t args[3] = {(uint32_t)f, (uint32_t)(uintptr_t)dst, n};
    return semihost(SYS_READ, args) == 0 ? 0 : -1;
}

PK_WEAK int pk_file_write(int f, uint32_t offset, const void *src, uint32_t n) {
    if (seek(f, offset) != 0) return -1;
    uint32_t args[3] = {(uint32_t)f, (uint32_t)(uintptr_t)src, n};
    return semihost(SYS_WRITE, args) == 0 ? 0 : -1;
}

PK_WEAK void pk_file_close(int f) {
    uint32_t args[1] = {(uint32_t)f};
    semihost(SYS_CLOSE, args);
}

PK_WEAK void pk_print(const char *line) {
    semihost(SYS_WRITE0, line);
    semihost(SYS_WRITE0, "\n");
}

/* The instruction counter (icount_plugin.c) finds this function by its symbol and records the
   running count each time its first instruction executes.  noipa: never inlined, never dropped,
   and no caller assumes anything about it, so every call really happens. */
__attribute__((noipa)) void pk_mark(uint32_t id) { __asm__ volatile("" : : "r"(id) : "memory"); }

static char *put_u32(char *p, uint32_t v) {
    char digits[10];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10u);
        v /= 10u;
    } while (v);
    while (n) *p++ = digits[--n];
    return p;
}

PK_WEAK void pk_exit(int code) {
    char line[64] = "pk-stack: used ", *p = line + 15;
    p = put_u32(p, pk_stack_used());
    const char *of = " of ";
    while (*of) *p++ = *of++;
    p = put_u32(p, pk_stack_size());
    *p = '\0';
    pk_print(line);
    uint32_t args[2] = {ADP_STOPPED_APPLICATION_EXIT, (uint32_t)code};
    semihost(SYS_EXIT_EXTENDED, args);
    for (;;) __asm__ volatile("wfi"); /* a debugger that ignores the exit request */
}

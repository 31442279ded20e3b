/* startup_m4.c: from reset to main() on a Cortex-M4F with nothing underneath (no crt0, no newlib
   startup, no heap), for the qemu-m4 target (QEMU mps2-an386) and any board linked with m4.ld.in.

   pk_reset, in order: enable the FPU (CPACR) before any float instruction can run; set the stack
   pointer and paint the stack (pk_stack_used() measures its high-water mark); copy .data from flash;
   zero .bss, the arena and the external region; map memory with the MPU (flash read-only and the
   only executable memory, the RAM region exactly and not one 32-byte block beyond, the external
   region; nothing else, so a stray access faults); enable the MemManage, BusFault and UsageFault
   exceptions and the divide-by-zero trap; call main(); pk_exit() with what it returned.

   A fault never hangs: its handler moves the stack pointer back to the top of the stack (the fault
   may be a stack overflow), prints one pk-fault line through pk_print (format in pk_m4.h) and ends
   with pk_exit(PK_EXIT_FAULT + exception number). */
#include <stdint.h>

#include "pk_m4.h"
#include "pk_platform.h"

extern uint32_t __stack_bottom[], __stack_top[];
extern uint32_t __data_start[], __data_end[], __data_load[];
extern uint32_t __arena_start[], __arena_end[], __bss_start[], __bss_end[];
extern uint32_t __external_start[], __external_end[];
extern uint32_t __ram_start[], __ram_mpu_end[], __flash_start[], __flash_end[];
extern uint32_t __external_region_start[], __external_region_end[];

int main(void);
void pk_reset(void);
void pk_start(void);
void pk_fault_report(uint32_t exception, const uint32_t *frame);

#define REG(addr) (*(volatile uint32_t *)(addr))
#define SCB_VTOR REG(0xE000ED08u)
#define SCB_CCR REG(0xE000ED14u)
#define SCB_SHCSR REG(0xE000ED24u)
#define SCB_CFSR REG(0xE000ED28u)
#define SCB_HFSR REG(0xE000ED2Cu)
#define SCB_MMFAR REG(0xE000ED34u)
#define SCB_BFAR REG(0xE000ED38u)
#define MPU_TYPE REG(0xE000ED90u)
#define MPU_CTRL REG(0xE000ED94u)
#define MPU_RNR REG(0xE000ED98u)
#define MPU_RBAR REG(0xE000ED9Cu)
#define MPU_RASR REG(0xE000EDA0u)

#define STACK_PAINT 0xC0DEFACEu

/* MPU_RASR attributes: XN (no execution), AP (access), TEX/C/B (normal memory, cacheable) */
#define MPU_FLASH ((6u << 24) | (1u << 17))                                 /* read-only, executable */
#define MPU_RAM ((1u << 28) | (3u << 24) | (1u << 19) | (1u << 17) | (1u << 16)) /* read-write, XN */

/* ---- reset --------------------------------------------------------------------------------- */

/* Naked and in assembly: nothing may touch the FPU or the stack before CPACR and SP are set. */
__attribute__((naked, noreturn)) void pk_reset(void) {
    __asm__ volatile(
        "ldr r0, =0xE000ED88\n" /* CPACR: CP10 and CP11 full access */
        "ldr r1, [r0]\n"
        "orr r1, r1, #0x00F00000\n"
        "str r1, [r0]\n"
        "dsb\n"
        "isb\n"
        "ldr r0, =__stack_top\n"
        "mov sp, r0\n"
        "ldr r0, =__stack_bottom\n" /* paint the whole stack: nothing is on it yet */
        "ldr r1, =__stack_top\n"
        "ldr r2, =0xC0DEFACE\n"
        "1: cmp r0, r1\n"
        "bhs 2f\n"
        "str r2, [r0], #4\n"
        "b 1b\n"
        "2: b pk_start\n"
        ".ltorg\n");
}

/* Cover [cur, end) exactly with MPU regions from region r on (a region is 8 equal subregions of a
   power of two >= 32 bytes, aligned to its size; unused subregions are disabled).  Returns the next
   free region, or -1 when 8 regions do not suffice.  Any 32-byte-aligned RAM region up to 4 MiB at
   0x20000000 takes at most 6. */
static int mpu_map(int r, uint32_t cur, uint32_t end, uint32_t attrs) {
    while (cur < end) {
        if (r >= 8) return -1;
        uint32_t rem = end - cur;
        uint32_t top = 1u << (31 - __builtin_clz(rem)); /* largest power of two <= rem */
        uint32_t sub = top >= 128 ? top >> 2 : 32;      /* so that 4..7 subregions take the rest */
        uint32_t align = cur & (0u - cur);               /* cur's own alignment (0: address 0) */
        if (align != 0 && align < sub) sub = align;
        if (sub > (1u << 28)) return -1; /* regions of 4 GiB are not needed here */
        uint32_t size = sub * 8;
        uint32_t base = cur & ~(size - 1);
        uint32_t first = (cur - base) / sub, last = (end - base) / sub;
        if (last > 8) last = 8;
        uint32_t disabled = 0xFFu & ~(((1u << last) - 1u) & ~((1u << first) - 1u));
        MPU_RNR = (uint32_t)r;
        MPU_RBAR = base;
        MPU_RASR = attrs | (disabled << 8) | ((uint32_t)(31 - __builtin_clz(size) - 1) << 1) | 1u;
        cur = base + last * sub;
        r++;
    }
    return r;
}

static void mpu_setup(void) {
    if (((MPU_TYPE >> 8) & 0xFFu) < 8) return; /* no MPU (a Cortex-M4 without the option) */
    int r = mpu_map(0, (uint32_t)__flash_start, (uint32_t)__flash_end, MPU_FLASH);
    if (r >= 0 && (uintptr_t)__external_end != (uintptr_t)__external_start)
        r = mpu_map(r, (uint32_t)__external_region_start, (uint32_t)__external_region_end, MPU_RAM);
    if (r >= 0) r = mpu_map(r, (uint32_t)__ram_start, (uint32_t)__ram_mpu_end, MPU_RAM);
    if (r < 0) {
        pk_print("pk-fault: MPU setup (the RAM region cannot be mapped exactly with 8 MPU regions)");
        pk_exit(PK_EXIT_MPU_SETUP);
    }
    MPU_CTRL = 1u; /* enabled; no default map for privileged code; off in HardFault and NMI */
    __asm__ volatile("dsb\nisb" ::: "memory");
}

__attribute__((noreturn, used)) void pk_start(void) {
    const uint32_t *src = __data_load;
    for (uint32_t *p = __data_start; p < __data_end;) *p++ = *src++;
    for (uint32_t *p = __arena_start; p < __arena_end;) *p++ = 0;
    for (uint32_t *p = __bss_start; p < __bss_end;) *p++ = 0;
    for (uint32_t *p = __external_start; p < __external_end;) *p++ = 0;
    SCB_VTOR = (uint32_t)__flash_start;
    SCB_SHCSR |= (1u << 16) | (1u << 17) | (1u << 18); /* MemManage, BusFault, UsageFault */
    SCB_CCR |= 1u << 4;                                /* integer division by zero traps */
    mpu_setup();
    pk_exit(main());
}

uint32_t pk_stack_size(void) { return (uint32_t)((uintptr_t)__stack_top - (uintptr_t)__stack_bottom); }

uint32_t pk_stack_used(void) {
    const uint32_t *p = __stack_bottom;
    while (p < __stack_top && *p == STACK_PAINT) p++;
    return (uint32_t)((uintptr_t)__stack_top - (uintptr_t)p);
}

/* ---- faults -------------------------------------------------------------------------------- */

static char *put_str(char *p, const char *s) {
    while (*s) *p++ = *s++;
    return p;
}

static char *put_hex(char *p, uint32_t v) {
    *p++ = '0';
    *p++ = 'x';
    for (int shift = 28; shift >= 0; shift -= 4) *p++ = "0123456789abcdef"[(v >> shift) & 15u];
    return p;
}

/* The first cause the fault status registers name. */
static const char *fault_reason(uint32_t cfsr, uint32_t hfsr) {
    static const struct {
        uint32_t bit;
        const char *what;
    } causes[] = {
        {1u << 0, "instruction access violation"}, {1u << 1, "data access violation"},
        {1u << 3, "unstacking error"},
        {1u << 5, "lazy FP stacking error"},       {1u << 8, "instruction bus error"},
        {1u << 9, "precise data bus error"},       {1u << 10, "imprecise data bus error"},
        {1u << 12, "stacking bus error"},          {1u << 11, "unstacking bus error"},
        {1u << 16, "undefined instruction"},       {1u << 17, "invalid state"},
        {1u << 18, "invalid exception return"},    {1u << 19, "no coprocessor"},
        {1u << 24, "unaligned access"},            {1u << 25, "division by zero"},
    };
    if (cfsr & (1u << 4)) return "stack overflow"; /* the stack sits at the bottom of RAM: a push
                                                       past it leaves the RAM region */
    for (unsigned i = 0; i < sizeof causes / sizeof causes[0]; i++)
        if (cfsr & causes[i].bit) return causes[i].what;
    if (hfsr & (1u << 1)) return "vector table read error";
    return "unknown cause";
}

__attribute__((noreturn, used)) void pk_fault_report(uint32_t exception, const uint32_t *frame) {
    static const char *const kinds[] = {"HardFault", "MemManage", "BusFault", "UsageFault"};
    uint32_t cfsr = SCB_CFSR, hfsr = SCB_HFSR;
    int is_fault = exception >= 3 && exception <= 6;
    char line[200], *p = line;
    p = put_str(p, "pk-fault: ");
    if (is_fault) {
        p = put_str(p, kinds[exception - 3]);
        p = put_str(p, " (");
        p = put_str(p, fault_reason(cfsr, hfsr));
        p = put_str(p, ")");
    } else {
        p = put_str(p, "unexpected exception (number ");
        p = put_hex(p, exception);
        p = put_str(p, ")");
    }
    /* the stacked frame is r0-r3, r12, lr, pc, xpsr: readable only if it lies inside the stack */
    int frame_ok = frame >= __stack_bottom && frame + 8 <= __stack_top;
    uint32_t addr = 0xFFFFFFFFu;
    if (cfsr & (1u << 7)) addr = SCB_MMFAR;       /* MMARVALID */
    else if (cfsr & (1u << 15)) addr = SCB_BFAR; /* BFARVALID */
    p = put_str(p, " pc=");
    p = put_hex(p, frame_ok ? frame[6] : 0xFFFFFFFFu);
    p = put_str(p, " addr=");
    p = put_hex(p, addr);
    p = put_str(p, " cfsr=");
    p = put_hex(p, cfsr);
    p = put_str(p, " hfsr=");
    p = put_hex(p, hfsr);
    *p = '\0';
    pk_print(line);
    pk_exit(is_fault ? PK_EXIT_FAULT + (int)exception : PK_EXIT_UNEXPECTED_IRQ);
}

/* Every exception enters here with its number in r0: back to the top of the stack (the frame
   pointer is kept for the report), then the C report, which never returns. */
__attribute__((naked, noreturn, used)) static void fault_common(void) {
    __asm__ volatile(
        "tst lr, #4\n"
        "ite eq\n"
        "mrseq r1, msp\n"
        "mrsne r1, psp\n"
        "ldr r2, =__stack_top\n"
        "mov sp, r2\n"
        "b pk_fault_report\n"
        ".ltorg\n");
}

#define PK_HANDLER(name, number)                                          \
    __attribute__((naked, noreturn, used)) static void name(void) {       \
        __asm__ volatile("movs r0, #" #number "\n b fault_common\n");     \
    }

PK_HANDLER(hardfault_handler, 3)
PK_HANDLER(memmanage_handler, 4)
PK_HANDLER(busfault_handler, 5)
PK_HANDLER(usagefault_handler, 6)

__attribute__((naked, noreturn, used)) static void other_handler(void) {
    __asm__ volatile(
        "mrs r0, ipsr\n"
        "b fault_common\n");
}

/* 16 system exceptions and the 32 interrupts of mps2-an386 (none is enabled: any that fires is a
   bug, reported as such) */
__attribute__((section(".vectors"), used)) static const void *const vectors[16 + 32] = {
    __stack_top,       pk_reset,          other_handler,      hardfault_handler,
    memmanage_handler, busfault_handler,  usagefault_handler, 0,
    0,                 0,                 0,                  other_handler,
    other_handler,     0,                 other_handler,      other_handler,
    [16 ... 47] = other_handler,
};

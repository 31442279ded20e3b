/* pk_sections.h: where the step's large static buffers go, by section name.

   PK_ARENA     the one arena (all activations): in the RAM region, inside the budget;
   PK_EXTERNAL  what the paper's setting keeps outside the budget (the gradients, when only
                activations count): on qemu-m4 the EXTERNAL region (the board's PSRAM), never RAM.
   Everything else follows C: const data to flash (.rodata), initialized data to RAM with its
   initial values in flash (.data), the rest to RAM (.bss).  The qemu-m4 linker script (m4.ld.in)
   accounts each separately; on the host both sections are ordinary zero-initialized .bss.
   Only zero-initialized (or uninitialized) objects may use them.  (No object's own section under
   -fdata-sections, .bss.<symbol>, can be named .bss.PK.arena: the names cannot clash.) */
#ifndef PK_SECTIONS_H
#define PK_SECTIONS_H

#define PK_ARENA __attribute__((section(".bss.PK.arena"), aligned(8)))
#define PK_EXTERNAL __attribute__((section(".bss.PK.external"), aligned(8)))

#endif

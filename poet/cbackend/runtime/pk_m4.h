/* pk_m4.h: what the Cortex-M4 startup (startup_m4.c) and the semihosting platform share, and what
   the Python runner (poet/cbackend/qemu_m4.py) reads back.

   Exit codes: the step's own (0 = success, small numbers = the runtime's errors) stay below 100; a
   fault exits with PK_EXIT_FAULT + the exception number, after one line on the console:

       pk-fault: <kind> (<reason>) pc=0x........ addr=0x........ cfsr=0x........ hfsr=0x........

   (addr is the faulting data address when the core latched one, else 0xffffffff; pc the stacked
   return address when the stack frame was readable, else 0xffffffff).  Successful or not, pk_exit
   first prints how much of the stack was ever used (the stack is painted at reset):

       pk-stack: used <bytes> of <bytes> */
#ifndef PK_M4_H
#define PK_M4_H

#include <stdint.h>

#define PK_EXIT_FAULT 100         /* + exception number: 103 HardFault ... 106 UsageFault */
#define PK_EXIT_UNEXPECTED_IRQ 99 /* an interrupt or system exception nothing enabled fired */
#define PK_EXIT_MPU_SETUP 98      /* the RAM region cannot be mapped with the MPU's 8 regions */

uint32_t pk_stack_used(void); /* bytes of the stack ever written (the paint is gone) */
uint32_t pk_stack_size(void);

#endif

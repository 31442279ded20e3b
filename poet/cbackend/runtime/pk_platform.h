/* pk_platform.h: what a target gives the step runtime.

   host:    stdio files in the run folder (pk_platform_host.c);
   qemu-m4: ARM semihosting (pk_platform_semihost.c), the emulator's host files standing in for the
            SD card; a board port implements the same few functions over its SD/flash driver.
   Files are named, relative to the run folder: "batch.bin" (the batches, read), "pages.bin" (the
   paging store, read and written), "out.bin" (results, written).  Offsets and sizes are bytes. */
#ifndef PK_PLATFORM_H
#define PK_PLATFORM_H

#include <stdint.h>

enum pk_file_mode { PK_READ = 0, PK_WRITE = 1, PK_RW = 2 };

int pk_platform_init(void);                                     /* 0 on success */
int pk_file_open(const char *name, int mode);                   /* a handle >= 0, or < 0 */
int pk_file_read(int f, uint32_t offset, void *dst, uint32_t n); /* 0 when all n bytes were read */
int pk_file_write(int f, uint32_t offset, const void *src, uint32_t n);
void pk_file_close(int f);
void pk_print(const char *line);                                /* a line for the user */
void pk_mark(uint32_t id);   /* instruction-count marker: never inlined; the counting plugin watches its
                                address and records the running count each time it executes */
void pk_exit(int code) __attribute__((noreturn));

#endif

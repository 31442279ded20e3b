/* pk_platform_host.c: pk_platform.h on a hosted machine (stdio files in the working folder, stdout
   for lines, exit() for the exit code).  pk_mark does nothing here: the host has no instruction
   counter; it is kept out of line so a profiler can still find it. */
#include <stdio.h>
#include <stdlib.h>

#include "pk_platform.h"

#define PK_HOST_FILES 8

static FILE *files[PK_HOST_FILES];

int pk_platform_init(void) { return 0; }

int pk_file_open(const char *name, int mode) {
    int f;
    for (f = 0; f < PK_HOST_FILES && files[f] != NULL; f++) {
    }
    if (f == PK_HOST_FILES) return -1;
    if (mode == PK_READ) {
        files[f] = fopen(name, "rb");
    } else if (mode == PK_WRITE) {
        files[f] = fopen(name, "wb");
    } else {
        files[f] = fopen(name, "r+b"); /* keep the file if it is there, else create it */
        if (files[f] == NULL) files[f] = fopen(name, "w+b");
    }
    return files[f] != NULL ? f : -1;
}

static FILE *file(int f) { return (f >= 0 && f < PK_HOST_FILES) ? files[f] : NULL; }

int pk_file_read(int f, uint32_t offset, void *dst, uint32_t n) {
    FILE *fp = file(f);
    if (fp == NULL || fseek(fp, (long)offset, SEEK_SET) != 0) return -1;
    return fread(dst, 1, n, fp) == n ? 0 : -1;
}

int pk_file_write(int f, uint32_t offset, const void *src, uint32_t n) {
    FILE *fp = file(f);
    if (fp == NULL || fseek(fp, (long)offset, SEEK_SET) != 0) return -1;
    return fwrite(src, 1, n, fp) == n ? 0 : -1;
}

void pk_file_close(int f) {
    FILE *fp = file(f);
    if (fp != NULL) fclose(fp);
    if (fp != NULL) files[f] = NULL;
}

void pk_print(const char *line) {
    fputs(line, stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

__attribute__((noinline)) void pk_mark(uint32_t id) {
    __asm__ volatile("" : : "r"(id) : "memory"); /* a real call the optimizer keeps */
}

void pk_exit(int code) {
    fflush(stdout);
    exit(code);
}

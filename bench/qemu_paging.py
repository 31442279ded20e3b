"""How fast does the emulated Cortex-M4 page through semihosting files, and at what instruction cost?

For each page size, one firmware writes ``--mib`` MiB to ``pages.bin`` one page at a time (offsets
out of order), reads it all back, and checks every word.  Measured:

* **MB/s**: wall-clock seconds of a firmware that only writes (or only reads back what the other
  wrote), minus those of the same firmware paging nothing (start-up, loading, exit); the median of
  ``--repeat`` runs.  Semihosting stands in for the board's SD card here: this is the
  emulator's host file speed, not a board's.
* **instructions per page**: from the instruction counter's marks around the write and the read
  loops (exact and repeatable), i.e. what a page_out or page_in costs the core besides the storage.

    python bench/qemu_paging.py                 # about 30 s
    python bench/qemu_paging.py --mib 16 --sizes 512,4096,65536

Results: docs/mcu.md, "Paging through semihosting".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from poet.cbackend import qemu_m4

FIRMWARE = r"""
#include <stdint.h>
#include "pk_platform.h"
#include "pk_sections.h"

static uint32_t page[PAGE / 4] PK_ARENA;

int main(void) {
    int f = pk_file_open("pages.bin", PK_RW);
    if (f < 0) return 2;
    for (uint32_t i = 0; i < PAGE / 4; i++) page[i] = i * 2654435761u;
    pk_mark(0);
    for (uint32_t k = 0; WRITE && k < NPAGES; k++)
        if (pk_file_write(f, ((k * 7u) % NPAGES) * PAGE, page, PAGE) != 0) return 3;
    pk_mark(1);
    for (uint32_t k = 0; READ && k < NPAGES; k++)
        if (pk_file_read(f, ((k * 11u + 3u) % NPAGES) * PAGE, page, PAGE) != 0) return 4;
    pk_mark(2);
    for (uint32_t i = 0; READ && i < PAGE / 4; i++) if (page[i] != i * 2654435761u) return 5;
    pk_file_close(f);
    return 0;
}
"""


def firmware(folder: Path, page: int, n_pages: int, write: bool, read: bool) -> qemu_m4.Build:
    folder.mkdir(parents=True, exist_ok=True)
    head = f"#define PAGE {page}u\n#define NPAGES {n_pages}u\n#define WRITE {int(write)}\n#define READ {int(read)}\n"
    (folder / "main.c").write_text(head + FIRMWARE)
    return qemu_m4.build(folder, page + 16384)


def seconds(build: qemu_m4.Build, folder: Path, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = qemu_m4.run(build, folder, timeout_s=600)
        times.append(time.perf_counter() - t0)
        if not out.ok:
            raise SystemExit(f"paging firmware failed: {out.problem()}\n{out.text}")
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=32.0, help="MiB paged out and in per page size")
    ap.add_argument("--sizes", default="512,4096,65536", help="page sizes in bytes")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    why = qemu_m4.missing()
    if why:
        raise SystemExit(why)
    print("| page (B) | pages | write MB/s | read MB/s | instructions per page_out | per page_in |")
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for page in (int(s) for s in args.sizes.split(",")):
            n = max(1, int(args.mib * (1 << 20)) // page)
            runs = {}
            for name, (w, r) in {"none": (0, 0), "write": (1, 0), "read": (0, 1), "both": (1, 1)}.items():
                folder = Path(tmp) / f"{page}-{name}"
                runs[name] = (firmware(folder, page, n, w, r), folder)
            counted = qemu_m4.run(*runs["both"], count=True)  # also checks every word read back
            if not counted.ok:
                raise SystemExit(f"paging firmware failed: {counted.problem()}")
            (runs["read"][1] / "pages.bin").write_bytes((runs["both"][1] / "pages.bin").read_bytes())
            base = seconds(*runs["none"], args.repeat)
            t_write = seconds(*runs["write"], args.repeat) - base
            t_read = seconds(*runs["read"], args.repeat) - base
            m, nbytes = counted.marks, n * page
            print(
                f"| {page:,} | {n:,} | {nbytes / t_write / 1e6:,.0f} | {nbytes / t_read / 1e6:,.0f} "
                f"| {(m[1] - m[0]) / n:,.0f} | {(m[2] - m[1]) / n:,.0f} |"
            )


if __name__ == "__main__":
    main()

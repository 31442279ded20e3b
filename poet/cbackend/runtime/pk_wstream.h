/* pk_wstream.h: linear layers whose weights and weight gradients live in storage (--weights stream).

   A layer's parameters are one block in the weight file: W (out x in, row-major) then b (out), float32;
   its gradient is the block at the same offset in the gradient file.  Every kernel moves that block
   through a staging buffer of `staging_bytes` (a multiple of 4), one transfer per chunk, so the
   bytes and transfers match what poet.graph.weight_traffic prices: a forward or input-gradient
   computation reads the block; a weight-gradient computation writes its block (first) or reads, adds
   and writes it back; the SGD update reads weights and gradients in chunks of half the buffer each
   and writes the weights.  Counters record what was moved. */
#ifndef PK_WSTREAM_H
#define PK_WSTREAM_H

#include <stdint.h>

int pk_ws_linear_forward(int wfile, uint32_t offset, int n, int in, int out, const float *x, float *y,
                         float *staging, uint32_t staging_bytes);
int pk_ws_linear_input_grad(int wfile, uint32_t offset, int n, int in, int out, const float *dy, float *dx,
                            float *staging, uint32_t staging_bytes);
int pk_ws_linear_weight_grad(int gfile, uint32_t offset, int n, int in, int out, const float *x, const float *dy,
                             int first, float *staging, uint32_t staging_bytes);
int pk_ws_sgd(int wfile, int gfile, uint32_t offset, uint32_t nbytes, float lr, float *staging,
              uint32_t staging_bytes);
/* Convolution (square kernel k, stride, padding; no dilation or groups), NCHW float32, its block W
   (cout x cin x k x k) then b (cout, if has_bias).  geometry = {n, cin, h, w, cout, hout, wout, k, stride,
   pad, has_bias}.  The forward computes output rows r0..r1 into y (n x cout x (r1-r0) x wout); the input
   gradient computes input rows r0..r1 into dx (n x cin x (r1-r0) x w); the weight gradient adds what
   output rows r0..r1 of dy (n x cout x (r1-r0) x wout) contribute. */
int pk_ws_conv2d_forward(int wfile, uint32_t offset, const int32_t *geometry, int r0, int r1, const float *x,
                         float *y, float *staging, uint32_t staging_bytes);
int pk_ws_conv2d_input_grad(int wfile, uint32_t offset, const int32_t *geometry, int r0, int r1, const float *dy,
                            float *dx, float *staging, uint32_t staging_bytes);
int pk_ws_conv2d_weight_grad(int gfile, uint32_t offset, const int32_t *geometry, int r0, int r1, const float *x,
                             const float *dy, int first, float *staging, uint32_t staging_bytes);
/* The compiled step's store (pk_main.c binds it; the zoo kernels of pk_wstream_zoo.c stream through it):
   the weight file, the gradient file and the staging buffer, whose bytes are the schedule's fixed RAM. */
void pk_ws_bind(int wfile, int gfile, float *staging, uint32_t staging_bytes);
int pk_ws_wfile(void);
int pk_ws_gfile(void);
float *pk_ws_staging(uint32_t *staging_bytes);
/* one counted transfer of n bytes at byte off of file f: 0, or PK_EIO */
int pk_ws_read(int f, uint32_t off, void *dst, uint32_t n);
int pk_ws_write(int f, uint32_t off, const void *src, uint32_t n);
void pk_ws_counters(uint64_t out[4]); /* read bytes, written bytes, reads, writes since the last reset */
void pk_ws_reset(void);

#endif

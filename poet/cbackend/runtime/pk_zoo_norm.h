/* pk_zoo_norm.h: BatchNorm one channel at a time (kernels_zoo_norm.c), shared with the kernels whose
   parameters are streamed from storage (pk_wstream_zoo.c), so both compute the same bits per channel.
   st / fst / bst: the forward / backward statistics (C, 2) or PK_NONE (computed over rows [0, h)). */
#ifndef PK_ZOO_NORM_H
#define PK_ZOO_NORM_H

#include "pk_zoo.h"

/* rows [lo, lo + y rows) of channel c of y = (x - mean) / std * gamma + beta */
int pkz_bn_forward_channel(const pk_tensor *st, const pkz_src *x, const pk_tensor *y, int32_t c, int32_t lo,
                           int32_t h, double eps, float gamma, float beta);
int pkz_bn_check(const pk_tensor *st, const pkz_src *x, const pk_tensor *y);
/* rows of channel c of dx (when not PK_NONE), and the channel's sums over all rows: sum dy, sum dy * xhat */
int pkz_bn_grad_channel(const pk_tensor *fst, const pk_tensor *bst, const pkz_src *dy, const pkz_src *x,
                        const pk_tensor *dx, int32_t c, int32_t lo, int32_t h, double eps, float gamma, double *sdy,
                        double *sdyx);
int pkz_bn_grad_check(const pk_tensor *fst, const pk_tensor *bst, const pkz_src *dy, const pkz_src *x,
                      const pk_tensor *dx);
/* sum dy and sum dy * xhat of channel c over rows [lo, hi) (a tile's share of the parameter gradients) */
int pkz_bn_tile_sums(const pk_tensor *fst, const pkz_src *dy, const pkz_src *x, int32_t c, int32_t lo, int32_t hi,
                     int32_t h, double eps, double *sdy, double *sdyx);

#endif

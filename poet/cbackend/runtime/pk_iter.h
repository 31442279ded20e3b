/* pk_iter.h: walking same-shaped strided views element by element (an odometer over the first
   view's shape; every view advances by its own strides, so broadcast dimensions have stride 0).
   The body sees typed pointers to the current elements.  Used by elementwise kernels. */
#ifndef PK_ITER_H
#define PK_ITER_H

#include "pk.h"

#define PK_ODOMETER_(T0, ADVANCE, RESET)                                  \
    for (int d_ = (T0)->ndim - 1; d_ >= 0; d_--) {                        \
        if (++idx_[d_] < (T0)->size[d_]) { ADVANCE; break; }              \
        RESET;                                                            \
        idx_[d_] = 0;                                                     \
    }

#define PK_STEP_(P, T) ((P) += (T)->stride[d_])
#define PK_BACK_(P, T) ((P) -= (int64_t)(T)->stride[d_] * ((T)->size[d_] - 1))

/* PK_FOR2(out, in, y, x, body): float *y over out, const float *x over in */
#define PK_FOR2(TA, TB, A, B, BODY)                                                           \
    do {                                                                                      \
        const pk_tensor *ta_ = (TA), *tb_ = (TB);                                             \
        int32_t idx_[PK_MAXDIM] = {0};                                                        \
        float *A = (float *)ta_->data;                                                        \
        const float *B = (const float *)tb_->data;                                            \
        for (int64_t k_ = pk_numel(ta_); k_ > 0; k_--) {                                      \
            BODY;                                                                             \
            PK_ODOMETER_(ta_, (PK_STEP_(A, ta_), PK_STEP_(B, tb_)),                           \
                         (PK_BACK_(A, ta_), PK_BACK_(B, tb_)))                                \
        }                                                                                     \
    } while (0)

/* PK_FOR3(out, in1, in2, y, a, b, body) */
#define PK_FOR3(TA, TB, TC, A, B, C, BODY)                                                    \
    do {                                                                                      \
        const pk_tensor *ta_ = (TA), *tb_ = (TB), *tc_ = (TC);                                \
        int32_t idx_[PK_MAXDIM] = {0};                                                        \
        float *A = (float *)ta_->data;                                                        \
        const float *B = (const float *)tb_->data;                                            \
        const float *C = (const float *)tc_->data;                                            \
        for (int64_t k_ = pk_numel(ta_); k_ > 0; k_--) {                                      \
            BODY;                                                                             \
            PK_ODOMETER_(ta_, (PK_STEP_(A, ta_), PK_STEP_(B, tb_), PK_STEP_(C, tc_)),         \
                         (PK_BACK_(A, ta_), PK_BACK_(B, tb_), PK_BACK_(C, tc_)))              \
        }                                                                                     \
    } while (0)

#endif

/* CUDA_CHECK, CUBLAS_CHECK and CUDNN_CHECK: a failed CUDA runtime, cuBLAS or cuDNN call is fatal,
 * reported through sdp_fatal (one line, then exit or MPI_Abort) with the call's file, line and
 * error string.
 *
 * Usable from C and from CUDA C++. sdp/check.h is a C header whose sdp_fatal is declared
 * _Noreturn, which C++ front ends (nvcc's included) do not accept, and without extern "C"; for C++
 * it is included here with C linkage and _Noreturn spelt [[noreturn]]. Include this header, not
 * sdp/check.h, from .cu files. */
#ifndef SDP_CUDA_CHECK_H
#define SDP_CUDA_CHECK_H

#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#ifdef __cplusplus
#define _Noreturn [[noreturn]]
extern "C" {
#include "sdp/check.h"
}
#undef _Noreturn
#else
#include "sdp/check.h"
#endif

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t sdp_cuda_err_ = (call);                                                        \
        if (sdp_cuda_err_ != cudaSuccess)                                                          \
            sdp_fatal("CUDA error at %s:%d: %s (%s): check the device and the CUDA driver",        \
                      __FILE__, __LINE__, cudaGetErrorString(sdp_cuda_err_),                       \
                      cudaGetErrorName(sdp_cuda_err_));                                            \
    } while (0)

#define CUBLAS_CHECK(call)                                                                         \
    do {                                                                                           \
        cublasStatus_t sdp_cublas_st_ = (call);                                                    \
        if (sdp_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                               \
            sdp_fatal("cuBLAS error at %s:%d: %s (%s): check the sizes and strides passed",        \
                      __FILE__, __LINE__, cublasGetStatusString(sdp_cublas_st_),                   \
                      cublasGetStatusName(sdp_cublas_st_));                                        \
    } while (0)

#define CUDNN_CHECK(call)                                                                          \
    do {                                                                                           \
        cudnnStatus_t sdp_cudnn_st_ = (call);                                                      \
        if (sdp_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                                 \
            sdp_fatal("cuDNN error at %s:%d: %s: check the shapes passed and the cuDNN install",   \
                      __FILE__, __LINE__, cudnnGetErrorString(sdp_cudnn_st_));                     \
    } while (0)

#endif

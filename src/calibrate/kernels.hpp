#pragma once
// The few CUDA kernels calibration needs that cuBLAS/cudart do not provide, behind plain C++
// launchers so the host code is compiled by the C++ compiler (kernels.cu is the only nvcc file).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace meshplan::calibrate::kernels {

// Element type codes for fill_uniform.
enum class Elem : int { f32 = 0, f16 = 1, bf16 = 2, fp8_e4m3 = 3 };

// Pseudo-random values in [-1, 1) (hash of index and seed): GEMMs on zeros draw less power and
// run faster than on real data.
cudaError_t fill_uniform(void* data, std::size_t count, Elem elem, std::uint32_t seed, cudaStream_t stream);
// a[i] = b[i] + scalar * c[i] (STREAM triad).
cudaError_t triad(float* a, const float* b, const float* c, float scalar, std::size_t count, cudaStream_t stream);
// dst[i] = scalar * src[i]: the small element-wise kernel timed back to back for launch overhead.
cudaError_t scale(float* dst, const float* src, float scalar, std::size_t count, cudaStream_t stream);
// Row-wise causal softmax in place over `rows` rows of `cols` bf16 scores; row r of each
// seq x seq block masks columns > r % cols. The attention proxy's forward softmax.
cudaError_t causal_softmax_bf16(void* scores, std::size_t rows, int cols, float scale, cudaStream_t stream);
// dS = P * (dP - rowsum(dP * P)) in place in dP: the softmax backward of the proxy.
cudaError_t softmax_backward_bf16(const void* probs, void* dprobs, std::size_t rows, int cols, cudaStream_t stream);

}  // namespace meshplan::calibrate::kernels

// Calibration kernels (see kernels.hpp). Grid-stride loops, one block per row for the softmaxes.
#include "kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

namespace meshplan::calibrate::kernels {
namespace {

constexpr int kThreads = 256;

__device__ float hash_uniform(std::size_t i, std::uint32_t seed) {
  std::uint32_t x = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ static_cast<std::uint32_t>(i >> 32) ^ seed;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return static_cast<float>(x) * (2.0f / 4294967296.0f) - 1.0f;
}

__global__ void fill_kernel(void* data, std::size_t count, int elem, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float v = hash_uniform(i, seed);
    switch (elem) {
      case 0: static_cast<float*>(data)[i] = v; break;
      case 1: static_cast<__half*>(data)[i] = __float2half(v); break;
      case 2: static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16(v); break;
      default: static_cast<__nv_fp8_e4m3*>(data)[i] = __nv_fp8_e4m3(v); break;
    }
  }
}

__global__ void triad_kernel(float* a, const float* b, const float* c, float s, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    a[i] = b[i] + s * c[i];
}

__global__ void scale_kernel(float* dst, const float* src, float s, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = s * src[i];
}

__device__ float block_reduce(float v, bool is_max) {
  __shared__ float shared[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kThreads / 32 ? shared[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, other) : v + other;
    }
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float out = shared[0];
  __syncthreads();
  return out;
}

__global__ void causal_softmax_kernel(__nv_bfloat16* s, int cols, float scale) {
  const std::size_t row = blockIdx.x;
  const int limit = static_cast<int>(row % static_cast<std::size_t>(cols));  // query index in its block
  __nv_bfloat16* r = s + row * static_cast<std::size_t>(cols);
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= limit; j += blockDim.x) mx = fmaxf(mx, scale * __bfloat162float(r[j]));
  mx = block_reduce(mx, true);
  float sum = 0;
  for (int j = threadIdx.x; j <= limit; j += blockDim.x) sum += __expf(scale * __bfloat162float(r[j]) - mx);
  sum = block_reduce(sum, false);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < cols; j += blockDim.x)
    r[j] = __float2bfloat16(j <= limit ? __expf(scale * __bfloat162float(r[j]) - mx) * inv : 0.0f);
}

__global__ void softmax_backward_kernel(const __nv_bfloat16* p, __nv_bfloat16* dp, int cols) {
  const std::size_t off = blockIdx.x * static_cast<std::size_t>(cols);
  float dot = 0;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) dot += __bfloat162float(p[off + j]) * __bfloat162float(dp[off + j]);
  dot = block_reduce(dot, false);
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    const float pj = __bfloat162float(p[off + j]);
    dp[off + j] = __float2bfloat16(pj * (__bfloat162float(dp[off + j]) - dot));
  }
}

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 16 ? (blocks == 0 ? 1 : blocks) : 65535 * 16);
}

}  // namespace

cudaError_t fill_uniform(void* data, std::size_t count, Elem elem, std::uint32_t seed, cudaStream_t stream) {
  fill_kernel<<<grid_for(count), kThreads, 0, stream>>>(data, count, static_cast<int>(elem), seed);
  return cudaGetLastError();
}

cudaError_t triad(float* a, const float* b, const float* c, float scalar, std::size_t count, cudaStream_t stream) {
  triad_kernel<<<grid_for(count), kThreads, 0, stream>>>(a, b, c, scalar, count);
  return cudaGetLastError();
}

cudaError_t scale(float* dst, const float* src, float scalar, std::size_t count, cudaStream_t stream) {
  scale_kernel<<<grid_for(count), kThreads, 0, stream>>>(dst, src, scalar, count);
  return cudaGetLastError();
}

cudaError_t causal_softmax_bf16(void* scores, std::size_t rows, int cols, float scale, cudaStream_t stream) {
  causal_softmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(scores), cols,
                                                                             scale);
  return cudaGetLastError();
}

cudaError_t softmax_backward_bf16(const void* probs, void* dprobs, std::size_t rows, int cols, cudaStream_t stream) {
  softmax_backward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(probs), static_cast<__nv_bfloat16*>(dprobs), cols);
  return cudaGetLastError();
}

}  // namespace meshplan::calibrate::kernels

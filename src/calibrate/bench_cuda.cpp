// The CUDA microbenchmarks of `meshplan calibrate` (docs/calibration.md "What is measured").
// Every timing is CUDA events around the work on one stream, after warm-up, as the median of
// repeats; GEMMs flush L2 before each timed run so a small GEMM does not find its operands cached.
// NCCL comes from dlopen (nccl_dl.hpp); a machine without it still gets every single-GPU series.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "calibrate/cuda_bench.hpp"
#include "calibrate/fit_least_squares.hpp"
#include "calibrate/kernels.hpp"
#include "calibrate/layer_shapes.hpp"
#include "calibrate/nccl_dl.hpp"
#include "calibrate/rendezvous.hpp"
#include "spec/model_loader.hpp"

namespace meshplan::calibrate {
namespace {

constexpr double kKiB = 1024.0, kMiB = kKiB * 1024.0, kGiB = kMiB * 1024.0;
constexpr std::size_t kWorkspaceBytes = 64ull << 20;  // cuBLASLt workspace; what PyTorch gives Hopper
constexpr std::int64_t kTokens = 4096;                 // tokens per micro-batch for the layer shapes
constexpr std::int64_t kAttentionTokens = 16384;       // FlashAttention's benchmark: batch = 16k / seqlen
constexpr std::int64_t kAttentionHidden = 2048;        // ... at hidden 2048 (flash-attention README)

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw std::runtime_error("CUDA " + what + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cuBLAS " + what + ": status " + std::to_string(static_cast<int>(s)));
}

struct DeviceBuffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  explicit DeviceBuffer(std::size_t n) : bytes(n) { check(cudaMalloc(&p, std::max<std::size_t>(n, 256)), fmt::format("cudaMalloc({} B)", n)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(p); }
};

struct PinnedBuffer {
  void* p = nullptr;
  explicit PinnedBuffer(std::size_t n) { check(cudaMallocHost(&p, n), fmt::format("cudaMallocHost({} B)", n)); }
  ~PinnedBuffer() { cudaFreeHost(p); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
};

struct EventPair {
  cudaEvent_t start{}, stop{};
  EventPair() {
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  double seconds() const {
    float ms = 0;
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return 1e-3 * ms;
  }
};

// Median of `reps` timed runs of `body` (after `warmup` untimed ones); `before` runs outside the
// timed region (the L2 flush).
double time_median(cudaStream_t s, int warmup, int reps, const std::function<void()>& body,
                   const std::function<void()>& before = {}) {
  for (int i = 0; i < warmup; ++i) body();
  EventPair ev;
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    if (before) before();
    check(cudaEventRecord(ev.start, s), "cudaEventRecord");
    body();
    check(cudaEventRecord(ev.stop, s), "cudaEventRecord");
    t.push_back(ev.seconds());
  }
  return median(t);
}

std::string version_string(int code) {  // CUDA's 1000 * major + 10 * minor
  return fmt::format("{}.{}", code / 1000, code % 1000 / 10);
}

struct Bench {
  const BenchOptions& opt;
  int device = 0;
  cudaDeviceProp prop{};
  cudaStream_t stream{};
  cublasLtHandle_t lt{};
  cublasHandle_t blas{};
  std::unique_ptr<DeviceBuffer> flush, workspace;
  unsigned flush_value = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  Measurements m;

  Bench(const BenchOptions& o, int dev) : opt(o), device(dev) {
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cublasLtCreate(&lt), "cublasLtCreate");
    check(cublasCreate(&blas), "cublasCreate");
    check(cublasSetStream(blas, stream), "cublasSetStream");
    // Twice the L2, so a memset evicts every operand line of the previous run.
    flush = std::make_unique<DeviceBuffer>(std::max<std::size_t>(2 * static_cast<std::size_t>(prop.l2CacheSize), 64 << 20));
    workspace = std::make_unique<DeviceBuffer>(kWorkspaceBytes);
    check(cublasSetWorkspace(blas, workspace->p, kWorkspaceBytes), "cublasSetWorkspace");
  }
  ~Bench() {
    cublasDestroy(blas);
    cublasLtDestroy(lt);
    cudaStreamDestroy(stream);
  }
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  void progress(const std::string& s) const {
    if (!opt.progress) return;
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    opt.progress(fmt::format("[{:6.1f} s] {}", t, s));
  }
  void flush_l2() { check(cudaMemsetAsync(flush->p, static_cast<int>(++flush_value & 0xff), flush->bytes, stream), "L2 flush"); }
  int warmup() const { return opt.quick ? 2 : 3; }
  int reps() const { return opt.quick ? 5 : 9; }
  bool has_fp8() const { return prop.major > 8 || (prop.major == 8 && prop.minor >= 9); }
};

// ---------------------------------------------------------------- device info

void describe_device(Bench& b) {
  DeviceInfo& d = b.m.device;
  d.name = b.prop.name;
  d.compute_capability = fmt::format("{}.{}", b.prop.major, b.prop.minor);
  d.sm_count = b.prop.multiProcessorCount;
  d.memory_bytes = static_cast<double>(b.prop.totalGlobalMem);
  d.l2_bytes = b.prop.l2CacheSize;
  int khz = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, b.device) == cudaSuccess) d.sm_clock_mhz = khz / 1000.0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, b.device) == cudaSuccess) d.memory_clock_mhz = khz / 1000.0;
  int v = 0;
  if (cudaDriverGetVersion(&v) == cudaSuccess) d.driver_version = "CUDA " + version_string(v) + " driver API";
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) d.cuda_runtime_version = version_string(v);
  const std::size_t lt = cublasLtGetVersion();
  d.cublas_version = fmt::format("{}.{}.{}", lt / 10000, lt % 10000 / 100, lt % 100);
}

// ---------------------------------------------------------------- GEMM (cuBLASLt)

struct LtTypes {
  cudaDataType_t ab, cd;
  cublasComputeType_t compute;
  kernels::Elem fill;
  std::size_t ab_bytes, cd_bytes;
};

LtTypes lt_types(Dtype d) {
  switch (d) {
    case Dtype::bf16: return {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, kernels::Elem::bf16, 2, 2};
    case Dtype::fp16: return {CUDA_R_16F, CUDA_R_16F, CUBLAS_COMPUTE_32F, kernels::Elem::f16, 2, 2};
    case Dtype::tf32: return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, kernels::Elem::f32, 4, 4};
    case Dtype::fp32: return {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, kernels::Elem::f32, 4, 4};
    // FP8 GEMMs read e4m3 and write bf16 (Transformer Engine's default).
    case Dtype::fp8: return {CUDA_R_8F_E4M3, CUDA_R_16BF, CUBLAS_COMPUTE_32F, kernels::Elem::fp8_e4m3, 1, 2};
    case Dtype::fp4: case Dtype::fp8_block: case Dtype::mxfp8: break;
  }
  throw std::runtime_error("no cuBLASLt GEMM for this dtype");
}

// Owns the cuBLASLt descriptors of one problem.
struct LtProblem {
  cublasLtMatmulDesc_t op{};
  cublasLtMatrixLayout_t a{}, b{}, c{};
  cublasLtMatmulPreference_t pref{};
  cublasLtMatmulHeuristicResult_t algo{};
  bool ok = false;

  LtProblem(cublasLtHandle_t lt, const LtTypes& t, const GemmShape& g) {
    // TN layout (A transposed): the one FP8 requires, used for every dtype so all are alike.
    check(cublasLtMatmulDescCreate(&op, t.compute, CUDA_R_32F), "MatmulDescCreate");
    const cublasOperation_t trans = CUBLAS_OP_T, none = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans, sizeof trans), "TRANSA");
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof none), "TRANSB");
    const auto u = [](std::int64_t x) { return static_cast<std::uint64_t>(x); };
    check(cublasLtMatrixLayoutCreate(&a, t.ab, u(g.k), u(g.m), g.k), "layout A");
    check(cublasLtMatrixLayoutCreate(&b, t.ab, u(g.k), u(g.n), g.k), "layout B");
    check(cublasLtMatrixLayoutCreate(&c, t.cd, u(g.m), u(g.n), g.m), "layout C");
    check(cublasLtMatmulPreferenceCreate(&pref), "PreferenceCreate");
    const std::uint64_t ws = kWorkspaceBytes;
    check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws), "workspace pref");
    int returned = 0;
    ok = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, 1, &algo, &returned) == CUBLAS_STATUS_SUCCESS &&
         returned > 0;
  }
  ~LtProblem() {
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
  }
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;
};

struct GemmBuffers {
  std::unique_ptr<DeviceBuffer> a, b, c;
};

void run_lt(Bench& bench, const LtProblem& p, const GemmBuffers& buf) {
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasLtMatmul(bench.lt, p.op, &alpha, buf.a->p, p.a, buf.b->p, p.b, &beta, buf.c->p, p.c, buf.c->p, p.c,
                       &p.algo.algo, bench.workspace->p, kWorkspaceBytes, bench.stream),
        "cublasLtMatmul");
}

// Median seconds of one GEMM, or a negative value when cuBLASLt has no algorithm for it.
double time_gemm(Bench& bench, Dtype d, const GemmShape& g, const GemmBuffers& buf, bool flush) {
  const LtProblem p(bench.lt, lt_types(d), g);
  if (!p.ok) return -1.0;
  return time_median(bench.stream, bench.warmup(), bench.reps(), [&] { run_lt(bench, p, buf); },
                     flush ? std::function<void()>([&] { bench.flush_l2(); }) : std::function<void()>());
}

GemmBuffers gemm_buffers(Bench& bench, Dtype d, const std::vector<GemmShape>& shapes) {
  const LtTypes t = lt_types(d);
  std::size_t a = 0, b = 0, c = 0;
  for (const GemmShape& g : shapes) {
    a = std::max(a, static_cast<std::size_t>(g.m * g.k));
    b = std::max(b, static_cast<std::size_t>(g.k * g.n));
    c = std::max(c, static_cast<std::size_t>(g.m * g.n));
  }
  GemmBuffers buf{std::make_unique<DeviceBuffer>(a * t.ab_bytes), std::make_unique<DeviceBuffer>(b * t.ab_bytes),
                  std::make_unique<DeviceBuffer>(c * t.cd_bytes)};
  check(kernels::fill_uniform(buf.a->p, a, t.fill, 1u, bench.stream), "fill A");
  check(kernels::fill_uniform(buf.b->p, b, t.fill, 2u, bench.stream), "fill B");
  check(cudaStreamSynchronize(bench.stream), "fill");
  return buf;
}

std::vector<std::int64_t> pow2(std::int64_t lo, std::int64_t hi) {
  std::vector<std::int64_t> v;
  for (std::int64_t x = lo; x <= hi; x *= 2) v.push_back(x);
  return v;
}

void bench_gemm(Bench& bench) {
  std::vector<ModelSpec> models;
  const std::vector<std::string> names =
      bench.opt.quick ? std::vector<std::string>{"llama3.1-8b", "llama3.1-70b"} : list_models();
  for (const std::string& n : names) models.push_back(load_model(n));
  const std::vector<LabelledGemm> layers =
      unique_layer_gemms(models, bench.opt.quick ? std::vector<int>{1, 2, 4, 8} : std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8}, kTokens);

  std::vector<Dtype> dtypes{Dtype::bf16, Dtype::fp16, Dtype::tf32, Dtype::fp32};
  if (bench.has_fp8()) dtypes.push_back(Dtype::fp8);
  else bench.m.notes.push_back(fmt::format("fp8 GEMMs skipped: compute capability {}.{} < 8.9", bench.prop.major, bench.prop.minor));

  for (Dtype d : dtypes) {
    const bool main_dtype = d == Dtype::bf16 || d == Dtype::fp8;
    std::vector<LabelledGemm> plan;
    // Square sizes for every dtype; the full (M, N, K) grid for the training dtypes in full mode,
    // a coarse one otherwise; the models' layer shapes for bf16 and fp8.
    for (std::int64_t s : pow2(256, 16384)) plan.push_back({{s, s, s, 1}, "square"});
    const std::vector<std::int64_t> axis = (!bench.opt.quick && main_dtype) ? pow2(256, 16384)
                                          : bench.opt.quick ? std::vector<std::int64_t>{1024, 4096, 16384}
                                                            : std::vector<std::int64_t>{256, 1024, 4096, 16384};
    if (d == Dtype::bf16 || !bench.opt.quick)
      for (std::int64_t mm : axis)
        for (std::int64_t nn : axis)
          for (std::int64_t kk : axis)
            if (!(mm == nn && nn == kk)) plan.push_back({{mm, nn, kk, 1}, "grid"});
    if (d == Dtype::bf16 || (d == Dtype::fp8 && !bench.opt.quick))
      for (const LabelledGemm& g : layers) plan.push_back(g);
    // FP8 tensor-core GEMMs need every dimension a multiple of 16.
    if (d == Dtype::fp8)
      std::erase_if(plan, [](const LabelledGemm& g) { return g.shape.m % 16 || g.shape.n % 16 || g.shape.k % 16; });

    std::vector<GemmShape> shapes;
    for (const LabelledGemm& g : plan) shapes.push_back(g.shape);
    const GemmBuffers buf = gemm_buffers(bench, d, shapes);
    bench.progress(fmt::format("GEMM {}: {} shapes", to_string(d), plan.size()));
    int skipped = 0;
    for (const LabelledGemm& g : plan) {
      const double s = time_gemm(bench, d, g.shape, buf, true);
      if (s <= 0) {
        ++skipped;
        continue;
      }
      bench.m.gemm.push_back({d, g.shape, s, g.label});
    }
    if (skipped > 0) bench.m.notes.push_back(fmt::format("GEMM {}: cuBLASLt had no algorithm for {} shapes", to_string(d), skipped));
  }
}

// ---------------------------------------------------------------- attention proxy

void bench_attention(Bench& bench) {
  const std::vector<std::int64_t> seqs = bench.opt.quick ? std::vector<std::int64_t>{1024, 2048, 4096} : pow2(512, 8192);
  const std::vector<std::int64_t> head_dims = bench.opt.quick ? std::vector<std::int64_t>{128} : std::vector<std::int64_t>{64, 128};
  bench.m.notes.push_back(
      "attention is a proxy (cuBLAS batched GEMMs + a causal softmax kernel, scores materialised in HBM), not a fused "
      "kernel; FLOPs counted like FlashAttention (causal half, backward 2.5 x forward)");
  for (std::int64_t hd : head_dims) {
    const std::int64_t heads = kAttentionHidden / hd;
    for (std::int64_t seq : seqs) {
      const std::int64_t batch = kAttentionTokens / seq;
      const std::int64_t bh = batch * heads;
      const std::size_t act = static_cast<std::size_t>(kAttentionTokens * kAttentionHidden) * 2;
      const std::size_t scores = static_cast<std::size_t>(bh * seq * seq) * 2;
      std::size_t free_b = 0, total_b = 0;
      check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
      if (2 * scores + 8 * act > free_b * 9 / 10) {
        bench.m.notes.push_back(fmt::format("attention hd{} seq {}: needs {:.1f} GiB, skipped", hd, seq, (2.0 * scores + 8.0 * act) / kGiB));
        continue;
      }
      DeviceBuffer q(act), k(act), v(act), o(act), dout(act), dq(act), dk(act), dv(act), s(scores), dp(scores);
      for (DeviceBuffer* x : {&q, &k, &v, &dout})
        check(kernels::fill_uniform(x->p, act / 2, kernels::Elem::bf16, 3u, bench.stream), "fill");
      const float one = 1.0f, zero = 0.0f;
      const long long sd = seq * hd, ss = seq * seq;
      const int n_bh = static_cast<int>(bh), s_ = static_cast<int>(seq), d_ = static_cast<int>(hd);
      auto bgemm = [&](cublasOperation_t ta, cublasOperation_t tb, int m_, int n_, int k_, const void* a, int lda,
                       long long sa, const void* b_, int ldb, long long sb, void* c, int ldc, long long sc) {
        check(cublasGemmStridedBatchedEx(bench.blas, ta, tb, m_, n_, k_, &one, a, CUDA_R_16BF, lda, sa, b_, CUDA_R_16BF,
                                         ldb, sb, &zero, c, CUDA_R_16BF, ldc, sc, n_bh, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT),
              "cublasGemmStridedBatchedEx");
      };
      const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const std::size_t rows = static_cast<std::size_t>(bh * seq);
      auto step = [&] {
        // forward: S = Q K^T, P = softmax(S), O = P V
        bgemm(CUBLAS_OP_T, CUBLAS_OP_N, s_, s_, d_, k.p, d_, sd, q.p, d_, sd, s.p, s_, ss);
        check(kernels::causal_softmax_bf16(s.p, rows, s_, softmax_scale, bench.stream), "softmax");
        bgemm(CUBLAS_OP_N, CUBLAS_OP_N, d_, s_, s_, v.p, d_, sd, s.p, s_, ss, o.p, d_, sd);
        // backward: dV = P^T dO, dP = dO V^T, dS = softmax'(dP), dQ = dS K, dK = dS^T Q
        bgemm(CUBLAS_OP_N, CUBLAS_OP_T, d_, s_, s_, dout.p, d_, sd, s.p, s_, ss, dv.p, d_, sd);
        bgemm(CUBLAS_OP_T, CUBLAS_OP_N, s_, s_, d_, v.p, d_, sd, dout.p, d_, sd, dp.p, s_, ss);
        check(kernels::softmax_backward_bf16(s.p, dp.p, rows, s_, bench.stream), "softmax backward");
        bgemm(CUBLAS_OP_N, CUBLAS_OP_N, d_, s_, s_, k.p, d_, sd, dp.p, s_, ss, dq.p, d_, sd);
        bgemm(CUBLAS_OP_N, CUBLAS_OP_T, d_, s_, s_, q.p, d_, sd, dp.p, s_, ss, dk.p, d_, sd);
      };
      const double t = time_median(bench.stream, 1, bench.opt.quick ? 3 : 5, step);
      AttentionSample a;
      a.kernel = "bgemm-softmax-proxy";
      a.fused = false;
      a.pass = "fwd+bwd";
      a.dtype = Dtype::bf16;
      a.shape = {batch, heads, heads, seq, seq, hd, true};
      a.seconds = t;
      bench.m.attention.push_back(a);
      bench.progress(fmt::format("attention proxy hd{} seq {}: {:.3f} ms", hd, seq, t * 1e3));
    }
  }
}

// ---------------------------------------------------------------- HBM, launch, host links

void bench_memory(Bench& bench) {
  std::size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  // Up to 8 GiB per buffer (full), 2 GiB (quick), and never more than a third of free memory.
  const double cap = std::min(bench.opt.quick ? 2 * kGiB : 8 * kGiB, static_cast<double>(free_b) / 3.0);
  {
    const auto max_bytes = static_cast<std::size_t>(std::exp2(std::floor(std::log2(cap))));
    DeviceBuffer src(max_bytes), dst(max_bytes);
    check(cudaMemsetAsync(src.p, 1, max_bytes, bench.stream), "memset");
    for (double bytes = 16 * kMiB; bytes <= static_cast<double>(max_bytes); bytes *= 2) {
      const auto n = static_cast<std::size_t>(bytes);
      const double t = time_median(bench.stream, 2, bench.reps(), [&] {
        check(cudaMemcpyAsync(dst.p, src.p, n, cudaMemcpyDeviceToDevice, bench.stream), "memcpy D2D");
      });
      bench.m.hbm.push_back({"copy", 2.0 * bytes, t});  // read + written
    }
    bench.progress(fmt::format("HBM copy up to {:.0f} GiB per buffer", max_bytes / kGiB));
  }
  {
    const auto per_array = static_cast<std::size_t>(std::exp2(std::floor(std::log2(cap / 2))));
    DeviceBuffer a(per_array), b(per_array), c(per_array);
    check(kernels::fill_uniform(b.p, per_array / 4, kernels::Elem::f32, 4u, bench.stream), "fill");
    check(kernels::fill_uniform(c.p, per_array / 4, kernels::Elem::f32, 5u, bench.stream), "fill");
    for (double bytes = 16 * kMiB; bytes <= static_cast<double>(per_array); bytes *= 2) {
      const auto n = static_cast<std::size_t>(bytes) / sizeof(float);
      const double t = time_median(bench.stream, 2, bench.reps(), [&] {
        check(kernels::triad(a.as<float>(), b.as<float>(), c.as<float>(), 0.4f, n, bench.stream), "triad");
      });
      bench.m.hbm.push_back({"triad", 3.0 * bytes, t});
    }
    bench.progress("HBM triad");
  }
  {
    // Back-to-back small kernels: per-kernel time = launch overhead + bytes / bandwidth.
    constexpr int kBurst = 200;
    DeviceBuffer a(4 << 20), b(4 << 20);
    for (double bytes = kKiB; bytes <= 4 * kMiB; bytes *= 4) {
      const auto n = static_cast<std::size_t>(bytes) / sizeof(float);
      const double t = time_median(bench.stream, 1, bench.reps(), [&] {
        for (int i = 0; i < kBurst; ++i) check(kernels::scale(b.as<float>(), a.as<float>(), 1.5f, n, bench.stream), "scale");
      });
      bench.m.launch.push_back({"elementwise", 2.0 * bytes, t / kBurst});
    }
    bench.progress("launch overhead");
  }
  {
    const auto max_bytes = static_cast<std::size_t>(bench.opt.quick ? 256 * kMiB : kGiB);
    PinnedBuffer host(max_bytes);
    DeviceBuffer dev(max_bytes);
    for (double bytes = 64 * kKiB; bytes <= static_cast<double>(max_bytes); bytes *= 4) {
      const auto n = static_cast<std::size_t>(bytes);
      const double h2d = time_median(bench.stream, 2, bench.reps(), [&] {
        check(cudaMemcpyAsync(dev.p, host.p, n, cudaMemcpyHostToDevice, bench.stream), "memcpy H2D");
      });
      const double d2h = time_median(bench.stream, 2, bench.reps(), [&] {
        check(cudaMemcpyAsync(host.p, dev.p, n, cudaMemcpyDeviceToHost, bench.stream), "memcpy D2H");
      });
      bench.m.host_copy.push_back({"h2d", bytes, h2d});
      bench.m.host_copy.push_back({"d2h", bytes, d2h});
    }
    bench.progress("pinned host copies");
  }
}

// ---------------------------------------------------------------- NCCL

// One communicator per local device this process drives (all local GPUs in single-process mode,
// one in a torchrun/srun launch).
struct CommSet {
  const Nccl* nccl = nullptr;
  std::vector<int> devices;
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
  std::vector<void*> send, recv;
  int ranks = 0;              // communicator size
  int nodes = 1;
  std::size_t buffer_bytes = 0;
  ~CommSet() {
    for (std::size_t i = 0; i < devices.size(); ++i) {
      cudaSetDevice(devices[i]);
      if (i < comms.size() && comms[i] != nullptr) nccl->CommDestroy(comms[i]);
      if (i < send.size()) cudaFree(send[i]);
      if (i < recv.size()) cudaFree(recv[i]);
      if (i < streams.size()) cudaStreamDestroy(streams[i]);
    }
  }
};

void allocate(CommSet& cs, std::size_t bytes) {
  cs.buffer_bytes = bytes;
  for (int d : cs.devices) {
    check(cudaSetDevice(d), "cudaSetDevice");
    cudaStream_t s{};
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    cs.streams.push_back(s);
    void *a = nullptr, *b = nullptr;
    check(cudaMalloc(&a, bytes), fmt::format("cudaMalloc({} B) for NCCL", bytes));
    check(cudaMalloc(&b, bytes), fmt::format("cudaMalloc({} B) for NCCL", bytes));
    check(cudaMemset(a, 0, bytes), "memset");
    cs.send.push_back(a);
    cs.recv.push_back(b);
  }
}

// Enqueues one `op` of nccl-tests size `bytes` on every local communicator; returns the bytes
// actually moved (rounded to whole fp32 elements per rank).
double enqueue(const CommSet& cs, CollectiveOp op, double bytes) {
  const Nccl& n = *cs.nccl;
  const auto elems = static_cast<std::size_t>(bytes / 4);
  const auto per_rank = elems / static_cast<std::size_t>(cs.ranks);
  nccl_check(n, n.GroupStart(), "GroupStart");
  for (std::size_t i = 0; i < cs.comms.size(); ++i) {
    ncclComm_t c = cs.comms[i];
    cudaStream_t s = cs.streams[i];
    void* in = cs.send[i];
    void* out = cs.recv[i];
    switch (op) {
      case CollectiveOp::all_reduce: nccl_check(n, n.AllReduce(in, out, elems, ncclFloat32, ncclSum, c, s), "AllReduce"); break;
      case CollectiveOp::all_gather: nccl_check(n, n.AllGather(in, out, per_rank, ncclFloat32, c, s), "AllGather"); break;
      case CollectiveOp::reduce_scatter:
        nccl_check(n, n.ReduceScatter(in, out, per_rank, ncclFloat32, ncclSum, c, s), "ReduceScatter");
        break;
      case CollectiveOp::all_to_all: {
        // nccl-tests' alltoall: grouped send/recv of 1/n of the buffer to every peer.
        for (int peer = 0; peer < cs.ranks; ++peer) {
          const std::size_t off = static_cast<std::size_t>(peer) * per_rank * 4;
          nccl_check(n, n.Send(static_cast<char*>(in) + off, per_rank, ncclFloat32, peer, c, s), "Send");
          nccl_check(n, n.Recv(static_cast<char*>(out) + off, per_rank, ncclFloat32, peer, c, s), "Recv");
        }
        break;
      }
      default: break;
    }
  }
  nccl_check(n, n.GroupEnd(), "GroupEnd");
  switch (op) {
    case CollectiveOp::all_reduce: return static_cast<double>(elems) * 4;
    default: return static_cast<double>(per_rank * static_cast<std::size_t>(cs.ranks)) * 4;
  }
}

// send_recv: a ring, every rank sends `bytes` to the next and receives from the previous.
void enqueue_ring(const CommSet& cs, const std::vector<int>& global_ranks, double bytes) {
  const Nccl& n = *cs.nccl;
  const auto elems = static_cast<std::size_t>(bytes / 4);
  nccl_check(n, n.GroupStart(), "GroupStart");
  for (std::size_t i = 0; i < cs.comms.size(); ++i) {
    const int r = global_ranks[i];
    nccl_check(n, n.Send(cs.send[i], elems, ncclFloat32, (r + 1) % cs.ranks, cs.comms[i], cs.streams[i]), "Send");
    nccl_check(n, n.Recv(cs.recv[i], elems, ncclFloat32, (r + cs.ranks - 1) % cs.ranks, cs.comms[i], cs.streams[i]), "Recv");
  }
  nccl_check(n, n.GroupEnd(), "GroupEnd");
}

// Seconds per call: `iters` calls between events on every local stream, the slowest stream.
double time_comm(const CommSet& cs, int iters, const std::function<void()>& enqueue_one) {
  std::vector<std::unique_ptr<EventPair>> ev;
  for (int d : cs.devices) {
    check(cudaSetDevice(d), "cudaSetDevice");
    ev.push_back(std::make_unique<EventPair>());
  }
  for (std::size_t i = 0; i < cs.devices.size(); ++i) {
    check(cudaSetDevice(cs.devices[i]), "cudaSetDevice");
    check(cudaEventRecord(ev[i]->start, cs.streams[i]), "cudaEventRecord");
  }
  for (int k = 0; k < iters; ++k) enqueue_one();
  double worst = 0;
  for (std::size_t i = 0; i < cs.devices.size(); ++i) {
    check(cudaSetDevice(cs.devices[i]), "cudaSetDevice");
    check(cudaEventRecord(ev[i]->stop, cs.streams[i]), "cudaEventRecord");
  }
  for (std::size_t i = 0; i < cs.devices.size(); ++i) {
    check(cudaSetDevice(cs.devices[i]), "cudaSetDevice");
    worst = std::max(worst, ev[i]->seconds());
  }
  return worst / iters;
}

void bench_collectives(Bench& bench, const CommSet& cs, const std::vector<int>& global_ranks, const std::string& scope) {
  const double max_bytes = static_cast<double>(cs.buffer_bytes);
  const double step = bench.opt.quick ? 8 : 4;
  const CollectiveOp ops[] = {CollectiveOp::all_reduce, CollectiveOp::all_gather, CollectiveOp::reduce_scatter,
                              CollectiveOp::all_to_all, CollectiveOp::send_recv};
  for (CollectiveOp op : ops) {
    for (double bytes = kKiB; bytes <= max_bytes; bytes *= step) {
      double moved = bytes;
      std::function<void()> one;
      if (op == CollectiveOp::send_recv) one = [&] { enqueue_ring(cs, global_ranks, bytes); };
      else one = [&] { moved = enqueue(cs, op, bytes); };
      if (op != CollectiveOp::send_recv && op != CollectiveOp::all_reduce && bytes < 4.0 * cs.ranks) continue;
      // Many calls per timing for small messages (nccl-tests' -n), so event resolution does not matter.
      const int iters = bytes <= 1 * kMiB ? 50 : bytes <= 64 * kMiB ? 10 : 2;
      (void)time_comm(cs, 2, one);  // warm-up (connection setup on first use)
      std::vector<double> t;
      for (int r = 0; r < (bench.opt.quick ? 3 : 5); ++r) t.push_back(time_comm(cs, iters, one));
      bench.m.collectives.push_back({op, scope, cs.ranks, cs.nodes, moved, median(t)});
    }
    bench.progress(fmt::format("NCCL {} over {} ranks ({})", to_string(op), cs.ranks, scope));
  }
}

// A bf16 GEMM timed alone and while all-reduces of 256 MiB keep the NVLink/NIC busy; only the
// first local device runs the GEMM, every rank runs the same number of all-reduces.
void bench_interference(Bench& bench, const CommSet& cs, Rendezvous* rv, bool runs_gemm) {
  const double comm_bytes = std::min(256 * kMiB, static_cast<double>(cs.buffer_bytes));
  std::vector<GemmShape> shapes{{4096, 4096, 4096, 1}, {8192, 8192, 8192, 1}};
  if (!bench.opt.quick) shapes.push_back({16384, 16384, 8192, 1});
  std::unique_ptr<GemmBuffers> buf;
  if (runs_gemm) {
    check(cudaSetDevice(bench.device), "cudaSetDevice");
    buf = std::make_unique<GemmBuffers>(gemm_buffers(bench, Dtype::bf16, shapes));
  }
  const double comm_one = time_comm(cs, 3, [&] { enqueue(cs, CollectiveOp::all_reduce, comm_bytes); });
  for (const GemmShape& g : shapes) {
    double alone = 0;
    std::uint64_t n_comm = 0;
    if (runs_gemm) {
      check(cudaSetDevice(bench.device), "cudaSetDevice");
      alone = time_gemm(bench, Dtype::bf16, g, *buf, false);
      // Enough all-reduces to outlast warm-up + repeats of the GEMM three times over.
      n_comm = static_cast<std::uint64_t>(std::ceil(3.0 * (bench.warmup() + bench.reps()) * alone / comm_one)) + 2;
    }
    if (rv != nullptr) {
      std::vector<std::uint8_t> payload(sizeof n_comm);
      std::memcpy(payload.data(), &n_comm, sizeof n_comm);
      payload = rv->broadcast(payload);
      std::memcpy(&n_comm, payload.data(), sizeof n_comm);
    }
    for (std::uint64_t i = 0; i < n_comm; ++i) enqueue(cs, CollectiveOp::all_reduce, comm_bytes);
    double with = 0;
    if (runs_gemm) {
      check(cudaSetDevice(bench.device), "cudaSetDevice");
      with = time_gemm(bench, Dtype::bf16, g, *buf, false);
    }
    for (std::size_t i = 0; i < cs.devices.size(); ++i) {
      check(cudaSetDevice(cs.devices[i]), "cudaSetDevice");
      check(cudaStreamSynchronize(cs.streams[i]), "comm sync");
    }
    if (runs_gemm && alone > 0 && with > 0)
      bench.m.interference.push_back({Dtype::bf16, g, alone, with, CollectiveOp::all_reduce, comm_bytes, cs.ranks});
  }
  check(cudaSetDevice(bench.device), "cudaSetDevice");
  bench.progress("interference (GEMM beside all-reduce)");
}

std::size_t comm_buffer_bytes(const Bench& bench, const std::vector<int>& devices) {
  std::size_t smallest = SIZE_MAX;
  for (int d : devices) {
    check(cudaSetDevice(d), "cudaSetDevice");
    std::size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    smallest = std::min(smallest, free_b);
  }
  check(cudaSetDevice(bench.device), "cudaSetDevice");
  const double cap = std::min(bench.opt.quick ? kGiB : 8 * kGiB, static_cast<double>(smallest) / 3.0);
  return static_cast<std::size_t>(std::exp2(std::floor(std::log2(cap))));
}

std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void single_gpu_series(Bench& bench) {
  bench_gemm(bench);
  bench_attention(bench);
  bench_memory(bench);
}

// One process driving every local GPU: the single-GPU series on the first, then, with two or more
// GPUs and a usable NCCL, collectives and interference over all of them.
void measure_in_one_process(Bench& bench, const Nccl& nccl, int n_devices) {
  Measurements& m = bench.m;
  single_gpu_series(bench);
  m.device.gpus_per_node = n_devices;
  m.device.world_size = n_devices;
  if (n_devices < 2) {
    m.notes.push_back("one GPU: no collectives or interference measured");
  } else if (!nccl.ok()) {
    m.notes.push_back("collectives and interference skipped: " + nccl.error);
  } else {
    CommSet cs;
    cs.nccl = &nccl;
    for (int d = 0; d < n_devices; ++d) cs.devices.push_back(d);
    cs.ranks = n_devices;
    cs.comms.assign(static_cast<std::size_t>(n_devices), nullptr);
    nccl_check(nccl, nccl.CommInitAll(cs.comms.data(), n_devices, cs.devices.data()), "CommInitAll");
    allocate(cs, comm_buffer_bytes(bench, cs.devices));
    std::vector<int> ranks(cs.devices.begin(), cs.devices.end());
    m.notes.push_back("collectives: one process driving all local GPUs (ncclCommInitAll); small-message latency "
                      "includes the serial launch on each GPU");
    bench_collectives(bench, cs, ranks, "intra_node");
    bench_interference(bench, cs, nullptr, true);
  }
  check(cudaSetDevice(bench.device), "cudaSetDevice");
}

// The intra-node series of a multi-node run: the world split by host into `local`, each rank's index
// on its host. The caller owns `local`, so every rank tears it down at the same point: after the
// world's interference series and last barrier, just before the world communicator.
void measure_intra_node_split(Bench& bench, const CommSet& world, CommSet& local, int rank,
                              const std::vector<std::string>& hosts, const std::set<std::string>& distinct,
                              std::size_t buffer_bytes) {
  const Nccl& nccl = *world.nccl;
  local.nccl = &nccl;
  local.devices = {bench.device};
  local.ranks = bench.m.device.gpus_per_node;
  local.comms.assign(1, nullptr);
  const int color = static_cast<int>(std::distance(distinct.begin(), distinct.find(hostname())));
  nccl_check(nccl, nccl.CommSplit(world.comms[0], color, rank, &local.comms[0], nullptr), "CommSplit");
  allocate(local, buffer_bytes);
  int local_index = 0;
  for (int r = 0; r < rank; ++r) local_index += hosts[static_cast<std::size_t>(r)] == hostname() ? 1 : 0;
  bench_collectives(bench, local, {local_index}, "intra_node");
}

// torchrun / srun: one process per GPU. Rank 0 measures the single-GPU series while the others
// wait, then every rank joins the collectives.
void measure_across_ranks(Bench& bench, const Nccl& nccl, RendezvousConfig cfg) {
  Measurements& m = bench.m;
  cfg.timeout = std::chrono::seconds(bench.opt.quick ? 900 : 3600);
  Rendezvous rv(cfg);
  const std::vector<std::string> hosts = rv.all_gather(hostname());
  const std::set<std::string> distinct(hosts.begin(), hosts.end());
  m.device.nodes = static_cast<int>(distinct.size());
  m.device.world_size = cfg.world_size;
  m.device.gpus_per_node = cfg.world_size / m.device.nodes;
  if (cfg.rank == 0) single_gpu_series(bench);
  rv.barrier();
  // Every rank needs the same answer about NCCL, or the others would block in init forever.
  std::vector<std::uint8_t> ok_flag{static_cast<std::uint8_t>(nccl.ok() ? 1 : 0)};
  const auto all_ok = rv.all_gather(std::string(1, static_cast<char>(ok_flag[0])));
  if (std::any_of(all_ok.begin(), all_ok.end(), [](const std::string& s) { return s != std::string(1, '\1'); })) {
    m.notes.push_back("collectives skipped: libnccl.so.2 not usable on every rank" + (nccl.ok() ? std::string() : ": " + nccl.error));
    return;
  }
  ncclUniqueId id{};
  if (cfg.rank == 0) nccl_check(nccl, nccl.GetUniqueId(&id), "GetUniqueId");
  std::vector<std::uint8_t> raw(reinterpret_cast<std::uint8_t*>(&id), reinterpret_cast<std::uint8_t*>(&id) + sizeof id);
  raw = rv.broadcast(raw);
  std::memcpy(&id, raw.data(), sizeof id);
  CommSet world;
  world.nccl = &nccl;
  world.devices = {bench.device};
  world.ranks = cfg.world_size;
  world.nodes = m.device.nodes;
  world.comms.assign(1, nullptr);
  check(cudaSetDevice(bench.device), "cudaSetDevice");
  nccl_check(nccl, nccl.CommInitRank(&world.comms[0], cfg.world_size, id, cfg.rank), "CommInitRank");
  // Same buffer size everywhere: the smallest any rank can afford.
  const std::size_t mine = comm_buffer_bytes(bench, world.devices);
  const auto sizes = rv.all_gather(std::to_string(mine));
  std::size_t common = mine;
  for (const std::string& s : sizes) common = std::min<std::size_t>(common, std::stoull(s));
  allocate(world, common);
  const std::vector<int> my_rank{cfg.rank};
  bench_collectives(bench, world, my_rank, m.device.nodes > 1 ? "inter_node" : "intra_node");
  CommSet local;
  if (m.device.nodes > 1 && nccl.CommSplit != nullptr && m.device.gpus_per_node > 1)
    measure_intra_node_split(bench, world, local, cfg.rank, hosts, distinct, common);
  bench_interference(bench, world, &rv, cfg.rank == 0);
  rv.barrier();
}

}  // namespace

namespace cuda {

std::optional<std::string> unavailable_reason() {
  int driver = 0, runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
    return std::string("no NVIDIA GPU found (the driver is installed but reports no device)");
  if (e == cudaErrorInsufficientDriver) {
    // cudart also says this when there is no driver at all (the loader checks for libcuda.so.1
    // before it loads this plugin, so here a driver exists and is too old).
    cudaDriverGetVersion(&driver);
    return "the NVIDIA driver supports CUDA " + version_string(driver) + " but this backend was built with CUDA " +
           version_string(runtime) + "; update the driver";
  }
  if (e != cudaSuccess) return std::string("no usable NVIDIA GPU (") + cudaGetErrorString(e) + ")";
  return std::nullopt;
}

Measurements run_microbenchmarks(const BenchOptions& options, bool& is_writer) {
  const auto env = process_environment({"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
                                        "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST"});
  const std::optional<RendezvousConfig> rcfg = rendezvous_from_env(env);
  int n_devices = 0;
  check(cudaGetDeviceCount(&n_devices), "cudaGetDeviceCount");
  const int device = rcfg ? rcfg->local_rank % n_devices : 0;
  Bench bench(options, device);
  Measurements& m = bench.m;
  m.generator = std::string("meshplan calibrate") + (options.quick ? " --quick" : "");
  m.created_utc = utc_now();
  m.host = hostname();
  m.mode = options.quick ? "quick" : "full";
  describe_device(bench);
  is_writer = !rcfg || rcfg->rank == 0;
  bench.progress(fmt::format("{} (sm {}), {} local GPU(s){}", m.device.name, m.device.compute_capability, n_devices,
                             rcfg ? fmt::format(", rank {} of {} ({})", rcfg->rank, rcfg->world_size, rcfg->launcher) : ""));

  const Nccl nccl = load_nccl();
  m.device.nccl_version = nccl.version;
  if (rcfg) measure_across_ranks(bench, nccl, *rcfg);
  else measure_in_one_process(bench, nccl, n_devices);
  return m;
}

}  // namespace cuda
}  // namespace meshplan::calibrate

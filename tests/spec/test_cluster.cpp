// Hardware profiles: the shipped numbers match their published sources, every value
// carries a source, aliases warn, and bad input is rejected naming the file and the key.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cost/collective_cost.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/error.hpp"
#include "spec/nccl_table.hpp"
#include "test_paths.hpp"

using namespace meshplan;
namespace fs = std::filesystem;

namespace {

// Conversions are exact multiplications of decimal TOML values, so anything beyond a few ulps
// is a unit bug, not rounding.
constexpr double kExact = 1e-12;

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path profile_path(const std::string& name) {
  return test::data_root() / "hardware_profiles" / (name + ".toml");
}

const GemmCurve* find_gemm(const ClusterSpec& c, Dtype d) {
  for (const auto& g : c.gpu.gemm_curves)
    if (g.dtype == d) return &g;
  return nullptr;
}

double gemm_eff_at(const GemmCurve& g, double dim) {
  for (const auto& p : g.points)
    if (p.cube_dim == dim) return p.efficiency;
  return -1;
}

const AttentionCurve* find_attn(const ClusterSpec& c, const std::string& kernel,
                                const std::string& pass, int head_dim, bool causal) {
  for (const auto& a : c.gpu.attention_curves)
    if (a.kernel == kernel && a.pass == pass && a.head_dim == head_dim && a.causal == causal)
      return &a;
  return nullptr;
}

// A scratch copy of a shipped profile with one edit, loaded by path.
class Scratch {
public:
  Scratch() {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("meshplan-test-cluster-" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path write(const std::string& text) {
    const fs::path p = dir_ / ("profile" + std::to_string(n_++) + ".toml");
    std::ofstream(p) << text;
    return p;
  }

private:
  fs::path dir_;
  int n_ = 0;
};

std::string edited(std::string text, const std::string& from, const std::string& to) {
  const auto pos = text.find(from);
  REQUIRE_MESSAGE(pos != std::string::npos, "edit anchor not found: " << from);
  text.replace(pos, from.size(), to);
  return text;
}

// Loads `text` and requires an InputError that names the file and `key` and says `reason`.
void expect_error(Scratch& s, const std::string& text, const std::string& key,
                  const std::string& reason) {
  const fs::path p = s.write(text);
  try {
    load_cluster(p.string());
    FAIL("no error for key " << key);
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK(e.file() == p.string());
    CHECK(e.key() == key);
    CHECK_MESSAGE(what.find(p.string()) != std::string::npos, what);
    CHECK_MESSAGE(what.find(key) != std::string::npos, what);
    CHECK_MESSAGE(e.reason().find(reason) != std::string::npos, what);
  }
}

// One per gpu value of the validation CSVs, and p6-b200: b200's node on AWS's EFA network (a profile
// on a base, docs/hardware_profiles.md).
const std::vector<std::string> kShipped = {"a100-40gb",      "a100-80gb",     "b200",          "b300",
                                           "gb200",          "gb300",         "h100-pcie-80gb", "h100-sxm-80gb",
                                           "h100-sxm-96gb", "h200-141gb",     "p6-b200"};

}  // namespace

TEST_CASE("list_clusters names one profile per gpu value and the network variants, aliases excluded") {
  CHECK(list_clusters() == kShipped);
}

TEST_CASE("every shipped profile loads and every value has a registered source") {
  const std::vector<std::string> scalar_fields = {
      "gpu.sm_count", "gpu.hbm_bytes", "gpu.usable_memory_bytes", "gpu.hbm_bandwidth_bytes_per_s", "gpu.hbm_efficiency",
      "gpu.kernel_launch_seconds", "gpu.model", "gpu.arch",
      "node.gpus_per_node", "node.scaleup_kind", "node.nvlink_domain_gpus",
      "node.nvlink_bandwidth_bytes_per_s", "node.nvlink_efficiency",
      "node.nvlink_latency_seconds", "node.nvls", "node.host_link_kind",
      "node.host_h2d_bytes_per_s", "node.host_d2h_bytes_per_s", "node.host_memory_bytes",
      "node.nics_per_node", "node.nic_bandwidth_bytes_per_s", "node.nic_efficiency",
      "fabric.kind", "fabric.transport", "fabric.rail_optimized", "fabric.nodes_per_leaf",
      "fabric.leaf_oversubscription", "fabric.spine_oversubscription",
      "fabric.nic_latency_seconds", "fabric.switch_hop_latency_seconds",
      "framework.cuda_context_bytes", "framework.nccl_buffer_bytes_per_group",
      "framework.allocator_reserve_fraction"};
  for (const auto& name : kShipped) {
    CAPTURE(name);
    const ClusterSpec c = load_cluster(name);
    CHECK(c.name == name);
    CHECK(c.warnings.empty());
    CHECK(fs::path(c.source_file).filename() == name + ".toml");

    std::vector<std::string> fields = scalar_fields;
    for (const auto& [d, v] : c.gpu.peak_flops_per_s)
      fields.push_back("gpu.peak_flops_per_s." + std::string(to_string(d)));
    for (std::size_t i = 0; i < c.gpu.gemm_curves.size(); ++i)
      fields.push_back("gpu.gemm_curves[" + std::to_string(i) + "]");
    for (std::size_t i = 0; i < c.gpu.attention_curves.size(); ++i)
      fields.push_back("gpu.attention_curves[" + std::to_string(i) + "]");
    for (const auto& f : fields) {
      CAPTURE(f);
      const auto it = c.sources.find(f);
      REQUIRE(it != c.sources.end());
      const auto ref = c.source_refs.find(it->second);
      REQUIRE(ref != c.source_refs.end());
      const std::string& r = ref->second;
      const bool kind_ok = r.rfind("spec: ", 0) == 0 || r.rfind("measured: ", 0) == 0 ||
                           r.rfind("model: ", 0) == 0 || r.rfind("derived: ", 0) == 0 ||
                           r.rfind("estimate: ", 0) == 0;
      CHECK_MESSAGE(kind_ok, r);
      // An estimate has to explain itself, not just name a number.
      if (r.rfind("estimate: ", 0) == 0) CHECK(r.size() > 60);
    }
    for (const auto& g : c.gpu.gemm_curves) CHECK(c.source_refs.count(g.source) == 1);
    for (const auto& a : c.gpu.attention_curves) CHECK(c.source_refs.count(a.source) == 1);

    // Every number the cost model divides by or multiplies with is set and positive.
    for (double v : {c.gpu.hbm_bytes, c.gpu.usable_memory_bytes, c.gpu.hbm_bandwidth_bytes_per_s, c.gpu.hbm_efficiency,
                     c.gpu.kernel_launch_seconds, c.node.nvlink_bandwidth_bytes_per_s,
                     c.node.nvlink_efficiency, c.node.nvlink_latency_seconds,
                     c.node.host_h2d_bytes_per_s, c.node.host_d2h_bytes_per_s,
                     c.node.host_memory_bytes, c.node.nic_bandwidth_bytes_per_s,
                     c.node.nic_efficiency, c.fabric.nic_latency_seconds,
                     c.fabric.switch_hop_latency_seconds, c.framework.cuda_context_bytes,
                     c.framework.nccl_buffer_bytes_per_group})
      CHECK(v > 0);
    CHECK(c.gpu.sm_count > 0);
    // Fit checks use what CUDA exposes: within a few % of the marketed size, never far above it.
    CHECK(c.gpu.device_memory_bytes() == c.gpu.usable_memory_bytes);
    CHECK(c.gpu.usable_memory_bytes > 0.9 * c.gpu.hbm_bytes);
    CHECK(c.gpu.usable_memory_bytes < 1.1 * c.gpu.hbm_bytes);
    CHECK(c.peak_flops_per_s(Dtype::bf16) > 0);
    CHECK(c.peak_flops_per_s(Dtype::fp16) == c.peak_flops_per_s(Dtype::bf16));
    // Tensor-core TF32 runs at half the BF16 rate on every generation shipped here.
    CHECK(c.peak_flops_per_s(Dtype::tf32) == doctest::Approx(c.peak_flops_per_s(Dtype::bf16) / 2).epsilon(0.01));
    CHECK(find_gemm(c, Dtype::bf16) != nullptr);
    CHECK(c.node.nvlink_domain_gpus % c.node.gpus_per_node == 0);
  }
}

TEST_CASE("H100 SXM 80GB numbers match their published sources") {
  const ClusterSpec c = load_cluster("h100-sxm-80gb");
  // H100 datasheet (via glennklockwood.com) and MLE's derivation: dense peaks
  // (989.4 = 1830 MHz x 528 TC x 1024 FLOP/clk).
  CHECK(c.peak_flops_per_s(Dtype::bf16) == doctest::Approx(989.4e12).epsilon(kExact));
  CHECK(c.peak_flops_per_s(Dtype::fp8) == doctest::Approx(1978.9e12).epsilon(kExact));
  CHECK(c.peak_flops_per_s(Dtype::tf32) == doctest::Approx(494.7e12).epsilon(kExact));
  CHECK(c.peak_flops_per_s(Dtype::fp4) == 0.0);  // Hopper has no FP4 tensor cores
  CHECK(c.gpu.hbm_bytes == doctest::Approx(80e9).epsilon(kExact));
  CHECK(c.gpu.hbm_bandwidth_bytes_per_s == doctest::Approx(3.35e12).epsilon(kExact));
  CHECK(c.gpu.sm_count == 132);
  CHECK(c.gpu.arch == "sm90");
  // Azure AI-benchmarking-guide, ND H100 v5 BabelStream: achieved copy 2.90 TB/s.
  CHECK(c.gpu.hbm_bandwidth_bytes_per_s * c.gpu.hbm_efficiency ==
        doctest::Approx(2.90e12).epsilon(0.001));
  // NVLink4 450 GB/s per direction; ring busbw plateau 365-370 GB/s (NVIDIA/nccl#1455,
  // nccl-tests#212).
  CHECK(c.node.nvlink_bandwidth_bytes_per_s == doctest::Approx(450e9).epsilon(kExact));
  const double ring = c.node.nvlink_bandwidth_bytes_per_s * c.node.nvlink_efficiency;
  CHECK(ring >= 365e9);
  CHECK(ring <= 371e9);
  CHECK(c.node.nvls);
  // ASTRA-sim's examples/network/analytical/HGX-H100-validated.yml: 936.25 ns per NVSwitch link.
  CHECK(c.node.nvlink_latency_seconds == doctest::Approx(0.936e-6).epsilon(kExact));
  // DGX H100: 8 x 400 Gb/s NDR (SuperPOD H100 RA); 46-49 GB/s achieved per NIC (nccl-tests#290,
  // #267).
  CHECK(c.node.nics_per_node == 8);
  CHECK(c.node.nic_bandwidth_bytes_per_s == doctest::Approx(50e9).epsilon(kExact));
  const double nic = c.node.nic_bandwidth_bytes_per_s * c.node.nic_efficiency;
  CHECK(nic >= 46e9);
  CHECK(nic <= 49e9);
  // Azure ND H100 v5 nvbandwidth: 51 / 52 GB/s.
  CHECK(c.node.host_h2d_bytes_per_s == doctest::Approx(51e9).epsilon(kExact));
  CHECK(c.node.host_d2h_bytes_per_s == doctest::Approx(52e9).epsilon(kExact));
  // DGX SuperPOD H100 RA: SU of 32 nodes, non-blocking.
  CHECK(c.fabric.nodes_per_leaf == 32);
  CHECK(c.fabric.leaf_oversubscription == 1.0);
  CHECK(c.fabric.rail_optimized);
  CHECK(c.fabric.transport == "infiniband");

  // zzc0721/torch-performance-test-data#79 (BF16) and Azure ND H100 v5 cuBLASLt (FP8): efficiencies
  // are stored to 4 digits, so the measured TFLOP/s come back within
  // 0.5e-4 x 989.4 = 0.05 TFLOP/s.
  const GemmCurve* bf16 = find_gemm(c, Dtype::bf16);
  REQUIRE(bf16 != nullptr);
  CHECK(gemm_eff_at(*bf16, 4096) * 989.4 == doctest::Approx(788.7).epsilon(0.05 / 788.7));
  CHECK(gemm_eff_at(*bf16, 1024) * 989.4 == doctest::Approx(176.6).epsilon(0.05 / 176.6));
  const GemmCurve* fp8 = find_gemm(c, Dtype::fp8);
  REQUIRE(fp8 != nullptr);
  CHECK(gemm_eff_at(*fp8, 16384) * 1978.9 == doctest::Approx(1377.3).epsilon(0.1 / 1377.3));
  CHECK(c.source_refs.at(bf16->source).rfind("measured: ", 0) == 0);

  // FlashAttention README figures: FA2 fwd+bwd causal hd128 and FA3 fwd non-causal hd128,
  // stored in TFLOP/s exactly.
  const AttentionCurve* fa2 = find_attn(c, "fa2", "fwd+bwd", 128, true);
  REQUIRE(fa2 != nullptr);
  REQUIRE(fa2->seq_len.size() == 6);
  CHECK(fa2->seq_len.back() == 16384);
  CHECK(fa2->flops_per_s.back() == doctest::Approx(328e12).epsilon(kExact));
  const AttentionCurve* fa3 = find_attn(c, "fa3", "fwd", 128, false);
  REQUIRE(fa3 != nullptr);
  CHECK(fa3->flops_per_s.front() == doctest::Approx(467e12).epsilon(kExact));
  // FA3 hd256 non-causal: the 1k bar (639) from the FA3 paper's own figure (arXiv:2407.08608).
  const AttentionCurve* fa3_256 = find_attn(c, "fa3", "fwd", 256, false);
  REQUIRE(fa3_256 != nullptr);
  CHECK(fa3_256->seq_len == std::vector<double>{512, 1024, 2048, 4096, 8192, 16384});
  CHECK(fa3_256->flops_per_s[1] == doctest::Approx(639e12).epsilon(kExact));
  // Transformer Engine's kernel on Hopper: cuDNN fused attention, forward and backward curves.
  const AttentionCurve* cudnn = find_attn(c, "cudnn", "fwd", 128, true);
  REQUIRE(cudnn != nullptr);
  CHECK(cudnn->flops_per_s[3] == doctest::Approx(518e12).epsilon(kExact));
  CHECK(find_attn(c, "cudnn", "bwd", 128, true) != nullptr);
  // nvidia-smi's total for the 80 GB part: 81,559 MiB (not 80e9 B).
  CHECK(c.gpu.usable_memory_bytes == doctest::Approx(81559.0 * 1048576.0).epsilon(kExact));
  CHECK(c.gpu.hbm_bytes == doctest::Approx(80e9).epsilon(kExact));
}

TEST_CASE("A100 numbers match their published sources") {
  const ClusterSpec c = load_cluster("a100-80gb");
  CHECK(c.peak_flops_per_s(Dtype::bf16) == doctest::Approx(312e12).epsilon(kExact));
  CHECK(c.peak_flops_per_s(Dtype::tf32) == doctest::Approx(156e12).epsilon(kExact));
  CHECK(c.peak_flops_per_s(Dtype::fp8) == 0.0);  // Ampere has no FP8
  CHECK(c.gpu.hbm_bandwidth_bytes_per_s == doctest::Approx(2.039e12).epsilon(kExact));
  // A100 datasheet (via glennklockwood.com): NVLink3 600 GB/s bidirectional = 300 GB/s per direction.
  CHECK(c.node.nvlink_bandwidth_bytes_per_s == doctest::Approx(300e9).epsilon(kExact));
  // Ring busbw 229-235 GB/s (MLE network/README.md; nccl-tests#175).
  const double ring = c.node.nvlink_bandwidth_bytes_per_s * c.node.nvlink_efficiency;
  CHECK(ring >= 229e9);
  CHECK(ring <= 235e9);
  CHECK_FALSE(c.node.nvls);
  // DGX A100: 8 x HDR 200 Gb/s = 25 GB/s each, and 192 GB/s multi-node busbw over the 8 NICs
  // (AddyLaddy, NVIDIA/nccl#812).
  CHECK(c.node.nic_bandwidth_bytes_per_s == doctest::Approx(25e9).epsilon(kExact));
  CHECK(c.node.nics_per_node * c.node.nic_bandwidth_bytes_per_s * c.node.nic_efficiency ==
        doctest::Approx(192e9).epsilon(0.001));
  CHECK(c.node.host_link_kind == "pcie4x16");
  // Azure ND A100 v4: A100 FP16 cuBLASLt 253.7 TFLOP/s at 8192^3.
  const GemmCurve* fp16 = find_gemm(c, Dtype::fp16);
  REQUIRE(fp16 != nullptr);
  CHECK(gemm_eff_at(*fp16, 8192) * 312 == doctest::Approx(253.7).epsilon(0.05 / 253.7));

  const ClusterSpec small = load_cluster("a100-40gb");
  CHECK(small.gpu.hbm_bytes == doctest::Approx(40e9).epsilon(kExact));
  CHECK(small.gpu.hbm_bandwidth_bytes_per_s == doctest::Approx(1.555e12).epsilon(kExact));
  // Its curves are borrowed from the 80 GB part and say so.
  for (const auto& g : small.gpu.gemm_curves) {
    const std::string& ref = small.source_refs.at(g.source);
    CHECK(ref.find("borrowed") != std::string::npos);
  }
}

TEST_CASE("H200, H100 96GB and Blackwell numbers") {
  const ClusterSpec h200 = load_cluster("h200-141gb");
  CHECK(h200.gpu.hbm_bytes == doctest::Approx(141e9).epsilon(kExact));
  CHECK(h200.gpu.hbm_bandwidth_bytes_per_s == doctest::Approx(4.8e12).epsilon(kExact));
  CHECK(h200.peak_flops_per_s(Dtype::bf16) == doctest::Approx(989.4e12).epsilon(kExact));
  // Azure ND H200 v5 BabelStream copy 4.01 TB/s; MLE ring (NVLS off) 367.61 GB/s.
  CHECK(h200.gpu.hbm_bandwidth_bytes_per_s * h200.gpu.hbm_efficiency ==
        doctest::Approx(4.01e12).epsilon(0.001));
  CHECK(h200.node.nvlink_bandwidth_bytes_per_s * h200.node.nvlink_efficiency ==
        doctest::Approx(367.61e9).epsilon(0.001));
  CHECK(h200.sources.at("gpu.hbm_bytes") == "h200_spec");

  // torch reports 95.0396 GiB for the 96 GB HBM2e part.
  const ClusterSpec h96 = load_cluster("h100-sxm-96gb");
  CHECK(h96.gpu.usable_memory_bytes == doctest::Approx(95.0396 * 1073741824.0).epsilon(kExact));
  CHECK(h96.source_refs.at(h96.sources.at("gpu.usable_memory_bytes")).rfind("measured: ", 0) == 0);
  CHECK(h96.gpu.hbm_bytes == doctest::Approx(96e9).epsilon(kExact));
  // Its GEMM rate is measured at the 500 W cap (torchao: 0.69 x 989 BF16), not a power rule.
  const GemmCurve* h96_bf16 = find_gemm(h96, Dtype::bf16);
  REQUIRE(h96_bf16 != nullptr);
  CHECK(gemm_eff_at(*h96_bf16, 8192) == doctest::Approx(0.69).epsilon(0.001));
  CHECK(h96.peak_flops_per_s(Dtype::bf16) == doctest::Approx(989.4e12).epsilon(kExact));
  CHECK(h96.gpu.hbm_bandwidth_bytes_per_s < 3.35e12);  // HBM2e is slower than the 80GB's HBM3

  const ClusterSpec b200 = load_cluster("b200");
  CHECK(b200.peak_flops_per_s(Dtype::bf16) == doctest::Approx(2250e12).epsilon(kExact));
  CHECK(b200.peak_flops_per_s(Dtype::fp4) == doctest::Approx(9000e12).epsilon(kExact));
  CHECK(b200.gpu.hbm_bytes == doctest::Approx(180e9).epsilon(kExact));
  CHECK(b200.node.nvlink_bandwidth_bytes_per_s == doctest::Approx(900e9).epsilon(kExact));
  CHECK(b200.node.gpus_per_node == 8);
  CHECK(b200.node.nvlink_domain_gpus == 8);
  // The BF16 curve tops out at MLE's B200 MAMF best shape, 1792x16128x3072 at 1745 TFLOP/s, placed at
  // the square of the same tile work: with no per-tile overhead on Blackwell (the epilogue runs
  // under the next tile's MMAs) that is its cube root, 4461, at 1745 / 2250 = 0.7756 of peak.
  const GemmCurve* b_bf16 = find_gemm(b200, Dtype::bf16);
  REQUIRE(b_bf16 != nullptr);
  CHECK(b200.gpu.gemm_tile_overhead_k == 0);
  CHECK(load_cluster("h100-sxm-80gb").gpu.gemm_tile_overhead_k == 128);
  CHECK(gemm_eff_at(*b_bf16, 4461) == doctest::Approx(0.7756).epsilon(kExact));
  CHECK(std::cbrt(1792.0 * 16128 * 3072) == doctest::Approx(4461).epsilon(1e-4));
  CHECK(1745.0 / 2250 == doctest::Approx(0.7756).epsilon(1e-4));
  // Blackwell's attention is cuDNN / FA4, not Hopper's FA2: cuDNN causal forward at 32k 1515 TFLOP/s.
  const AttentionCurve* b_cudnn = find_attn(b200, "cudnn", "fwd", 128, true);
  REQUIRE(b_cudnn != nullptr);
  CHECK(b_cudnn->flops_per_s[5] == doctest::Approx(1515e12).epsilon(kExact));
  CHECK(b200.gpu.sustained_clock_fraction == doctest::Approx(0.86).epsilon(kExact));

  const ClusterSpec gb200 = load_cluster("gb200");
  CHECK(gb200.node.gpus_per_node == 4);
  CHECK(gb200.node.nvlink_domain_gpus == 72);
  CHECK(gb200.node.host_link_kind == "nvlink-c2c");
  CHECK(gb200.node.host_h2d_bytes_per_s == doctest::Approx(201e9).epsilon(kExact));
  CHECK(gb200.node.host_d2h_bytes_per_s == doctest::Approx(193e9).epsilon(kExact));
  CHECK(gb200.peak_flops_per_s(Dtype::bf16) == doctest::Approx(2500e12).epsilon(kExact));
  // Azure ND GB200 v6: 4xGB200 ring 679.61 GB/s.
  CHECK(gb200.node.nvlink_bandwidth_bytes_per_s * gb200.node.nvlink_efficiency ==
        doctest::Approx(679.61e9).epsilon(0.001));
  // GB200 FP4 cuBLASLt 5604 TFLOP/s at 16384^3 after 10,000 warmup iterations: the curve holds the
  // burst rate, 5604 / 0.78 (the FP8/FP4 GEMMs' sustained fraction).
  const GemmCurve* fp4 = find_gemm(gb200, Dtype::fp4);
  REQUIRE(fp4 != nullptr);
  CHECK(gb200.gpu.gemm_sustained_fraction(Dtype::fp4) == doctest::Approx(0.78).epsilon(kExact));
  CHECK(gemm_eff_at(*fp4, 16384) * 10000 * gb200.gpu.gemm_sustained_fraction(Dtype::fp4) ==
        doctest::Approx(5604).epsilon(0.5 / 5604));
  // BF16 GEMMs and attention throttle as B200's back-to-back BF16 FA4 measured at 1000 W (0.86),
  // carried to GB200's 1200 W with power ~ f^3 at the cap, not as the FP8 GEMM (0.78); B200's FP8
  // and FP4 GEMMs take GB200's measured 0.78 carried back to 1000 W the same way, which is also
  // B200's own BF16 figure times GB200's FP8/BF16 ratio at one cap. Profiles hold three decimals.
  constexpr double kProfileDecimals = 5e-4;
  auto at_watts = [](double fraction, double from_w, double to_w) { return fraction * std::cbrt(to_w / from_w); };
  CHECK(gb200.gpu.gemm_sustained_fraction(Dtype::bf16) == doctest::Approx(at_watts(0.86, 1000, 1200)).epsilon(kProfileDecimals));
  CHECK(gb200.gpu.gemm_sustained_fraction(Dtype::bf16) == doctest::Approx(0.914).epsilon(kExact));
  CHECK(gb200.gpu.attention_sustained_fraction() == gb200.gpu.sustained_clock_fraction);
  CHECK(b200.gpu.attention_sustained_fraction() == b200.gpu.sustained_clock_fraction);
  CHECK(b200.gpu.gemm_sustained_fraction(Dtype::bf16) == doctest::Approx(0.86).epsilon(kExact));
  CHECK(b200.gpu.gemm_sustained_fraction(Dtype::mxfp8) == doctest::Approx(at_watts(0.78, 1200, 1000)).epsilon(kProfileDecimals));
  CHECK(b200.gpu.gemm_sustained_fraction(Dtype::mxfp8) ==
        doctest::Approx(0.86 * 0.78 / gb200.gpu.sustained_clock_fraction).epsilon(kProfileDecimals));

  const ClusterSpec gb300 = load_cluster("gb300");
  // B200's measured attention throttle at 1000 W carried to GB300's 1400 W.
  CHECK(gb300.gpu.attention_sustained_fraction() == doctest::Approx(0.86 * std::cbrt(1.4)).epsilon(kProfileDecimals));
  CHECK(gb300.node.gpus_per_node == 4);
  CHECK(gb300.node.nvlink_domain_gpus == 72);
  CHECK(gb300.peak_flops_per_s(Dtype::fp4) == doctest::Approx(15000e12).epsilon(kExact));
  CHECK(gb300.gpu.hbm_bytes == doctest::Approx(288e9).epsilon(kExact));
  // B300 DGX SuperPOD RA: 2 x 400GbE per GPU.
  CHECK(gb300.node.nic_bandwidth_bytes_per_s * gb300.node.nics_per_node ==
        doctest::Approx(4 * 100e9).epsilon(kExact));
  // No GB300 datasheet among the sources: the GPU numbers must be marked as estimates.
  CHECK(gb300.source_refs.at(gb300.sources.at("gpu.peak_flops_per_s.bf16")).rfind("estimate: ", 0) == 0);
}

TEST_CASE("framework overheads follow from SM count and NCCL buffer sizes") {
  // cuda context = 1 KiB x 2048 threads x SMs + 256 MiB; NCCL = channels x 9,633,792 B.
  const ClusterSpec h100 = load_cluster("h100-sxm-80gb");
  CHECK(h100.framework.cuda_context_bytes ==
        doctest::Approx(1024.0 * 2048 * 132 + 256.0 * 1048576).epsilon(kExact));
  CHECK(h100.framework.nccl_buffer_bytes_per_group ==
        doctest::Approx(32 * 9633792.0).epsilon(0.001));
  const ClusterSpec a100 = load_cluster("a100-80gb");
  CHECK(a100.framework.cuda_context_bytes ==
        doctest::Approx(1024.0 * 2048 * 108 + 256.0 * 1048576).epsilon(kExact));
  CHECK(a100.framework.nccl_buffer_bytes_per_group ==
        doctest::Approx(24 * 9633792.0).epsilon(0.001));
  CHECK(a100.framework.allocator_reserve_fraction == doctest::Approx(0.2));
}

TEST_CASE("a100-unknown resolves to a100-80gb with a warning") {
  const ClusterSpec c = load_cluster("a100-unknown");
  CHECK(c.name == "a100-80gb");
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0] == "a100-unknown: memory size not stated; using a100-80gb");
  CHECK(c.gpu.hbm_bytes == doctest::Approx(80e9).epsilon(kExact));
}

TEST_CASE("a profile loads by path as well as by name") {
  const ClusterSpec by_path = load_cluster(profile_path("gb200").string());
  const ClusterSpec by_name = load_cluster("gb200");
  CHECK(by_path.name == "gb200");
  CHECK(by_path.sources == by_name.sources);
  CHECK(by_path.gpu.hbm_bytes == by_name.gpu.hbm_bytes);
}

// A profile on a base (docs/hardware_profiles.md): the base's values, the file's over them.
TEST_CASE("a profile on a base: the base's values with the file's over them, one level, its own tags used") {
  Scratch s;
  const std::string variant = R"(schema_version = 1
name = "variant"
base = "b200"
description = "b200 with half its NIC rate"
[sources]
mine = { kind = "estimate", ref = "a test's value" }
[node]
nic_efficiency = 0.5
key_src = { nic_efficiency = "mine" }
)";
  const ClusterSpec b200 = load_cluster("b200");
  const ClusterSpec v = load_cluster(s.write(variant).string());
  CHECK(v.name == "variant");
  CHECK(v.base_profile == "b200");
  CHECK(v.node.nic_efficiency == 0.5);
  CHECK(v.sources.at("node.nic_efficiency") == "mine");
  // Everything else is the base's, sources included.
  CHECK(v.node.nic_bandwidth_bytes_per_s == b200.node.nic_bandwidth_bytes_per_s);
  CHECK(v.sources.at("node.nic_bandwidth_bytes_per_s") == b200.sources.at("node.nic_bandwidth_bytes_per_s"));
  CHECK(v.gpu.sm_count == b200.gpu.sm_count);
  REQUIRE(v.gpu.gemm_curves.size() == b200.gpu.gemm_curves.size());
  CHECK(v.gpu.gemm_curves.front().points.size() == b200.gpu.gemm_curves.front().points.size());
  CHECK(v.fabric.transport_latency_seconds == 0);
  expect_error(s, edited(variant, "base = \"b200\"", "base = \"no-such-gpu\""), "base",
               "is not a shipped hardware profile");
  expect_error(s, edited(variant, "base = \"b200\"", "base = 3"), "base", "must name a shipped hardware profile");
  expect_error(s, edited(variant, "base = \"b200\"", "base = \"p6-b200\""), "base",
               "names a base of its own: one level only");
  expect_error(s, edited(variant, "[node]", "spare = { kind = \"estimate\", ref = \"unused\" }\n[node]"),
               "sources.spare", "declared but no value uses it");
}

TEST_CASE("unknown names and missing files name the file") {
  try {
    load_cluster("no-such-gpu");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.file() == profile_path("no-such-gpu").string());
    const std::string what = e.what();
    CHECK(what.find("no-such-gpu.toml") != std::string::npos);
    CHECK(what.find("h100-sxm-80gb") != std::string::npos);  // lists what exists
  }
  CHECK_THROWS_AS(load_cluster("../secrets"), InputError);
  CHECK_THROWS_AS(load_cluster("aliases"), InputError);
  const std::string missing = (fs::temp_directory_path() / "meshplan-nonexistent.toml").string();
  try {
    load_cluster(missing);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.file() == missing);
    CHECK(std::string(e.what()).find(missing) != std::string::npos);
  }
}

TEST_CASE("bad profiles are rejected naming the file and the dotted key") {
  const std::string good = slurp(profile_path("h100-sxm-80gb"));
  REQUIRE_FALSE(good.empty());
  Scratch s;
  // The unedited copy loads by path (the scratch name differs from `name`, which is allowed).
  CHECK(load_cluster(s.write(good).string()).name == "h100-sxm-80gb");

  SUBCASE("unknown key") {
    expect_error(s, edited(good, "sm_count = 132\n", "sm_count = 132\nsm_clock_mhz = 1830\n"),
                 "gpu.sm_clock_mhz", "unknown key");
  }
  SUBCASE("fitted sources declare their bounds and fit, and their values stay inside the bounds") {
    expect_error(s, edited(good, "gemm_stream_k_min_saving = 0.235", "gemm_stream_k_min_saving = 0.7"),
                 "gpu.gemm_stream_k_min_saving", "outside its source's bounds [0, 0.5]");
    expect_error(s, edited(good, "bounds = [0.0, 0.5], ", ""), "sources.stream_k_fit.bounds",
                 "must give the bounds");
    expect_error(s, edited(good, "bounds = [0.0, 0.5], ", "bounds = [0.5, 0.0], "),
                 "sources.stream_k_fit.bounds", "low <= high");
    expect_error(s, edited(good, "kind = \"fitted\", ref = \"fitted, not measured: cuBLAS", "kind = \"estimate\", ref = \"cuBLAS"),
                 "sources.stream_k_fit.bounds", "only a fitted source");
  }
  SUBCASE("wrong type: string for an integer") {
    expect_error(s, edited(good, "sm_count = 132", "sm_count = \"132\""), "gpu.sm_count",
                 "must be an integer, got a string");
  }
  SUBCASE("wrong type: float for an integer") {
    expect_error(s, edited(good, "gpus_per_node = 8", "gpus_per_node = 8.0"),
                 "node.gpus_per_node", "must be an integer, got a float");
  }
  SUBCASE("negative bandwidth") {
    expect_error(s, edited(good, "nvlink_bandwidth_gb_per_s = 450", "nvlink_bandwidth_gb_per_s = -450"),
                 "node.nvlink_bandwidth_gb_per_s", "must be > 0");
  }
  SUBCASE("zero size") {
    expect_error(s, edited(good, "hbm_gb = 80", "hbm_gb = 0"), "gpu.hbm_gb", "must be > 0");
  }
  SUBCASE("efficiency above 1") {
    expect_error(s, edited(good, "nvlink_efficiency = 0.822", "nvlink_efficiency = 1.2"),
                 "node.nvlink_efficiency", "(0, 1]");
  }
  SUBCASE("per-tile GEMM overhead out of range") {
    expect_error(s, edited(good, "hbm_efficiency = 0.866", "hbm_efficiency = 0.866\ngemm_tile_overhead_k = -1"),
                 "gpu.gemm_tile_overhead_k", "must be >= 0");
    expect_error(s, edited(good, "hbm_efficiency = 0.866", "hbm_efficiency = 0.866\ngemm_tile_overhead_k = 128000"),
                 "gpu.gemm_tile_overhead_k", "units of K");
  }
  SUBCASE("efficiency of 0") {
    expect_error(s, edited(good, "hbm_efficiency = 0.866", "hbm_efficiency = 0"),
                 "gpu.hbm_efficiency", "(0, 1]");
  }
  SUBCASE("curve efficiency above 1") {
    expect_error(s, edited(good, "efficiency = [0.1785,", "efficiency = [1.1785,"),
                 "gpu.gemm_curve[0].efficiency[0]", "(0, 1]");
  }
  SUBCASE("missing required key") {
    expect_error(s, edited(good, "sm_count = 132\n", ""), "gpu.sm_count",
                 "missing required key");
  }
  SUBCASE("missing unit-suffixed key lists the spellings") {
    expect_error(s, edited(good, "hbm_bandwidth_tb_per_s = 3.35\n", ""),
                 "gpu.hbm_bandwidth_bytes_per_s", "hbm_bandwidth_tb_per_s");
  }
  SUBCASE("the same value in two units") {
    expect_error(s, edited(good, "hbm_gb = 80\n", "hbm_gb = 80\nhbm_gib = 74.5\n"),
                 "gpu.hbm_gib", "given twice");
  }
  SUBCASE("unknown dtype in the peak table") {
    expect_error(s, edited(good, "fp32 = 66.9\n", "fp32 = 66.9\nfp64 = 33.5\n"),
                 "gpu.peak_tflops.fp64", "unknown key");
  }
  SUBCASE("unknown vocabulary value") {
    expect_error(s, edited(good, "transport = \"infiniband\"", "transport = \"myrinet\""),
                 "fabric.transport", "unknown value \"myrinet\"");
  }
  SUBCASE("curve points out of order") {
    expect_error(s, edited(good, "cube_dim = [1024, 2048, 4096, 8192, 10240]",
                           "cube_dim = [1024, 4096, 2048, 8192, 10240]"),
                 "gpu.gemm_curve[0].cube_dim", "strictly increasing");
  }
  SUBCASE("curve arrays of different lengths") {
    expect_error(s, edited(good, "tflops = [215, 254, 274, 288, 294, 296]", "tflops = [215, 254]"),
                 "gpu.attention_curve[0].tflops", "has 2 values but seq_len has 6");
  }
  SUBCASE("a value without a source") {
    expect_error(s, edited(good, "[gpu]\nsrc = \"h100_spec\"\n", "[gpu]\n"), "gpu.model",
                 "no source");
  }
  SUBCASE("a source tag that is not declared") {
    expect_error(s, edited(good, "hbm_efficiency = \"azure_h100_stream\"", "hbm_efficiency = \"azure_h100_strem\""),
                 "gpu.key_src.hbm_efficiency", "unknown source tag");
  }
  SUBCASE("a declared source tag that nothing uses") {
    expect_error(s, edited(good, "[sources]\n", "[sources]\nstale = { kind = \"spec\", ref = \"old datasheet\" }\n"),
                 "sources.stale", "no value uses it");
  }
  SUBCASE("a source kind outside the vocabulary") {
    expect_error(s, edited(good, "h100_spec = { kind = \"spec\"", "h100_spec = { kind = \"rumour\""),
                 "sources.h100_spec.kind", "unknown kind");
  }
  SUBCASE("key_src naming a key the table does not have") {
    expect_error(s, edited(good, "sm_count = \"h100_sm_count\",", "sm_count = \"h100_sm_count\", clock_mhz = \"h100_spec\","),
                 "gpu.key_src.clock_mhz", "not a sourced value");
  }
  SUBCASE("NVLS without NVSwitch") {
    expect_error(s, edited(good, "scaleup_kind = \"nvswitch\"", "scaleup_kind = \"pcie\""),
                 "node.nvls", "NVLS needs NVSwitch");
  }
  SUBCASE("NVLink domain not a multiple of the node") {
    expect_error(s, edited(good, "nvlink_domain_gpus = 8", "nvlink_domain_gpus = 12"),
                 "node.nvlink_domain_gpus", "multiple of gpus_per_node");
  }
  SUBCASE("schema version") {
    expect_error(s, edited(good, "schema_version = 1", "schema_version = 2"), "schema_version",
                 "must be 1");
  }
  SUBCASE("TOML syntax error reports line and column") {
    const fs::path p = s.write(edited(good, "hbm_gb = 80", "hbm_gb = = 80"));
    try {
      load_cluster(p.string());
      FAIL("no error");
    } catch (const InputError& e) {
      const std::string what = e.what();
      CHECK(e.file() == p.string());
      CHECK(what.find(p.string()) != std::string::npos);
      CHECK(what.find("TOML syntax error at line") != std::string::npos);
      CHECK(what.find("column") != std::string::npos);
    }
  }
}

TEST_CASE("[collectives] is reserved: accepted with a warning, never silently used") {
  const std::string good = slurp(profile_path("h100-sxm-80gb"));
  Scratch s;
  const ClusterSpec c =
      load_cluster(s.write(good + "\n[collectives]\nlibrary = \"nccl\"\n").string());
  REQUIRE(c.warnings.size() == 1);
  CHECK(c.warnings[0].find("[collectives]") != std::string::npos);
  // A root key must come before the first table header.
  expect_error(s, "collectives = 3\n" + good, "collectives", "must be a table");
}

TEST_CASE("nccl_version: a profile names the NCCL table its collectives are priced with") {
  const std::string good = slurp(profile_path("a100-80gb"));
  const auto with_version = [&](const std::string& v) {
    return edited(good, "\n[sources]\n", "\nnccl_version = \"" + v + "\"\n\n[sources]\n");
  };
  Scratch s;
  const GroupPlacement node{8, 8};
  const ClusterSpec plain = load_cluster(profile_path("a100-80gb").string());
  CHECK(plain.nccl_version == kDefaultNcclVersion);
  CHECK(plain.nccl == nullptr);
  const double t_default = estimate_collective(plain, CollectiveOp::all_reduce, 1 << 20, node).seconds;

  SUBCASE("the shipped version named explicitly prices exactly as the default") {
    const ClusterSpec c = load_cluster(s.write(with_version(std::string(kDefaultNcclVersion))).string());
    REQUIRE(c.nccl != nullptr);
    CHECK(c.nccl->version == kDefaultNcclVersion);
    CHECK(estimate_collective(c, CollectiveOp::all_reduce, 1 << 20, node).seconds == t_default);
  }
  SUBCASE("a table of its own (a path beside the profile) is the one used") {
    // A table whose Ring and Tree base latencies are 100 us (instead of 6.6-14): the only
    // candidates of a 1 MiB all-reduce on 8 A100s (no NVLS), so its time must grow by > 50 us
    // whichever pair wins, and match the same table passed explicitly.
    const std::string shipped = slurp(test::data_root() / "hardware_profiles" / "nccl" /
                                      ("nccl-" + std::string(kDefaultNcclVersion) + ".toml"));
    const std::string table_text = edited(edited(shipped, "ring = [6.6, 14.0, 8.4]", "ring = [100.0, 100.0, 100.0]"),
                                          "tree = [6.8, 14.0, 8.4]", "tree = [100.0, 100.0, 100.0]");
    const fs::path table_file = s.write(table_text);
    const ClusterSpec c = load_cluster(s.write(with_version(table_file.filename().string())).string());
    REQUIRE(c.nccl != nullptr);
    CHECK(c.nccl->base_latency_seconds[static_cast<int>(NcclAlgo::ring)][2] == doctest::Approx(100e-6));
    const NcclTable own = load_nccl_table(table_file.string());
    CollectiveOptions explicit_table;
    explicit_table.nccl = &own;
    const double t_profile = estimate_collective(c, CollectiveOp::all_reduce, 1 << 20, node).seconds;
    CHECK(t_profile == estimate_collective(plain, CollectiveOp::all_reduce, 1 << 20, node, explicit_table).seconds);
    CHECK(t_profile > t_default + 50e-6);
  }
  SUBCASE("--nccl-version replaces the profile's table; an unknown one names the flag and the versions") {
    ClusterSpec c = plain;
    override_nccl_version(c, std::string(kDefaultNcclVersion));
    REQUIRE(c.nccl != nullptr);
    CHECK(estimate_collective(c, CollectiveOp::all_reduce, 1 << 20, node).seconds == t_default);
    try {
      override_nccl_version(c, "9.9.9");
      FAIL("no error for --nccl-version 9.9.9");
    } catch (const InputError& e) {
      CHECK(e.key() == "--nccl-version");
      CHECK(std::string(e.what()).find("unknown NCCL version '9.9.9' (available: " +
                                       std::string(kDefaultNcclVersion)) != std::string::npos);
    }
  }
  expect_error(s, with_version("9.9.9"), "nccl_version", "unknown NCCL version '9.9.9' (available: 2.30.7");
  expect_error(s, with_version("../x"), "nccl_version", "neither an NCCL version nor a .toml path");
}

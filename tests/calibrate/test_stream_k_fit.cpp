// cuBLAS's stream-K threshold fitted to GEMMs timed by shape (calibrate --gemm-shapes): a GEMM's
// saving by hand, the shipped value is what the committed command gives on the committed H200
// series, a series priced by the model at a known threshold gives that threshold back, and a
// malformed series is one error naming the line and the column.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "calibrate/stream_k_fit.hpp"
#include "cost/compute_cost.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/data_root.hpp"
#include "spec/error.hpp"

using namespace meshplan;
using namespace meshplan::calibrate;
namespace fs = std::filesystem;

namespace {

const fs::path kShapes = data_root() / "tests" / "cost" / "measured_h200_shapes.csv";
const std::vector<std::string> kSeries{"gemm_wave", "gemm_square"};

std::string shapes_error(const std::string& body) {
  const fs::path p = fs::temp_directory_path() / "meshplan_test_gemm_shapes.csv";
  {
    std::ofstream out(p);
    out << body;
  }
  try {
    (void)read_gemm_shapes(p.string(), kSeries);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("stream-K threshold: a GEMM's saving by hand (4096 x 768 x 4096 on 132 SMs)") {
  // 32 x 3 = 96 tiles of 128x256: one wave, each SM one tile's K loop plus k0 = 128, i.e.
  // 132 x 128 x 256 x 4224 MACs of SM time; stream-K spreads 4096 x 768 x 4224 over the SMs plus
  // one tile's k0: 13,287,555,072 + 553,648,128 against 18,270,388,224. The clock and the per-tile
  // rate scale both alike, so stream-K saves 1 - 0.757576 = 8/33 of the wave.
  const ClusterSpec h200 = load_cluster("h200-141gb");
  const GemmShapePoint p{"hand", "n768", GemmShape{4096, 768, 4096, 1}, 35e-6, 1};
  const StreamKFit fit = fit_stream_k_min_saving({p}, h200, {0.0, 0.5});
  REQUIRE(fit.points.size() == 1);
  CHECK(fit.points[0].saving == doctest::Approx(8.0 / 33.0).epsilon(1e-12));
  // The seconds add the kernel's fixed latency to both, so stream-K is faster by less than 8/33.
  CHECK(fit.points[0].stream_k_seconds < fit.points[0].whole_tiles_seconds);
}

TEST_CASE("stream-K threshold: the shipped value is the committed fit of the H200 series") {
  const std::vector<GemmShapePoint> points = read_gemm_shapes(kShapes.string(), kSeries);
  REQUIRE(points.size() == 30);  // 17 wave + 13 square
  const ClusterSpec h200 = load_cluster("h200-141gb");
  const StreamKFit fit = fit_stream_k_min_saving(points, h200, {0.0, 0.5});
  // The other six are priced alike on both sides of their flip (128x128 tiles win, or the two
  // schedules tie there).
  CHECK(fit.points.size() == 24);
  CHECK(fit.lo == doctest::Approx(0.2273).epsilon(1e-3));
  CHECK(fit.hi == doctest::Approx(0.2424).epsilon(1e-3));
  CHECK(fit.misclassified == 6);
  // tests/regen_fits.sh writes it into every profile that declares it fitted (0.5 %, the tolerance
  // of every shipped fitted value), and the shipped value prices the series as the fit does.
  for (const char* profile : {"h200-141gb", "h100-sxm-80gb", "a100-80gb", "b200", "gb200"}) {
    CAPTURE(profile);
    const double shipped = load_cluster(profile).gpu.gemm_stream_k_min_saving;
    CHECK(shipped == doctest::Approx(fit.min_saving).epsilon(0.005));
    CHECK(shipped > fit.lo);
    CHECK(shipped < fit.hi);
  }
}

TEST_CASE("stream-K threshold: a series the model prices at a known threshold gives it back") {
  // Times priced by the model itself at 0.30: each point the model's own time at that threshold.
  ClusterSpec h200 = load_cluster("h200-141gb");
  std::vector<GemmShapePoint> points;
  for (const std::int64_t side : {1536, 1664, 1792, 1920, 2176, 2304, 2432, 2560, 2816}) {
    GemmShapePoint p{"made", std::to_string(side), GemmShape{side, side, 4096, 1}, 0, 1};
    ClusterSpec at = h200;
    at.gpu.gemm_stream_k_min_saving = 0.30;
    at.gpu.sustained_clock_fraction = 1;  // each is shorter than 100 us at the burst clock
    p.seconds = gemm_time(at, p.shape, Dtype::bf16).seconds;
    REQUIRE(p.seconds < kSustainedKernelSeconds);
    points.push_back(p);
  }
  const StreamKFit fit = fit_stream_k_min_saving(points, h200, {0.0, 0.5});
  CHECK(fit.squared_log_error == doctest::Approx(0.0).epsilon(1e-20));
  CHECK(fit.misclassified == 0);
  CHECK(fit.lo < 0.30);
  CHECK(fit.hi > 0.30);
}

TEST_CASE("stream-K threshold: a malformed series is one error naming the line and the column") {
  const std::string header = "series,label,dtype,m,n,k,groups,flops,seconds\n";
  CHECK(shapes_error("").find("empty: no header row") != std::string::npos);
  CHECK(shapes_error("m,n,k\n").find("line 1") != std::string::npos);
  CHECK(shapes_error(header + "gemm_wave,x,bf16,4096,abc,4096,1,1,1e-5\n").find("line 2: n: 'abc' is not a number") !=
        std::string::npos);
  CHECK(shapes_error(header + "gemm_wave,x,bf16,4096,64,4096,1,1,-1\n").find("line 2: seconds") != std::string::npos);
  CHECK(shapes_error(header + "gemm_wave,x,bf16,4096,64\n").find("line 2: row: has 5 columns") != std::string::npos);
  CHECK(shapes_error(header + "other,x,bf16,4096,64,4096,1,1,1e-5\n").find("no bf16 GEMM of series gemm_wave, gemm_square") !=
        std::string::npos);
}

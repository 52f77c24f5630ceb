// The NCCL table's pipeline ramp, fitted to nccl-tests points (calibrate --nccl-tests): the shipped
// values are what the committed command gives on the committed series, a series made by the model
// itself gives back the values it was made with, and a malformed series is one error naming the
// line and the column.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "calibrate/pipeline_ramp_fit.hpp"
#include "spec/cluster_loader.hpp"
#include "spec/data_root.hpp"
#include "spec/error.hpp"
#include "spec/nccl_table.hpp"

using namespace meshplan;
using namespace meshplan::calibrate;
namespace fs = std::filesystem;

namespace {

const fs::path kSeries = data_root() / "hardware_profiles" / "nccl" / "series" / "azure-nd-a100-v4-all-reduce.csv";

std::map<std::string, ClusterSpec> a100_only() { return {{"a100-80gb", load_cluster("a100-80gb")}}; }

std::string series_error(const std::string& body) {
  const fs::path p = fs::temp_directory_path() / "meshplan_test_series.csv";
  {
    std::ofstream out(p);
    out << body;
  }
  try {
    (void)read_nccl_tests_series(p.string());
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("pipeline ramp: the shipped values are the committed fit of the committed series") {
  const std::vector<NcclTestsPoint> points = read_nccl_tests_series(kSeries.string());
  REQUIRE(points.size() == 22);
  CHECK(points[0].bytes == 1024);
  CHECK(points[0].launch == LaunchMode::single_process_multi_gpu);
  CHECK(points[0].amd_host);
  CHECK(points.back().busbw_bytes_per_s == doctest::Approx(231.58e9));
  const NcclTable& t = default_nccl_table();
  const RampFit fit = fit_pipeline_ramp(points, a100_only(), t);
  CHECK(fit.points_used == 14);  // 1 MiB ... 8 GiB
  CHECK_FALSE(fit.at_bound);
  // tests/regen_fits.sh writes the fit into the table; it must not have drifted (0.5 %, the
  // tolerance of every shipped fitted value).
  CHECK(t.pipeline_small_message_efficiency == doctest::Approx(fit.small_message_efficiency).epsilon(0.005));
  CHECK(t.pipeline_half_ramp_bytes == doctest::Approx(fit.half_ramp_bytes).epsilon(0.005));
  // What it achieves: every point from 1 MiB within 10 % (three points share the largest error,
  // 1 MiB, 2 MiB and 128 MiB: the fit balances them).
  CHECK(fit.max_abs_relative_error < 0.10);
  int at_worst = 0;
  for (const RampResidual& r : fit.residuals)
    if (r.used && std::abs(r.predicted_busbw_bytes_per_s / r.point.busbw_bytes_per_s - 1) > fit.max_abs_relative_error - 0.002)
      ++at_worst;
  CHECK(at_worst >= 3);
}

TEST_CASE("pipeline ramp: a series made by the model gives back the values it was made with") {
  // Predict an 8-GPU A100 series with a ramp of 0.5 / 8 MiB, then fit it: the fit must find both
  // (the series pins them: the ramp moves every size from 1 MiB to a few hundred MiB).
  NcclTable made = default_nccl_table();
  made.pipeline_small_message_efficiency = 0.5;
  made.pipeline_half_ramp_bytes = 8.0 * 1024 * 1024;
  const std::map<std::string, ClusterSpec> clusters = a100_only();
  std::vector<NcclTestsPoint> points;
  for (double bytes = 1024.0 * 1024; bytes <= 4.0 * 1024 * 1024 * 1024; bytes *= 2) {
    NcclTestsPoint p;
    p.cluster = "a100-80gb";
    p.nodes = 1;
    p.gpus_per_node = 8;
    p.bytes = bytes;
    p.busbw_bytes_per_s = 1;  // replaced below by the model's own prediction
    points.push_back(p);
  }
  for (NcclTestsPoint& p : points) p.busbw_bytes_per_s = predicted_busbw(p, clusters.at(p.cluster), made);
  // Fit from the shipped table (other values than the made ones) over the bounds it declares.
  const RampFit fit = fit_pipeline_ramp(points, clusters, default_nccl_table());
  CHECK(fit.small_message_efficiency == doctest::Approx(0.5).epsilon(1e-3));
  CHECK(fit.half_ramp_bytes == doctest::Approx(8.0 * 1024 * 1024).epsilon(1e-3));
  CHECK(fit.max_abs_relative_error < 1e-4);
}

TEST_CASE("pipeline ramp: a malformed series names the file, the line and the column") {
  const std::string header = "cluster,op,nodes,gpus_per_node,launch,host_cpu,bytes,busbw_gbps\n";
  CHECK(series_error("# only a comment\n").find("empty: no header row") != std::string::npos);
  CHECK(series_error("bytes,busbw\n").find("line 1: the header must be cluster,op,") != std::string::npos);
  CHECK(series_error(header).find("no points after the header") != std::string::npos);
  CHECK(series_error(header + "a100-80gb,all_reduce,1,8,single_process,amd,1048576\n")
            .find("line 2: row: has 7 columns") != std::string::npos);
  CHECK(series_error(header + "a100-80gb,allreduce,1,8,single_process,amd,1048576,36.2\n")
            .find("line 2: op: unknown collective 'allreduce'") != std::string::npos);
  CHECK(series_error(header + "a100-80gb,all_reduce,1,8,threads,amd,1048576,36.2\n")
            .find("line 2: launch: 'threads' is not single_process") != std::string::npos);
  CHECK(series_error(header + "a100-80gb,all_reduce,1,8,single_process,arm,1048576,36.2\n")
            .find("line 2: host_cpu: 'arm' is not amd or intel") != std::string::npos);
  CHECK(series_error(header + "a100-80gb,all_reduce,1,8,single_process,amd,1048576,nan\n")
            .find("line 2: busbw_gbps: 'nan' is not a number") != std::string::npos);
  CHECK(series_error(header + "a100-80gb,all_reduce,1.5,8,single_process,amd,1048576,36.2\n")
            .find("line 2: nodes: '1.5' is not a whole number") != std::string::npos);
  CHECK(series_error(header + "a100-80gb,all_reduce,1,8,single_process,amd,-4,36.2\n")
            .find("line 2: bytes: -4 is outside") != std::string::npos);
  // Fewer than two points at the fit's sizes: nothing to fit two values to.
  const std::vector<NcclTestsPoint> one = {NcclTestsPoint{"a100-80gb", CollectiveOp::all_reduce, 1, 8,
                                                          LaunchMode::one_process_per_gpu, false, 64.0 * 1024 * 1024, 1e11, 2}};
  CHECK_THROWS_WITH_AS(fit_pipeline_ramp(one, a100_only(), default_nccl_table()),
                       doctest::Contains("the ramp's two values need at least two"), InputError);
}

// Measurements JSON <-> value types. The reader is as strict as the profile loader: a typo in a
// hand-edited or third-party measurements file must not silently drop a series from the fit.
#include "calibrate/measurements.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "spec/atomic_file.hpp"
#include "spec/error.hpp"
#include "spec/input_file.hpp"

namespace meshplan::calibrate {
namespace {

using nlohmann::json;

// Reads one JSON object, remembering which keys were consumed so the rest can be reported.
class ObjectReader {
public:
  ObjectReader(const json& j, std::string path, const std::string& file)
      : j_(j), path_(std::move(path)), file_(file) {
    if (!j_.is_object()) fail(path_, "must be a JSON object");
  }

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw InputError(file_, key, why);
  }
  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }

  const json* find(const std::string& k) {
    auto it = j_.find(k);
    if (it == j_.end()) return nullptr;
    used_.insert(k);
    return &*it;
  }
  const json& require(const std::string& k) {
    const json* v = find(k);
    if (v == nullptr) fail(key(k), "missing required key");
    return *v;
  }
  std::string text(const std::string& k, bool required = true) {
    const json* v = required ? &require(k) : find(k);
    if (v == nullptr || v->is_null()) return {};
    if (!v->is_string()) fail(key(k), "must be a string");
    return v->get<std::string>();
  }
  double number(const std::string& k, bool positive, bool required = true) {
    const json* v = required ? &require(k) : find(k);
    if (v == nullptr) return 0.0;
    if (!v->is_number()) fail(key(k), "must be a number");
    const double x = v->get<double>();
    if (!std::isfinite(x) || (positive && !(x > 0)) || (!positive && x < 0))
      fail(key(k), positive ? "must be a finite number > 0" : "must be a finite number >= 0");
    return x;
  }
  std::int64_t integer(const std::string& k, std::int64_t min_value, bool required = true,
                       std::int64_t fallback = 0) {
    const json* v = required ? &require(k) : find(k);
    if (v == nullptr) return fallback;
    if (!v->is_number_integer()) fail(key(k), "must be an integer");
    const std::int64_t x = v->get<std::int64_t>();
    if (x < min_value) fail(key(k), "must be >= " + std::to_string(min_value));
    return x;
  }
  bool flag(const std::string& k) {
    const json& v = require(k);
    if (!v.is_boolean()) fail(key(k), "must be true or false");
    return v.get<bool>();
  }
  Dtype dtype(const std::string& k) {
    const std::string s = text(k);
    const auto d = parse_dtype(s);
    if (!d || std::string(to_string(*d)) != s)
      fail(key(k), "unknown dtype \"" + s + "\" (expected fp32, tf32, bf16, fp16, fp8, fp8_block, mxfp8, fp4)");
    return *d;
  }
  CollectiveOp op(const std::string& k) {
    const std::string s = text(k);
    CollectiveOp out{};
    if (!parse_collective_op(s, out) || std::string(to_string(out)) != s)
      fail(key(k), "unknown collective \"" + s + "\"");
    return out;
  }
  const json& array(const std::string& k) {
    const json* v = find(k);
    static const json empty = json::array();
    if (v == nullptr) return empty;
    if (!v->is_array()) fail(key(k), "must be an array");
    return *v;
  }
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (used_.count(it.key()) == 0) fail(key(it.key()), "unknown key");
  }

private:
  const json& j_;
  std::string path_;
  const std::string& file_;
  std::set<std::string> used_;
};

std::string item_path(const std::string& array, std::size_t i) {
  return array + "[" + std::to_string(i) + "]";
}

json shape_json(const GemmShape& g) {
  return {{"m", g.m}, {"n", g.n}, {"k", g.k}, {"batch", g.batch}};
}

GemmShape read_shape(ObjectReader& r) {
  GemmShape g;
  g.m = r.integer("m", 1);
  g.n = r.integer("n", 1);
  g.k = r.integer("k", 1);
  g.batch = r.integer("batch", 1, false, 1);
  return g;
}

void check_scope(ObjectReader& r, const std::string& scope) {
  if (scope != "intra_node" && scope != "inter_node")
    r.fail(r.key("scope"), "must be \"intra_node\" or \"inter_node\", got \"" + scope + "\"");
}

DeviceInfo read_device(ObjectReader& d) {
  DeviceInfo dev;
  dev.name = d.text("name");
  dev.compute_capability = d.text("compute_capability", false);
  dev.sm_count = static_cast<int>(d.integer("sm_count", 0, false));
  dev.memory_bytes = d.number("memory_bytes", false, false);
  dev.l2_bytes = d.number("l2_bytes", false, false);
  dev.sm_clock_mhz = d.number("sm_clock_mhz", false, false);
  dev.memory_clock_mhz = d.number("memory_clock_mhz", false, false);
  dev.driver_version = d.text("driver_version", false);
  dev.cuda_runtime_version = d.text("cuda_runtime_version", false);
  dev.cublas_version = d.text("cublas_version", false);
  dev.nccl_version = d.text("nccl_version", false);
  dev.gpus_per_node = static_cast<int>(d.integer("gpus_per_node", 1, false, 1));
  dev.nodes = static_cast<int>(d.integer("nodes", 1, false, 1));
  dev.world_size = static_cast<int>(d.integer("world_size", 1, false, 1));
  return dev;
}

GemmSample read_gemm(ObjectReader& e) {
  GemmSample s;
  s.shape = read_shape(e);
  s.dtype = e.dtype("dtype");
  s.seconds = e.number("seconds", true);
  s.label = e.text("label", false);
  return s;
}

AttentionSample read_attention(ObjectReader& e) {
  AttentionSample s;
  s.kernel = e.text("kernel");
  s.fused = e.flag("fused");
  s.pass = e.text("pass");
  if (s.pass != "fwd+bwd" && s.pass != "fwd") e.fail(e.key("pass"), "must be \"fwd+bwd\" or \"fwd\"");
  s.dtype = e.dtype("dtype");
  s.shape.batch = e.integer("batch", 1);
  s.shape.heads = e.integer("heads", 1);
  s.shape.kv_heads = s.shape.heads;
  s.shape.seq_q = s.shape.seq_kv = e.integer("seq_len", 1);
  s.shape.head_dim = e.integer("head_dim", 1);
  s.shape.causal = e.flag("causal");
  s.seconds = e.number("seconds", true);
  return s;
}

StreamSample read_stream(ObjectReader& e) {
  StreamSample s;
  s.kernel = e.text("kernel");
  s.bytes = e.number("bytes", true);
  s.seconds = e.number("seconds", true);
  return s;
}

HostCopySample read_host_copy(ObjectReader& e) {
  HostCopySample s;
  s.direction = e.text("direction");
  if (s.direction != "h2d" && s.direction != "d2h") e.fail(e.key("direction"), "must be \"h2d\" or \"d2h\"");
  s.bytes = e.number("bytes", true);
  s.seconds = e.number("seconds", true);
  return s;
}

CollectiveSample read_collective(ObjectReader& e) {
  CollectiveSample s;
  s.op = e.op("op");
  s.scope = e.text("scope");
  check_scope(e, s.scope);
  s.ranks = static_cast<int>(e.integer("ranks", 2));
  s.nodes = static_cast<int>(e.integer("nodes", 1));
  s.bytes = e.number("bytes", true);
  s.seconds = e.number("seconds", true);
  return s;
}

InterferenceSample read_interference(ObjectReader& e) {
  InterferenceSample s;
  s.shape = read_shape(e);
  s.dtype = e.dtype("dtype");
  s.alone_seconds = e.number("alone_seconds", true);
  s.with_comm_seconds = e.number("with_comm_seconds", true);
  s.comm_op = e.op("comm_op");
  s.comm_bytes = e.number("comm_bytes", true);
  s.comm_ranks = static_cast<int>(e.integer("comm_ranks", 1));
  return s;
}

// The objects of array `name` (absent: none), each read by `read_one` and checked for unknown keys.
template <typename ReadOne>
auto read_samples(ObjectReader& r, const char* name, const std::string& file, ReadOne read_one) {
  std::vector<decltype(read_one(std::declval<ObjectReader&>()))> out;
  const json& a = r.array(name);
  for (std::size_t i = 0; i < a.size(); ++i) {
    ObjectReader e(a[i], item_path(name, i), file);
    auto s = read_one(e);
    e.finish();
    out.push_back(s);
  }
  return out;
}

}  // namespace

json to_json(const Measurements& m) {
  json j;
  j["schema"] = "meshplan-calibration";
  j["schema_version"] = m.schema_version;
  j["generator"] = m.generator;
  j["created_utc"] = m.created_utc;
  j["host"] = m.host;
  j["mode"] = m.mode;
  const DeviceInfo& d = m.device;
  j["device"] = {{"name", d.name},
                 {"compute_capability", d.compute_capability},
                 {"sm_count", d.sm_count},
                 {"memory_bytes", d.memory_bytes},
                 {"l2_bytes", d.l2_bytes},
                 {"sm_clock_mhz", d.sm_clock_mhz},
                 {"memory_clock_mhz", d.memory_clock_mhz},
                 {"driver_version", d.driver_version},
                 {"cuda_runtime_version", d.cuda_runtime_version},
                 {"cublas_version", d.cublas_version},
                 {"nccl_version", d.nccl_version},
                 {"gpus_per_node", d.gpus_per_node},
                 {"nodes", d.nodes},
                 {"world_size", d.world_size}};
  j["gemm"] = json::array();
  for (const GemmSample& s : m.gemm) {
    json e = shape_json(s.shape);
    e["dtype"] = to_string(s.dtype);
    e["seconds"] = s.seconds;
    e["label"] = s.label;
    j["gemm"].push_back(e);
  }
  j["attention"] = json::array();
  for (const AttentionSample& s : m.attention)
    j["attention"].push_back({{"kernel", s.kernel}, {"fused", s.fused}, {"pass", s.pass},
                              {"dtype", to_string(s.dtype)}, {"batch", s.shape.batch},
                              {"heads", s.shape.heads}, {"seq_len", s.shape.seq_q},
                              {"head_dim", s.shape.head_dim}, {"causal", s.shape.causal},
                              {"seconds", s.seconds}});
  auto streams = [](const std::vector<StreamSample>& v) {
    json a = json::array();
    for (const StreamSample& s : v)
      a.push_back({{"kernel", s.kernel}, {"bytes", s.bytes}, {"seconds", s.seconds}});
    return a;
  };
  j["hbm"] = streams(m.hbm);
  j["launch"] = streams(m.launch);
  j["host_copy"] = json::array();
  for (const HostCopySample& s : m.host_copy)
    j["host_copy"].push_back({{"direction", s.direction}, {"bytes", s.bytes}, {"seconds", s.seconds}});
  j["collectives"] = json::array();
  for (const CollectiveSample& s : m.collectives)
    j["collectives"].push_back({{"op", to_string(s.op)}, {"scope", s.scope}, {"ranks", s.ranks},
                                {"nodes", s.nodes}, {"bytes", s.bytes}, {"seconds", s.seconds}});
  j["interference"] = json::array();
  for (const InterferenceSample& s : m.interference) {
    json e = shape_json(s.shape);
    e["dtype"] = to_string(s.dtype);
    e["alone_seconds"] = s.alone_seconds;
    e["with_comm_seconds"] = s.with_comm_seconds;
    e["comm_op"] = to_string(s.comm_op);
    e["comm_bytes"] = s.comm_bytes;
    e["comm_ranks"] = s.comm_ranks;
    j["interference"].push_back(e);
  }
  j["notes"] = m.notes;
  return j;
}

Measurements measurements_from_json(const json& j, const std::string& file) {
  Measurements m;
  ObjectReader r(j, "", file);
  if (r.text("schema") != "meshplan-calibration")
    r.fail("schema", "must be \"meshplan-calibration\" (not a meshplan measurements file)");
  m.schema_version = static_cast<int>(r.integer("schema_version", 1));
  if (m.schema_version != kMeasurementsSchemaVersion)
    r.fail("schema_version", "must be " + std::to_string(kMeasurementsSchemaVersion));
  m.generator = r.text("generator");
  m.created_utc = r.text("created_utc", false);
  m.host = r.text("host", false);
  m.mode = r.text("mode");
  {
    ObjectReader d(r.require("device"), "device", file);
    m.device = read_device(d);
    d.finish();
  }
  m.gemm = read_samples(r, "gemm", file, read_gemm);
  m.attention = read_samples(r, "attention", file, read_attention);
  m.hbm = read_samples(r, "hbm", file, read_stream);
  m.launch = read_samples(r, "launch", file, read_stream);
  m.host_copy = read_samples(r, "host_copy", file, read_host_copy);
  m.collectives = read_samples(r, "collectives", file, read_collective);
  m.interference = read_samples(r, "interference", file, read_interference);
  const json& notes = r.array("notes");
  for (std::size_t i = 0; i < notes.size(); ++i) {
    if (!notes[i].is_string()) r.fail(item_path("notes", i), "must be a string");
    m.notes.push_back(notes[i].get<std::string>());
  }
  r.finish();
  return m;
}

Measurements read_measurements(const std::string& path) {
  const std::string text = read_input_file(path, InputKind::measurements);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw InputError(path, "", "JSON syntax error: " + what);
  } catch (const json::exception&) {
    // out_of_range 406: a number past a double; the library's message repeats the whole number.
    throw InputError(path, "", "JSON number out of range (larger than a 64-bit float holds)");
  }
  return measurements_from_json(j, path);
}

void write_measurements(const Measurements& m, const std::string& path) {
  write_file_atomic(path, to_json(m).dump(1) + "\n", "--out");
}

}  // namespace meshplan::calibrate

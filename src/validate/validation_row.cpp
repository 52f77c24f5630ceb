// Validation rows: RFC-4180 CSV and the mapping of one published run onto a RunConfig.
// Column meanings and vocabularies: ../shared/validation/README.md. Every default used for an
// empty cell is written into ValidationCase::assumptions so the output can show it.
#include "validate/validation_row.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include "import/config_loader.hpp"
#include "spec/error.hpp"
#include "spec/framework_defaults.hpp"
#include "spec/input_file.hpp"
#include "spec/limits.hpp"
#include "spec/pipeline_split.hpp"
#include "spec/recompute_modules.hpp"
#include "spec/runtimes.hpp"

namespace meshplan {

// ---- CSV -----------------------------------------------------------------------------------

namespace {

struct CsvRecord {
  std::vector<std::string> fields;
  int line = 1;
};

// One character source for the parser: a string already in memory, or a file read in chunks, so
// that parse_csv_table and CsvRowStream share one parser and hold the same rules.
class CharSource {
public:
  explicit CharSource(std::string_view text) : view_(text) {}
  explicit CharSource(InputFile& file) : file_(&file) { refill(); }
  // Skips a UTF-8 byte-order mark at the start, which would otherwise become part of the first
  // column name.
  void skip_byte_order_mark() {
    if (pos_ == 0 && view_.starts_with("\xEF\xBB\xBF")) pos_ = 3;
  }
  // The next character, or -1 at the end.
  int get() {
    if (pos_ == view_.size() && !refill()) return -1;
    return static_cast<unsigned char>(view_[pos_++]);
  }
  // The character get() would return next, without taking it.
  int peek() {
    if (pos_ == view_.size() && !refill()) return -1;
    return static_cast<unsigned char>(view_[pos_]);
  }

private:
  bool refill() {
    if (file_ == nullptr) return false;
    chunk_.resize(64 * 1024);
    const std::size_t n = file_->read(chunk_.data(), chunk_.size());
    chunk_.resize(n);
    view_ = chunk_;
    pos_ = 0;
    return n > 0;
  }
  InputFile* file_ = nullptr;
  std::string chunk_;
  std::string_view view_;
  std::size_t pos_ = 0;
};

// A streamed file holds one record at a time; a record past this size is not a row of any
// validation CSV (dev.csv's longest is under 2 KB) but a file that is not one, which would
// otherwise be held whole (docs/limits.md).
constexpr std::size_t kMaxRecordBytes = 1024 * 1024;

// RFC 4180, one record per call: fields may be quoted ("a,b", "say ""hi""", "line\nbreak"); CRLF
// and LF both end a record; a trailing newline does not make an empty record.
class CsvParser {
public:
  CsvParser(CharSource& src, std::string file, std::size_t max_record_bytes)
      : src_(src), file_(std::move(file)), max_record_bytes_(max_record_bytes) {}

  // The next record into `rec`; false at the end of the input.
  bool next(CsvRecord& rec) {
    rec.fields.clear();
    std::string field;
    bool in_quotes = false, field_was_quoted = false;
    bool record_has_content = false;  // distinguishes "" (one empty field) from no record at all
    int quote_line = line_;
    std::size_t bytes = 0;
    rec.line = line_;
    auto end_field = [&] {
      rec.fields.push_back(std::move(field));
      field.clear();
      field_was_quoted = false;
    };
    for (int ci = src_.get(); ci >= 0; ci = src_.get()) {
      const char c = static_cast<char>(ci);
      if (++bytes > max_record_bytes_)
        throw InputError(file_, fmt::format("line {}", rec.line),
                         fmt::format("a record longer than {} bytes: not a validation CSV row (docs/limits.md)",
                                     max_record_bytes_));
      if (in_quotes) {
        if (c == '"') {
          if (src_.peek() == '"') {
            field.push_back('"');
            src_.get();
          } else {
            in_quotes = false;
          }
        } else {
          if (c == '\n') ++line_;
          field.push_back(c);
        }
        continue;
      }
      switch (c) {
        case '"':
          if (!field.empty() || field_was_quoted)
            throw InputError(file_, fmt::format("line {}", line_),
                             "a double quote inside an unquoted field (RFC 4180: quote the whole field "
                             "and double the quote)");
          in_quotes = true;
          field_was_quoted = true;
          record_has_content = true;
          quote_line = line_;
          break;
        case ',':
          end_field();
          record_has_content = true;
          break;
        case '\r':
          // CRLF ends a record like LF; a lone CR is kept as data.
          if (src_.peek() == '\n') break;
          field.push_back(c);
          record_has_content = true;
          break;
        case '\n':
          ++line_;
          if (record_has_content || !rec.fields.empty()) {
            end_field();
            return true;
          }
          rec.line = line_;
          bytes = 0;
          break;
        default:
          if (field_was_quoted)
            throw InputError(file_, fmt::format("line {}", line_),
                             fmt::format("character '{}' after the closing quote of a field", c));
          field.push_back(c);
          record_has_content = true;
      }
    }
    if (in_quotes) throw InputError(file_, fmt::format("line {}", quote_line), "unterminated quoted field");
    if (record_has_content || !rec.fields.empty()) {
      end_field();
      return true;
    }
    return false;
  }

private:
  CharSource& src_;
  std::string file_;
  std::size_t max_record_bytes_;
  int line_ = 1;
};

std::vector<CsvRecord> parse_records(std::string_view text, const std::string& file) {
  CharSource src(text);
  CsvParser parser(src, file, std::numeric_limits<std::size_t>::max());
  std::vector<CsvRecord> out;
  for (CsvRecord rec; parser.next(rec);) out.push_back(std::move(rec));
  return out;
}

// The header's rules: no empty and no repeated column name.
void check_header(const std::vector<std::string>& header, const std::string& file) {
  std::set<std::string> seen;
  for (const auto& h : header) {
    if (h.empty()) throw InputError(file, "line 1", "empty column name in the header");
    if (!seen.insert(h).second) throw InputError(file, "line 1", fmt::format("column '{}' appears twice", h));
  }
}

void check_width(const CsvRecord& rec, std::size_t columns, const std::string& file) {
  if (rec.fields.size() != columns)
    throw InputError(file, fmt::format("line {}", rec.line),
                     fmt::format("{} fields, but the header has {} columns", rec.fields.size(), columns));
}

}  // namespace

std::vector<std::vector<std::string>> parse_csv(std::string_view text, const std::string& file) {
  std::vector<std::vector<std::string>> out;
  for (auto& r : parse_records(text, file)) out.push_back(std::move(r.fields));
  return out;
}

CsvTable parse_csv_table(std::string_view text, const std::string& file) {
  // A UTF-8 byte-order mark would otherwise become part of the first column name.
  if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);
  std::vector<CsvRecord> recs = parse_records(text, file);
  if (recs.empty()) throw InputError(file, "line 1", "empty file: expected a header row");
  CsvTable t;
  t.file = file;
  t.header = std::move(recs.front().fields);
  check_header(t.header, file);
  for (std::size_t i = 1; i < recs.size(); ++i) {
    check_width(recs[i], t.header.size(), file);
    t.rows.push_back(std::move(recs[i].fields));
    t.row_lines.push_back(recs[i].line);
  }
  return t;
}

CsvTable read_csv_table(const std::string& path) {
  return parse_csv_table(read_input_file(path, InputKind::validation_csv_whole), path);
}

struct CsvRowStream::Impl {
  InputFile file;
  CharSource src;
  CsvParser parser;
  CsvRecord rec;
  Impl(const std::string& path)
      : file(path, InputKind::validation_csv), src(file), parser(src, path, kMaxRecordBytes) {}
};

CsvRowStream::CsvRowStream(const std::string& path) : impl_(std::make_unique<Impl>(path)) {
  Impl& x = *impl_;
  table_.file = path;
  x.src.skip_byte_order_mark();
  if (!x.parser.next(x.rec)) throw InputError(path, "line 1", "empty file: expected a header row");
  table_.header = std::move(x.rec.fields);
  check_header(table_.header, path);
  table_.rows.resize(1);
  table_.row_lines.resize(1);
}

CsvRowStream::~CsvRowStream() = default;

bool CsvRowStream::next() {
  Impl& x = *impl_;
  if (!x.parser.next(x.rec)) return false;
  check_width(x.rec, table_.header.size(), table_.file);
  table_.rows.front() = std::move(x.rec.fields);
  x.rec.fields = {};
  table_.row_lines.front() = x.rec.line;
  ++rows_read_;
  return true;
}

std::uint64_t CsvRowStream::bytes_read() const { return impl_->file.consumed(); }
std::uint64_t CsvRowStream::file_bytes() const { return impl_->file.size(); }

CsvRow::CsvRow(const CsvTable& t, std::size_t index) : table_(&t), index_(index) {
  for (std::size_t i = 0; i < t.header.size(); ++i) columns_.emplace(t.header[i], i);
}

const std::string& CsvRow::get(std::string_view column) const {
  static const std::string kEmpty;
  const auto it = columns_.find(column);
  if (it == columns_.end()) return kEmpty;
  return table_->rows[index_][it->second];
}

bool CsvRow::has_column(std::string_view column) const { return columns_.find(column) != columns_.end(); }

std::string_view to_string(MemoryMetric m) {
  switch (m) {
    case MemoryMetric::allocated: return "allocated";
    case MemoryMetric::reserved: return "reserved";
    case MemoryMetric::nvidia_smi: return "nvidia-smi";
    case MemoryMetric::unknown: return "unknown";
  }
  return "unknown";
}

std::string run_key(const std::string& id) {
  for (std::string_view suffix : {"-alloc", "-resv"})
    if (id.size() > suffix.size() && id.ends_with(suffix)) return id.substr(0, id.size() - suffix.size());
  return id;
}

// ---- row mapping -----------------------------------------------------------------------------

namespace {

// Thrown inside the mapping and turned into ValidationCase::skipped: a row the simulator cannot
// take is a result, not an error.
struct Skip {
  std::string reason;
};

// Sources whose software predates fused (Flash) attention: Megatron-LM of SC21 (2021) and of
// Korthikanti et al. (2022) used the fused softmax kernel that materializes the s x s scores,
// as did Megatron-DeepSpeed for BLOOM (2022) and metaseq for OPT (2021-22). Megatron-LM gained
// --use-flash-attn in 2023. Every other source used a fused attention kernel.
const std::set<std::string, std::less<>> kUnfusedAttentionSources = {"megatron-sc21", "korthikanti2022",
                                                                     "bloom-176b", "opt-175b"};

// Sources whose documented inter-node network is not the GPU profile's. BLOOM-176B trained on
// Jean Zay, whose A100 nodes are linked by 4 Omni-Path links per node (bigscience tr11-176B-ml
// README; Intel Omni-Path runs 100 Gb/s per link): a quarter of a DGX A100's 8 x 200 Gb/s HDR.
// llm-foundry's "1600 Gbps node-node interconnect" is the DGX A100 figure; the other sources
// state none.
const std::map<std::string, StatedNetwork, std::less<>> kStatedNetworks = {{"bloom-176b", {4, 100}}};

// Sources that leave the H100 variant out of a table but document the fleet they measure on
// elsewhere. torchao's float8 benchmarks run on Meta's H100 fleet: its roofline model
// (torchao/testing/float8/roofline_utils.py) takes the H100 as Meta's 96 GB HBM2e part at a lower
// TDP, 2.4 TB/s, with achievable GEMM rates "based on experimental observation" on it, the same
// 95.04 GiB part torchtitan's own published runs state (PR #165). Other sources' bare "H100" is
// the 80 GB SXM part, the one sold as "H100 SXM".
const std::map<std::string, std::string, std::less<>> kStatedFleets = {{"torchao-float8-readme", "h100-sxm-96gb"}};

// Megatron-family sources that document training without dropout: BLOOM-176B (its paper and the
// bigscience tr11-176B-ml launch script set hidden and attention dropout to 0).
const std::set<std::string, std::less<>> kNoDropoutSources = {"bloom-176b"};

class Reader {
public:
  explicit Reader(const CsvRow& r) : r_(r) {}

  const std::string& str(std::string_view col) const { return r_.get(col); }
  bool empty(std::string_view col) const { return trim(r_.get(col)).empty(); }

  std::optional<std::int64_t> opt_int(std::string_view col) const {
    const std::string s = trim(r_.get(col));
    if (s.empty()) return std::nullopt;
    std::int64_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size())
      throw Skip{fmt::format("{}: '{}' is not a base-10 integer", col, s)};
    return v;
  }
  std::int64_t req_int(std::string_view col) const {
    const auto v = opt_int(col);
    if (!v) throw Skip{fmt::format("{} is empty and the simulator needs it", col)};
    return *v;
  }
  std::int64_t positive(std::string_view col) const {
    const std::int64_t v = req_int(col);
    if (v <= 0) throw Skip{fmt::format("{}: must be positive, got {}", col, v)};
    return v;
  }
  // positive() with the documented maximum (docs/limits.md), checked before any narrowing.
  std::int64_t count(std::string_view col, std::int64_t max) const {
    const std::int64_t v = positive(col);
    if (v > max) throw Skip{fmt::format("{}: {} is above the maximum {} (docs/limits.md)", col, v, max)};
    return v;
  }
  std::optional<std::int64_t> opt_count(std::string_view col, std::int64_t max) const {
    const auto v = opt_int(col);
    if (v && (*v <= 0 || *v > max))
      throw Skip{*v <= 0 ? fmt::format("{}: must be positive, got {}", col, *v)
                         : fmt::format("{}: {} is above the maximum {} (docs/limits.md)", col, *v, max)};
    return v;
  }
  std::optional<double> opt_num(std::string_view col) const {
    const std::string s = trim(r_.get(col));
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(v))
      throw Skip{fmt::format("{}: '{}' is not a decimal number", col, s)};
    return v;
  }
  std::optional<bool> opt_flag(std::string_view col) const {
    const std::string s = trim(r_.get(col));
    if (s.empty()) return std::nullopt;
    if (s == "0") return false;
    if (s == "1") return true;
    throw Skip{fmt::format("{}: '{}' is not 0 or 1", col, s)};
  }
  // A closed vocabulary: "" when empty, else one of `allowed` (anything else skips the row).
  std::string vocab(std::string_view col, std::initializer_list<std::string_view> allowed) const {
    const std::string s = trim(r_.get(col));
    if (s.empty()) return s;
    for (auto a : allowed)
      if (s == a) return s;
    std::string list;
    for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    throw Skip{fmt::format("{}: '{}' is not in the vocabulary ({})", col, s, list)};
  }

  static std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return {};
    const auto e = s.find_last_not_of(" \t");
    return s.substr(b, e - b + 1);
  }

private:
  const CsvRow& r_;
};

Dtype dtype_of(const std::string& s) {
  if (s == "fp32") return Dtype::fp32;
  if (s == "fp16") return Dtype::fp16;
  return Dtype::bf16;
}

bool is_megatron_family(const std::string& fw) {
  return fw == "megatron" || fw == "nemo" || fw == "megatron-deepspeed";
}

// Megatron's flag for random (balanced) routing, as a row's notes quote the run's command line.
constexpr std::string_view kForceBalanceFlag = "--moe-router-force-load-balancing";
// How dev-moe's notes mark a row run with the expert all-to-all overlapped with the 1F1B schedule:
// the benchmark script's switch, or the table's '+1f1b overlap'.
constexpr std::string_view kA2aOverlapSwitch = "A2A_OVERLAP=1";
constexpr std::string_view kA2aOverlapNote = "1f1b overlap";
// How dev-moe's notes mark a row measured with the trained router's own routing.
constexpr std::string_view kNaturalRouting = "natural routing";

// The optional MoE / attention columns (README, section dev-moe.csv). Absent or empty: a dense
// model with d_model / n_heads heads (map_model's default).
void map_moe_columns(const Reader& r, ModelSpec& m, std::vector<std::string>& notes) {
  const std::string attn = r.vocab("attention", {"mha", "gqa", "mla"});
  if (attn == "mla") {
    m.attention = AttentionKind::mla;
    m.mla.q_lora_rank = r.opt_int("mla_q_lora_rank").value_or(0);
    if (m.mla.q_lora_rank < 0) throw Skip{fmt::format("mla_q_lora_rank: must not be negative, got {}", m.mla.q_lora_rank)};
    m.mla.kv_lora_rank = r.count("mla_kv_lora_rank", limits::kMaxWidth);
    m.mla.rope_head_dim = r.count("mla_rope_head_dim", limits::kMaxHeadDim);
    m.mla.v_head_dim = r.count("mla_v_head_dim", limits::kMaxHeadDim);
    m.n_kv_heads = m.n_heads;  // every head has its own key and value, from the shared latent
    if (r.empty("mla_q_lora_rank")) notes.push_back("mla_q_lora_rank empty: a full-rank query projection assumed");
  } else if (attn == "mha" && m.n_kv_heads != m.n_heads) {
    throw Skip{fmt::format("attention mha with n_kv_heads {} != n_heads {}", m.n_kv_heads, m.n_heads)};
  }
  const auto experts = r.opt_count("moe_experts", limits::kMaxExperts);
  if (!experts) {
    for (const char* col : {"moe_top_k", "moe_expert_ffn", "moe_shared_experts", "moe_dense_layers"})
      if (auto v = r.opt_int(col); v && *v != 0) throw Skip{fmt::format("{} is set but moe_experts is empty", col)};
    return;
  }
  m.moe.n_experts = static_cast<int>(*experts);
  m.moe.top_k = static_cast<int>(r.count("moe_top_k", limits::kMaxExperts));
  if (auto f = r.opt_count("moe_expert_ffn", limits::kMaxWidth)) {
    m.moe.expert_ffn = *f;
  } else {
    m.moe.expert_ffn = m.ffn_hidden;
    notes.push_back("moe_expert_ffn empty: ffn_hidden assumed as one expert's width");
  }
  auto non_negative = [&](const char* col, int& field, std::int64_t max) {
    const auto v = r.opt_int(col);
    if (!v) return;
    if (*v < 0 || *v > max) throw Skip{fmt::format("{}: {} is outside [0, {}]", col, *v, max)};
    field = static_cast<int>(*v);
  };
  non_negative("moe_shared_experts", m.moe.n_shared_experts, limits::kMaxExperts);
  non_negative("moe_dense_layers", m.moe.n_dense_layers, m.n_layers);
  // Dropless routing: the README's sources set no capacity factor. How the router routed: the
  // optional column where the file has it; else the row's notes, which quote the run's command
  // line (Megatron's flag for random, balanced routing) or say that the row is the natural
  // (trained) router's; a row that states neither (dev-moe's five main H100 rows) is read as
  // force-balanced, as every benchmark command of that source that is printed sets the flag
  // (docs/validation.md, "Routing").
  const std::string text = r.str("notes");
  const auto forced = r.opt_flag("moe_force_balance");
  const bool flag = text.find(kForceBalanceFlag) != std::string::npos;
  const bool natural = text.find(kNaturalRouting) != std::string::npos;
  m.moe.force_balance = forced ? *forced : flag || !natural;
  std::string note = m.moe.force_balance ? "MoE routing dropless (no capacity factor), force-balanced (random router scores)"
                                         : "MoE routing dropless (no capacity factor) by the trained router: its load "
                                           "imbalance priced (framework.moe_router_load_cv)";
  if (!forced && !flag && !natural) note += "; routing not stated: a benchmark's forced balance assumed";
  notes.push_back(note);
}

ModelSpec map_model(const Reader& r, const std::string& framework, int tp, std::vector<std::string>& notes) {
  ModelSpec m;
  m.name = r.str("model").empty() ? r.str("id") : r.str("model");
  m.n_layers = static_cast<int>(r.count("n_layers", limits::kMaxLayers));
  m.d_model = r.count("d_model", limits::kMaxWidth);
  m.n_heads = static_cast<int>(r.count("n_heads", limits::kMaxHeads));
  if (auto kv = r.opt_count("n_kv_heads", limits::kMaxHeads)) {
    m.n_kv_heads = static_cast<int>(*kv);
  } else {
    m.n_kv_heads = m.n_heads;
    notes.push_back("n_kv_heads empty: multi-head attention assumed (n_kv_heads = n_heads)");
  }
  if (auto hd = r.opt_count("head_dim", limits::kMaxHeadDim)) {
    m.head_dim = *hd;
  } else {
    if (m.d_model % m.n_heads != 0)
      throw Skip{fmt::format("d_model {} is not divisible by n_heads {} (head_dim is not stated)", m.d_model, m.n_heads)};
    m.head_dim = m.d_model / m.n_heads;
  }
  map_moe_columns(r, m, notes);

  const std::string mlp = r.vocab("mlp", {"gelu", "swiglu", "relu2"});
  if (mlp.empty()) throw Skip{"mlp is empty and the simulator needs it"};
  m.mlp = mlp == "swiglu" ? MlpKind::swiglu : mlp == "relu2" ? MlpKind::relu2 : MlpKind::gelu;
  if (auto f = r.opt_count("ffn_hidden", limits::kMaxWidth)) {
    m.ffn_hidden = *f;
  } else {
    if (m.mlp == MlpKind::swiglu) throw Skip{"ffn_hidden is empty and a SwiGLU width has no single convention"};
    m.ffn_hidden = 4 * m.d_model;
    notes.push_back("ffn_hidden empty: 4 x d_model assumed (2-matrix MLP convention)");
  }

  const std::string pos = r.vocab("pos_emb", {"learned", "rope", "alibi", "none"});
  if (pos.empty()) throw Skip{"pos_emb is empty and the simulator needs it"};
  m.pos_emb = pos == "learned" ? PosEmb::learned : pos == "alibi" ? PosEmb::alibi : pos == "none" ? PosEmb::none : PosEmb::rope;
  // GPT-2/GPT-3/MPT/OPT (learned positions) and BLOOM (ALiBi) use LayerNorm with biases on every
  // linear layer; the RoPE families (Llama, Nemotron, Mistral, ...) use RMSNorm-style norms
  // without linear biases. No column states the norm, so the position scheme decides.
  const bool gpt_style = m.pos_emb == PosEmb::learned || m.pos_emb == PosEmb::alibi;
  m.norm = gpt_style ? NormKind::layernorm : NormKind::rmsnorm;
  m.linear_bias = gpt_style;
  m.norm_bias = gpt_style;

  if (auto t = r.opt_flag("tied_embeddings")) {
    m.tied_embeddings = *t;
  } else {
    m.tied_embeddings = gpt_style;
    notes.push_back(fmt::format("tied_embeddings empty: {} assumed from the position scheme",
                                gpt_style ? "tied" : "untied"));
  }
  m.max_seq_len = r.count("seq_len", limits::kMaxSeqLen);
  if (auto v = r.opt_count("vocab", limits::kMaxVocab)) {
    m.vocab = *v;
  } else {
    std::string why;
    const auto v2 = default_vocab(r.str("source"), m, tp, why);
    if (!v2) throw Skip{fmt::format("vocab is empty and there is no documented default for source '{}' / framework '{}'",
                                    r.str("source"), framework)};
    m.vocab = *v2;
    notes.push_back(fmt::format("vocab empty: {} ({})", m.vocab, why));
  }
  if (auto n = r.opt_int("n_params")) {
    m.n_params_published = *n;
    m.n_params_source = r.str("source");
  }
  try {
    validate(m, r.str("id"));
  } catch (const InputError& e) {
    throw Skip{fmt::format("model: {}: {}", e.key(), e.reason())};
  }
  return m;
}

}  // namespace

std::optional<std::int64_t> default_vocab(const std::string& source, const ModelSpec& m, int tp, std::string& why) {
  (void)source;
  if (m.mlp == MlpKind::relu2 && m.pos_emb == PosEmb::rope) {
    why = "Nemotron-4's 256k SentencePiece tokenizer (the only squared-ReLU RoPE family in the vocabulary)";
    return 256000;
  }
  if (m.pos_emb == PosEmb::learned && m.mlp == MlpKind::gelu && source == "opt-175b") {
    why = "OPT's GPT-2 BPE dictionary padded by metaseq to 50272 (facebook/opt-175b config)";
    return 50272;
  }
  if (m.pos_emb == PosEmb::learned && m.mlp == MlpKind::gelu) {
    // Megatron/NeMo GPT: the GPT-2 BPE (50257 tokens) padded to a multiple of
    // make_vocab_size_divisible_by (128) x tp, so every TP shard of the embedding is equal.
    const std::int64_t padded = megatron_padded_vocab(50257, 128, tp);
    why = fmt::format("GPT-2 BPE 50257 padded to a multiple of 128 x tp {} (Megatron/NeMo rule)", tp);
    return padded;
  }
  return std::nullopt;
}

// The batch: micro x grad_accum x dp = global, the one missing value filled. Where the split is
// not published, the framework's default decides it (spec/framework_defaults.hpp: torchtitan's
// pipeline micro-batches by release); only where the framework has none is it left to the runtime
// resolution (workload/runtime_choices).
void map_batch(const Reader& r, const std::string& fw, const Mesh& mesh, RunConfig& rc,
               std::vector<std::string>& notes) {
  Job& j = rc.job;
  j.seq_len = r.count("seq_len", limits::kMaxSeqLen);
  const std::int64_t dp = static_cast<std::int64_t>(mesh.dp_replicate) * mesh.dp_shard;
  // ---- batch: micro x grad_accum x dp = global; fill the one missing value.
  // Bounded first: the products below stay far inside 64 bits.
  auto mb = r.opt_count("micro_batch", limits::kMaxBatch);
  auto gb = r.opt_count("global_batch", limits::kMaxBatch);
  auto ga = r.opt_count("grad_accum", limits::kMaxGradAccum);
  for (auto [name, v] : {std::pair{"micro_batch", mb}, std::pair{"global_batch", gb}, std::pair{"grad_accum", ga}})
    if (v && *v <= 0) throw Skip{fmt::format("{}: must be positive, got {}", name, *v)};
  if (!gb && mb && ga) {
    gb = limits::mul3(*mb, *ga, dp).value_or(INT64_MAX);
    if (*gb > limits::kMaxBatch)
      throw Skip{fmt::format("micro_batch x grad_accum x dp is above the maximum {} sequences (docs/limits.md)",
                             limits::kMaxBatch)};
  } else if (gb && mb && !ga) {
    if (*gb % (*mb * dp) != 0)
      throw Skip{fmt::format("global_batch {} is not divisible by micro_batch {} x dp {}", *gb, *mb, dp)};
    ga = *gb / (*mb * dp);
  } else if (gb && !mb && ga) {
    if (*gb % (*ga * dp) != 0)
      throw Skip{fmt::format("global_batch {} is not divisible by grad_accum {} x dp {}", *gb, *ga, dp)};
    mb = *gb / (*ga * dp);
  } else if (gb && !mb && !ga && fw == "torchtitan-fsdp2" && mesh.pp > 1) {
    // torchtitan splits each rank's local batch into pipeline micro-batches by a default that
    // changed twice; the release (column framework_release, a date) picks the rule.
    if (*gb % dp != 0) throw Skip{fmt::format("global_batch {} is not divisible by dp {}", *gb, dp)};
    const std::string rel_text = Reader::trim(r.str("framework_release"));
    const std::optional<FrameworkRelease> rel =
        rel_text.empty() ? std::optional<FrameworkRelease>{FrameworkRelease{}} : parse_framework_release(rel_text);
    if (!rel) throw Skip{fmt::format("framework_release: '{}' is not a date (YYYY-MM-DD)", rel_text)};
    const PpMicrobatchDefault def = torchtitan_pp_microbatch_default(*rel);
    std::string why;
    const auto split = split_pp_batch(def.rule, *gb / dp, mesh.pp, j.seq_len, &why);
    if (!split) throw Skip{fmt::format("micro_batch empty and torchtitan's default does not run this batch: {}", why)};
    mb = split->micro_batch;
    ga = split->grad_accum;
    j.pp_microbatches = split->per_run;
    notes.push_back(fmt::format("micro_batch not stated: {} x {} per pipeline run, {} per step (torchtitan's default{}: "
                                "{}; {})",
                                split->micro_batch, split->per_run, split->grad_accum,
                                rel->stated() ? fmt::format(" at {}", rel_text)
                                              : " of the first release with pipeline parallelism, the release not "
                                                "stated",
                                def.row->value, def.row->source));
  } else if (gb && !mb && !ga) {
    // The batch split is not published and the framework has no default (Megatron requires
    // --micro-batch-size): the largest micro-batch that fits (with pipelines 1, the most
    // micro-batches and the smallest bubble), chosen by workload/runtime_choices once the device
    // is known. 1 until then.
    mb = 1;
    if (*gb % dp != 0) throw Skip{fmt::format("global_batch {} is not divisible by dp {}", *gb, dp)};
    ga = *gb / dp;
    rc.left_to_runtime.micro_batch = true;
  } else if (!gb) {
    throw Skip{"global_batch is empty and micro_batch x grad_accum does not give it"};
  }
  j.micro_batch = *mb;
  j.global_batch = *gb;
  j.grad_accum = *ga;
  if (limits::mul3(j.micro_batch, j.grad_accum, dp) != j.global_batch)
    throw Skip{fmt::format("micro_batch {} x grad_accum {} x dp {} != global_batch {}", j.micro_batch, j.grad_accum,
                           dp, j.global_batch)};
  // Megatron and DeepSpeed run all micro-batches through one pipeline schedule (torchtitan's
  // split set it above).
  if (!(fw == "torchtitan-fsdp2" && j.pp_microbatches > 0)) j.pp_microbatches = 0;
}

namespace {

// The TP flags as the row gives them (empty: the framework decides).
struct TpFlags {
  std::optional<bool> sp, atp;
};

// The measured figures, read first: a malformed number is a skip, not a wrong comparison.
void map_measured(const CsvRow& row, const Reader& r, Measured& ms) {
  ms.tokens_per_s_per_gpu = r.opt_num("measured_tokens_per_s_per_gpu");
  ms.tokens_derived_from = row.get("tokens_derived_from");
  ms.tflops_per_gpu = r.opt_num("measured_tflops_per_gpu");
  ms.mfu_pct = r.opt_num("measured_mfu_pct");
  ms.peak_mem_gib = r.opt_num("measured_peak_mem_gib");
  const std::string metric = r.vocab("memory_metric", {"allocated", "reserved", "nvidia-smi", "unknown"});
  ms.memory_metric_given = !metric.empty();
  ms.memory_metric = metric == "allocated"    ? MemoryMetric::allocated
                     : metric == "reserved"   ? MemoryMetric::reserved
                     : metric == "nvidia-smi" ? MemoryMetric::nvidia_smi
                                              : MemoryMetric::unknown;
}

// The GPU (a name the --gpus files add, else the vocabulary) and the node size.
void map_hardware(const CsvRow& row, const Reader& r, const std::vector<std::string>& extra_gpus, ValidationCase& vc,
                  std::vector<std::string>& notes) {
  const std::string given_gpu = Reader::trim(row.get("gpu"));
  const bool user_gpu = std::find(extra_gpus.begin(), extra_gpus.end(), given_gpu) != extra_gpus.end();
  const std::string gpu =
      user_gpu ? given_gpu
               : r.vocab("gpu", {"a100-40gb", "a100-80gb", "a100-unknown", "h100-sxm-80gb", "h100-sxm-96gb",
                                 "h200-141gb", "h100-pcie-80gb", "b200", "b300", "gb200", "gb300"});
  if (gpu.empty()) {
    if (const auto it = kStatedFleets.find(vc.source); it != kStatedFleets.end()) {
      vc.cluster = it->second;
      notes.push_back(
          fmt::format("gpu empty (the table says only 'H100'): {}, the fleet the source documents for its benchmarks",
                      it->second));
    } else {
      vc.cluster = "h100-sxm-80gb";
      notes.push_back("gpu empty (the source says only 'H100'): h100-sxm-80gb assumed");
    }
  } else {
    vc.cluster = gpu;  // a100-unknown resolves through hardware_profiles/aliases.toml
  }
  if (auto g = r.opt_count("gpus_per_node", limits::kMaxGpusPerNode)) {
    if (*g <= 0) throw Skip{fmt::format("gpus_per_node: must be positive, got {}", *g)};
    vc.gpus_per_node = static_cast<int>(*g);
  }
  if (const auto it = kStatedNetworks.find(vc.source); it != kStatedNetworks.end()) {
    vc.network = it->second;
    notes.push_back(fmt::format("network: {} NICs of {:g} Gb/s per node, as the source documents (not the profile's)",
                                it->second.nics_per_node, it->second.nic_gbit_per_s));
  }
}

// The mesh degrees and the pipeline schedule they imply.
void map_mesh(const Reader& r, RunConfig& rc, std::vector<std::string>& notes) {
  Plan& p = rc.plan;
  Mesh& mesh = p.mesh;
  const std::int64_t n_gpus = r.count("n_gpus", limits::kMaxGpus);
  mesh.pp = static_cast<int>(r.count("pp", limits::kMaxGpus));
  mesh.dp_replicate = static_cast<int>(r.count("dp_replicate", limits::kMaxGpus));
  mesh.dp_shard = static_cast<int>(r.count("dp_shard", limits::kMaxGpus));
  mesh.tp = static_cast<int>(r.count("tp", limits::kMaxGpus));
  if (auto cp = r.opt_count("cp", limits::kMaxGpus)) {
    if (*cp <= 0) throw Skip{fmt::format("cp: must be positive, got {}", *cp)};
    mesh.cp = static_cast<int>(*cp);
  } else {
    mesh.cp = 1;
    notes.push_back("cp empty: 1 assumed");
  }
  if (auto ep = r.opt_count("ep", limits::kMaxGpus)) {
    if (*ep <= 0) throw Skip{fmt::format("ep: must be positive, got {}", *ep)};
    mesh.ep = static_cast<int>(*ep);
  }
  if (auto vpp = r.opt_count("vpp", limits::kMaxLayers)) {
    if (*vpp <= 0) throw Skip{fmt::format("vpp: must be positive, got {}", *vpp)};
    mesh.vpp = static_cast<int>(*vpp);
  } else {
    mesh.vpp = 1;
    if (mesh.pp > 1) notes.push_back("vpp empty: 1 assumed (non-interleaved schedule, the frameworks' default)");
  }
  p.schedule = mesh.vpp > 1 ? PipelineSchedule::interleaved_1f1b : PipelineSchedule::one_f_one_b;
  rc.n_gpus = n_gpus;
}

// The model, and the layer split and expert mesh that follow from it under Megatron.
void map_model_layout(const Reader& r, const std::string& fw, RunConfig& rc, std::vector<std::string>& notes) {
  Plan& p = rc.plan;
  Mesh& mesh = p.mesh;
  rc.model = map_model(r, fw, mesh.tp, notes);
  // Megatron runs a layer count that pp x vpp does not divide only when told how: with the
  // embedding and the loss counted as layers where that divides (Megatron-Core's
  // transformer_layer_count checks), else with a --pipeline-model-parallel-layout, which
  // Megatron-Bridge's recipes for such models (DeepSeek-V3, Kimi-K2: 61 layers) write as
  // ceil(L / stages) layers per stage with the remainder last. A published run of that shape
  // used one of them.
  const std::int64_t chunks = static_cast<std::int64_t>(mesh.pp) * mesh.vpp;
  if (is_megatron_family(fw) && chunks > 1 && rc.model.n_layers % chunks != 0) {
    std::string how;
    const auto split = megatron_split_for(rc.model.n_layers, mesh.pp, mesh.vpp, rc.model.n_mtp_layers, &how);
    if (!split)
      throw Skip{fmt::format("{} layers on pp {} x vpp {}: no even split, none with the embedding and loss counted, "
                             "and Megatron-Bridge's ceil(L / stages) layouts leave a stage empty",
                             rc.model.n_layers, mesh.pp, mesh.vpp)};
    p.pipeline_split = *split;
    notes.push_back(fmt::format("{} layers on pp {} x vpp {}: {}", rc.model.n_layers, mesh.pp, mesh.vpp, how));
  }
  if (mesh.ep > 1 && !rc.model.moe.enabled())
    throw Skip{"ep > 1 needs a mixture-of-experts model, and moe_experts is empty"};
  if (mesh.ep > 1 && is_megatron_family(fw)) {
    // The README: expert tensor parallelism is 1 where printed or assumed (the EP group then
    // borrows tensor-parallel ranks, Megatron's expert mesh).
    mesh.etp = 1;
    if (mesh.tp > 1) notes.push_back("expert tensor parallel 1 assumed (no column; the source's default)");
  }
}

// The dtypes and the FP8 recipe; before the runtime defaults, some of which depend on them.
void map_precision(const CsvRow& row, const Reader& r, const std::string& fw, Plan& p,
                   std::vector<std::string>& notes) {
  const std::string pd = r.vocab("param_dtype", {"fp32", "bf16", "fp16"});
  const std::string rd = r.vocab("reduce_dtype", {"fp32", "bf16", "fp16"});
  const std::string sd = r.vocab("state_dtype", {"fp32", "bf16"});
  if (pd.empty()) notes.push_back("param_dtype empty: bf16 assumed");
  p.param_dtype = pd.empty() ? Dtype::bf16 : dtype_of(pd);
  p.state_dtype = sd.empty() ? Dtype::fp32 : dtype_of(sd);
  if (sd.empty() && row.has_column("state_dtype")) notes.push_back("state_dtype empty: fp32 assumed");
  if (p.state_dtype == Dtype::bf16 && p.param_dtype == Dtype::fp32)
    throw Skip{"state_dtype bf16 with param_dtype fp32: weights stored below their compute precision"};
  // No column gives the matmul dtype: 16-bit params compute in their own dtype; fp32 params
  // (FSDP without a mixed-precision policy, DDP) compute under bf16 autocast.
  p.compute_dtype = p.param_dtype == Dtype::fp32 ? Dtype::bf16 : p.param_dtype;
  if (p.param_dtype == Dtype::fp32) notes.push_back("param_dtype fp32: matmuls assumed under bf16 autocast");
  if (rd.empty()) {
    // Megatron reduces fp16 gradients in fp16 and bf16 gradients in fp32 (it forces
    // accumulate_allreduce_grads_in_fp32 with bf16); DeepSpeed's BF16_Optimizer and torch
    // mixed precision reduce in fp32 unless told otherwise.
    p.reduce_dtype = is_megatron_family(fw) && p.param_dtype == Dtype::fp16 ? Dtype::fp16 : Dtype::fp32;
    notes.push_back(fmt::format("reduce_dtype empty: {} assumed", to_string(p.reduce_dtype)));
  } else {
    p.reduce_dtype = dtype_of(rd);
  }
  const std::string fp8 = r.vocab("fp8", {"none", "te-delayed", "te-current", "mxfp8", "nvfp4", "torchao-tensorwise",
                                          "torchao-rowwise", "te-blockwise"});
  p.fp8 = fp8.empty() ? Fp8Recipe::none : *parse_fp8(fp8);
  if (fp8.empty()) notes.push_back("fp8 empty: none assumed");
}

// The ZeRO stage, published or the framework's default.
void map_sharding(const Reader& r, const std::string& fw, RunConfig& rc, std::vector<std::string>& notes) {
  Plan& p = rc.plan;
  Mesh& mesh = p.mesh;
  const std::string sh = r.vocab("sharding", {"none", "zero1", "zero2", "zero3", "unknown"});
  if (sh.empty() || sh == "unknown") {
    // The framework's default: Megatron-LM without --use-distributed-optimizer is plain DDP;
    // NeMo turns the distributed optimizer on; FSDP trainers shard fully. A higher ZeRO stage
    // only if nothing fits with it (workload/runtime_choices, once the device is known).
    if (fw == "megatron" || fw == "megatron-deepspeed") p.sharding = Sharding::none;
    else if (fw == "nemo") p.sharding = Sharding::zero1;
    else p.sharding = mesh.dp_shard > 1 ? Sharding::zero3 : Sharding::none;
    rc.left_to_runtime.sharding = true;
  } else {
    p.sharding = *parse_sharding(sh);
  }
  if (mesh.dp_shard > 1 && p.sharding != Sharding::zero3)
    throw Skip{fmt::format("dp_shard {} > 1 with sharding {}: the README writes parameter sharding only as zero3",
                           mesh.dp_shard, to_string(p.sharding))};
  // Megatron-family ZeRO-3 is Megatron-FSDP (optim_grads_params) or DeepSpeed ZeRO-3, whose
  // pipeline engine runs ZeRO-0/1 only. Their ZeRO-2 keeps whole bf16 params on every rank and
  // shards the gradients: not modeled.
  if (p.sharding == Sharding::zero2 && is_megatron_family(fw))
    throw Skip{"zero2 under Megatron-family frameworks (Megatron-FSDP optim_grads, DeepSpeed ZeRO-2) is not modeled"};
  if (fw == "megatron-deepspeed" && mesh.pp > 1 && p.sharding == Sharding::zero3)
    throw Skip{fmt::format("{} with pp {} under Megatron-DeepSpeed: DeepSpeed's pipeline engine runs ZeRO-0/1 only",
                           to_string(p.sharding), mesh.pp)};
  p.reshard_after_forward = p.sharding == Sharding::zero3;
  // The README writes ZeRO-2 (SHARD_GRAD_OP, reshard_after_forward=False) over the data-parallel
  // ranks as dp_replicate; a plan shards over dp_shard, so those ranks become the shard group:
  // parameters gathered once per forward and gradients reduce-scattered over all of them.
  if (p.sharding == Sharding::zero2 && mesh.dp_shard == 1 && mesh.dp_replicate > 1) {
    std::swap(mesh.dp_shard, mesh.dp_replicate);
    notes.push_back(fmt::format("zero2 over the {0} data-parallel ranks (written as dp_replicate, the README "
                                "convention): dp_shard {0}", mesh.dp_shard));
  }
}

// Activation checkpointing: the mode and its option (Megatron's --recompute-modules list).
void map_recompute(const CsvRow& row, const Reader& r, const std::string& fw, RunConfig& rc,
                   std::vector<std::string>& notes) {
  Plan& p = rc.plan;
  const std::string ac = r.vocab("activation_ckpt", {"none", "full", "selective", "unknown"});
  std::string aco = Reader::trim(row.get("ac_option"));
  bool modules_core_attn = false;
  if (aco.rfind("modules:", 0) == 0) {
    // Megatron --recompute-modules: the listed submodules only.
    std::string list = aco.substr(8);
    std::vector<std::string> unmodeled;
    std::size_t start = 0;
    while (start <= list.size()) {
      const std::size_t comma = list.find(',', start);
      const std::string name = Reader::trim(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (!name.empty()) {
        const RecomputeModuleName k = apply_recompute_module(name, p.recompute_modules);
        if (k == RecomputeModuleName::core_attn) modules_core_attn = true;
        if (k == RecomputeModuleName::known_unmodeled) unmodeled.push_back(name);
        if (k == RecomputeModuleName::unknown)
          throw Skip{fmt::format("ac_option: '{}' is not a Megatron --recompute-modules name", name)};
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    for (const std::string& u : unmodeled)
      notes.push_back(fmt::format("recompute module '{}' not modeled: its activations are assumed kept", u));
    aco = "modules";
  } else {
    aco = r.vocab("ac_option", {"attn", "op", "layer"});
  }
  if (ac == "full") {
    p.ac = AcMode::full;
  } else if (ac == "selective") {
    std::string opt = aco;
    if (opt.empty()) {
      opt = is_megatron_family(fw) ? "attn" : "op";
      notes.push_back(fmt::format("ac_option empty with selective: '{}' assumed (framework default)", opt));
    }
    if (opt == "modules") p.ac = modules_core_attn ? AcMode::selective_attn : AcMode::none;
    else if (opt == "attn") p.ac = AcMode::selective_attn;
    else if (opt == "op") p.ac = AcMode::selective_op;
    else {
      p.ac = AcMode::selective_layer;
      p.ac_every_n = 2;  // README: full checkpointing of every second layer
    }
  } else {
    p.ac = AcMode::none;
    // Not published: the least recompute that fits (workload/runtime_choices, once the device
    // is known), as the run's own tuning would have settled it.
    if (ac.empty() || ac == "unknown") rc.left_to_runtime.recompute = true;
  }
  if (!aco.empty() && ac != "selective") {
    notes.push_back(fmt::format("ac_option '{}' ignored: activation_ckpt is not selective", aco));
    p.recompute_modules = {};
  }
  p.ac_reentrant = false;
}

// What is offloaded to the host.
void map_offload(const CsvRow& row, const Reader& r, Plan& p, std::vector<std::string>& notes) {
  const auto cpu_off = r.opt_flag("cpu_offload");
  const auto act_off = r.opt_flag("act_offload");
  const auto par_off = r.opt_flag("param_offload");
  p.act_offload = act_off.value_or(false);
  p.param_offload = par_off.value_or(false);
  if (cpu_off.value_or(false) && !act_off && !par_off)
    throw Skip{"cpu_offload = 1 without act_offload/param_offload columns: what is offloaded is only in notes"};
  if (!cpu_off && !row.has_column("act_offload")) notes.push_back("cpu_offload empty: no offload assumed");
}

// torch.compile and the optimizer; the TP flags are read here (a malformed one is reported in
// column order) and applied once the runtime is known.
TpFlags map_switches(const CsvRow& row, const Reader& r, Plan& p, std::vector<std::string>& notes) {
  if (auto c = r.opt_flag("compile")) p.compile = *c;
  else p.compile = false;
  const auto sp = r.opt_flag("sequence_parallel");
  const auto atp = r.opt_flag("async_tp");
  const std::string optim = r.vocab("optimizer", {"adamw", "adamw8bit", "sgd", "other"});
  if (optim == "other") throw Skip{"optimizer 'other': its state size is unknown"};
  p.optimizer = optim.empty() ? Optimizer::adamw : *parse_optimizer(optim);
  if (optim.empty() && row.has_column("optimizer")) notes.push_back("optimizer empty: AdamW assumed");
  return {sp, atp};
}

// The dispatcher a row's notes name (dev-moe's "dispatcher DeepEP", "dispatcher A2A (alltoall)",
// the benchmark script's DISPATCHER=hybridep); nullopt when they name none.
std::optional<MoeDispatcher> dispatcher_in_notes(const std::string& text) {
  const std::pair<std::string_view, MoeDispatcher> said[] = {
      {"DISPATCHER=hybridep", MoeDispatcher::hybridep}, {"dispatcher HybridEP", MoeDispatcher::hybridep},
      {"DISPATCHER=deepep", MoeDispatcher::deepep},     {"dispatcher DeepEP", MoeDispatcher::deepep},
      {"DISPATCHER=alltoall", MoeDispatcher::alltoall}, {"dispatcher A2A", MoeDispatcher::alltoall},
      {"dispatcher alltoall", MoeDispatcher::alltoall}};
  for (const auto& [phrase, d] : said)
    if (text.find(phrase) != std::string::npos) return d;
  return std::nullopt;
}

// How a Megatron MoE row's tokens reach their experts. The dispatcher: an optional
// `moe_dispatcher` column, else the notes; where neither names one, as a tuned Megatron-Core MoE
// run sets it: the flex dispatcher with DeepEP (HybridEP on Blackwell NVL72), whose token copies
// cross the network once per destination domain (inside one NVLink domain it prices as an
// all-to-all). Megatron-Core's expert all-to-all overlap (--overlap-moe-expert-parallel-comm, off
// by default): the optional `moe_a2a_overlap` column, else the notes, which quote the benchmark
// script's A2A_OVERLAP switch or say '1f1b overlap'.
void map_expert_dispatch(const Reader& r, const std::string& fw, RunConfig& rc, std::vector<std::string>& notes) {
  Plan& p = rc.plan;
  const Mesh& mesh = p.mesh;
  if (!rc.model.moe.enabled() || mesh.ep <= 1 || fw != "megatron") return;
  const std::string text = r.str("notes");
  const std::string column = r.vocab("moe_dispatcher", {"alltoall", "deepep", "hybridep"});
  if (const auto d = column.empty() ? dispatcher_in_notes(text) : parse_moe_dispatcher(column)) {
    p.moe_dispatcher = *d;
    if (column.empty()) notes.push_back(fmt::format("MoE dispatcher {} read from the notes", to_string(*d)));
  } else {
    p.moe_dispatcher = MoeDispatcher::deepep;
    rc.left_to_runtime.moe_dispatcher = true;  // DeepEP or HybridEP, by the cluster's NVLink domain
    notes.push_back("MoE dispatcher not stated: Megatron-Core's flex dispatcher (DeepEP/HybridEP) assumed");
  }
  const auto overlap_column = r.opt_flag("moe_a2a_overlap");
  p.moe_a2a_overlap = overlap_column ? *overlap_column
                             : text.find(kA2aOverlapSwitch) != std::string::npos ||
                                   text.find(kA2aOverlapNote) != std::string::npos;
  if (p.moe_a2a_overlap)
    if (const std::string why = expert_a2a_overlap_refusal(p, true); !why.empty())
      throw Skip{"the expert all-to-all overlap " + why};
  if (!overlap_column)
    notes.push_back(p.moe_a2a_overlap ? "expert all-to-all overlap read from the notes (A2A_OVERLAP=1 / 1f1b overlap)"
                                      : "expert all-to-all overlap not stated: off (Megatron-LM's default)");
}

// Whether `text` sets a config field true as a recipe quotes it: `name=True`, `name: true`.
bool field_set_true(std::string_view text, std::string_view name) {
  for (std::size_t at = text.find(name); at != std::string_view::npos; at = text.find(name, at + 1)) {
    std::size_t i = at + name.size();
    auto skip_spaces = [&] {
      while (i < text.size() && text[i] == ' ') ++i;
    };
    skip_spaces();
    if (i >= text.size() || (text[i] != '=' && text[i] != ':')) continue;
    ++i;
    skip_spaces();
    const std::string_view rest = text.substr(i, 4);
    if (rest == "True" || rest == "true") return true;
  }
  return false;
}

// Megatron-Core's fused MoE kernels (--moe-permute-fusion, --moe-router-fusion): the optional
// columns of the same names, else the notes where they quote the run's command line (the flag) or
// its recipe (`moe_permute_fusion=True`); else off, Megatron-LM's default (the layer is launched
// op by op, docs/host.md).
void map_moe_fusion(const Reader& r, const std::string& fw, Plan& p, const ModelSpec& m, std::vector<std::string>& notes) {
  if (!m.moe.enabled() || fw != "megatron") return;
  const std::string text = r.str("notes");
  std::string on;
  for (const auto& [column, flag, field] :
       {std::tuple{"moe_permute_fusion", "--moe-permute-fusion", &Plan::moe_permute_fusion},
        std::tuple{"moe_router_fusion", "--moe-router-fusion", &Plan::moe_router_fusion}}) {
    const auto given = r.opt_flag(column);
    p.*field = given ? *given : text.find(flag) != std::string::npos || field_set_true(text, column);
    if (p.*field) on += on.empty() ? flag : std::string(", ") + flag;
  }
  notes.push_back(on.empty() ? "MoE permute and router fusion not stated: off (Megatron-LM's default)"
                             : "Megatron-Core's fused MoE kernels: " + on);
  // Grouped expert GEMMs: the optional column, else grouped, as every Megatron-Core MoE benchmark
  // recipe sets (--moe-grouped-gemm; Megatron-Bridge's MoE providers moe_grouped_gemm=True).
  if (const auto grouped = r.opt_flag("moe_grouped_gemm")) {
    p.moe_grouped_gemm = *grouped;
    if (!*grouped) notes.push_back("experts one after another (SequentialMLP), as the moe_grouped_gemm column says");
  } else {
    notes.push_back("grouped expert GEMMs assumed (--moe-grouped-gemm, which every Megatron-Core MoE benchmark recipe sets)");
  }
}

// Megatron's CUDA graphs where the notes quote the run's command line: --cuda-graph-impl
// (local or transformer_engine) or the older --enable-cuda-graph / --external-cuda-graph, and the
// modules --cuda-graph-scope lists (the words after it up to the next flag or the end of the
// clause). Else none, Megatron-LM's default.
void map_cuda_graphs(const Reader& r, const std::string& fw, Plan& p, std::vector<std::string>& notes) {
  if (fw != "megatron") return;
  const std::string text = r.str("notes");
  p.cuda_graphs = text.find("--cuda-graph-impl local") != std::string::npos ||
                  text.find("--cuda-graph-impl transformer_engine") != std::string::npos ||
                  text.find("--enable-cuda-graph") != std::string::npos ||
                  text.find("--external-cuda-graph") != std::string::npos;
  if (!p.cuda_graphs) return;
  constexpr std::string_view kScope = "--cuda-graph-scope";
  std::vector<std::string> names;
  if (const auto at = text.find(kScope); at != std::string::npos) {
    std::size_t i = at + kScope.size();
    while (true) {
      while (i < text.size() && text[i] == ' ') ++i;
      std::size_t end = i;
      while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) != 0 || text[end] == '_')) ++end;
      if (end == i) break;  // a flag, punctuation or the end: the list is over
      names.push_back(text.substr(i, end - i));
      i = end;
    }
  }
  std::string bad;
  const auto scope = parse_cuda_graph_scope(names, &bad);
  if (!scope) throw Skip{fmt::format("--cuda-graph-scope '{}' in the notes is not a scope meshplan models", bad)};
  p.cuda_graph_scope = *scope;
  notes.push_back(fmt::format("CUDA graphs read from the notes, scope {}", fmt::join(cuda_graph_scope_names(*scope), " ")));
}

// The runtime the framework names and its defaults for knobs no column carries.
void map_runtime(const std::string& fw, std::string_view source, RunConfig& rc, std::vector<std::string>& notes) {
  Plan& p = rc.plan;
  Mesh& mesh = p.mesh;
  if (fw == "composer-fsdp1") {
    // llm-foundry benchmark configs: FSDP1 FULL_SHARD, Composer's BACKWARD_POST default,
    // limit_all_gathers, non-reentrant checkpointing; FSDP1 keeps the root unit (embeddings,
    // final norm, head) unsharded; TP is llm-foundry's FFN-only strategy.
    p.runtime = Runtime::composer_fsdp1;
    p.backward_prefetch = BackwardPrefetch::backward_post;
    p.forward_prefetch = false;
    p.limit_all_gathers = true;
    p.root_unsharded = p.sharding != Sharding::none;
    if (mesh.tp > 1) p.tp_style = TpStyle::mlp_only;
  } else if (fw == "torchtitan-fsdp2") {
    p.runtime = Runtime::torchtitan_fsdp2;
    p.backward_prefetch = BackwardPrefetch::backward_pre;
    p.forward_prefetch = true;
    p.limit_all_gathers = false;
    p.root_unsharded = false;
    // torchtitan's reshard_after_forward "default": reshard unless pipeline parallel.
    if (p.sharding == Sharding::zero3) p.reshard_after_forward = mesh.pp == 1;
  } else if (is_megatron_family(fw)) {
    p.runtime = Runtime::megatron;
    p.backward_prefetch = BackwardPrefetch::none;
    p.limit_all_gathers = false;
    // Megatron-LM's arguments default to 0.1 hidden and attention dropout, and Megatron-DeepSpeed
    // keeps them; NeMo's LLM recipes, Megatron-Core's MoE recipes and BLOOM's run set both to 0.
    const bool stated_off = kNoDropoutSources.count(source) != 0;
    p.dropout = (fw == "megatron" || fw == "megatron-deepspeed") && !rc.model.moe.enabled() && !stated_off;
    if (stated_off) notes.push_back("dropout off, as the source documents");
    else if (fw == "megatron-deepspeed")
      notes.push_back("dropout not stated: 0.1 hidden and attention dropout (Megatron-DeepSpeed's default)");
    else if (fw != "megatron") notes.push_back("dropout assumed off (not in any column)");
    else if (rc.model.moe.enabled())
      notes.push_back("dropout assumed off (Megatron MoE recipes set hidden and attention dropout to 0)");
    // Megatron-DeepSpeed runs the Megatron model under DeepSpeed's pipeline engine and optimizer.
    p.deepspeed_engine = fw == "megatron-deepspeed";
    // act_offload says activations went to the host, not which: Megatron-Core offloads whole
    // layers or (fine-grained) listed submodules; resolved to the least that fits.
    if (p.act_offload && fw == "megatron") rc.left_to_runtime.offload_scope = true;
  } else {
    // fairscale FSDP and unnamed trainers: the generic runtime with FSDP1-like defaults
    // (per-block units, BACKWARD_PRE, the rate limiter, no forward prefetch).
    p.runtime = Runtime::generic;
    p.backward_prefetch = BackwardPrefetch::backward_pre;
    p.forward_prefetch = false;
    p.limit_all_gathers = fw != "fairscale";  // fairscale FSDP has no all-gather rate limiter
    p.root_unsharded = false;
    if (fw == "other") notes.push_back("framework other: generic runtime with FSDP1-like defaults");
  }
}

// The attention, loss and optimizer kernels, and FP8 all-gather.
void map_kernels(const Reader& r, const std::string& fw, const std::string& source, Plan& p,
                 std::vector<std::string>& notes) {
  if (kUnfusedAttentionSources.count(source) != 0) {
    p.flash_attention = false;
    notes.push_back("unfused attention (software predates FlashAttention)");
  } else if (fw == "composer-fsdp1") {
    // llm-foundry's default images of the PyTorch 2.1 era installed flash-attn 1.x (FA2 came in
    // separate `_flash2` images), so MPT's `attn_impl: flash` ran a FlashAttention-1 class kernel.
    p.flash_attention_version = 1;
    notes.push_back("attention kernel not recorded: FlashAttention-1 class assumed (llm-foundry images of the PyTorch 2.1 era)");
  }
  if (fw == "composer-fsdp1") {
    // ComposerMPTCausalLM's default loss_fn is fused_crossentropy (flash-attn's xentropy kernel).
    p.fused_cross_entropy = true;
    notes.push_back("loss not recorded: llm-foundry MPT's default fused_crossentropy assumed");
  }
  // The loss kernel and the optimizer-in-backward setting, where the row states them
  // (memory.csv's loss_kernel / optimizer_in_backward columns; empty: the framework default).
  const std::string loss_kernel = r.vocab("loss_kernel", {"torch", "chunked", "fused"});
  if (!loss_kernel.empty()) {
    p.fused_cross_entropy = loss_kernel == "fused";
    p.chunked_cross_entropy = loss_kernel == "chunked";
  }
  if (auto ob = r.opt_flag("optimizer_in_backward")) p.optimizer_in_backward = *ob;
  // No column says how the optimizer's update runs. Under an unnamed trainer it resolves as a
  // tuned run sets it (docs/validation.md "Unknown settings"): fused AdamW, as torchtune's and
  // lightning-thunder's configs and torchtitan's default do; the named frameworks keep theirs.
  if (runtime_info(p).framework == Framework::none && p.optimizer == Optimizer::adamw) {
    p.optimizer_impl = OptimizerImpl::fused;
    notes.push_back("optimizer implementation not in any column: fused AdamW assumed (no whole-model step temporaries)");
  }
  // float8 all-gather: torchao tensorwise scaling under FSDP casts the sharded weights before
  // the all-gather (the setup the torchao and Thunder sources describe); rowwise cannot.
  p.fp8_all_gather = p.fp8 == Fp8Recipe::torchao_tensorwise &&
                     (p.sharding == Sharding::zero2 || p.sharding == Sharding::zero3);
}

// Sequence parallelism and async TP, published or the framework's default; both off without TP.
void map_tp_overlap(const TpFlags& f, const std::string& fw, Plan& p, std::vector<std::string>& notes) {
  const Mesh& mesh = p.mesh;
  if (f.sp) {
    p.sequence_parallel = *f.sp;
  } else {
    // torchtitan always pairs TP with sequence parallelism; NeMo's performance recipes enable
    // it whenever TP > 1; Megatron-LM leaves it off unless --sequence-parallel.
    p.sequence_parallel = mesh.tp > 1 && (fw == "torchtitan-fsdp2" || fw == "nemo");
    if (mesh.tp > 1)
      notes.push_back(fmt::format("sequence_parallel empty: {} assumed (framework default)", p.sequence_parallel ? 1 : 0));
  }
  if (f.atp) {
    p.async_tp = *f.atp;
  } else {
    p.async_tp = mesh.tp > 1 && fw == "nemo";
    if (mesh.tp > 1)
      notes.push_back(fmt::format("async_tp empty: {} assumed (NeMo recipes overlap TP comm with TP > 1; others off)",
                                  p.async_tp ? 1 : 0));
  }
  if (mesh.tp == 1) {
    p.sequence_parallel = false;
    p.async_tp = false;
  }
}

}  // namespace

ValidationCase map_validation_row(const CsvTable& table, std::size_t index, const std::vector<std::string>& extra_gpus) {
  const CsvRow row(table, index);
  const Reader r(row);
  ValidationCase vc;
  vc.id = row.get("id");
  vc.source = row.get("source");
  vc.model_label = row.get("model");
  vc.framework = row.get("framework");
  vc.gpu = row.get("gpu");
  std::vector<std::string>& notes = vc.assumptions;
  try {
    if (vc.id.empty()) throw Skip{"id is empty"};
    map_measured(row, r, vc.measured);
    map_hardware(row, r, extra_gpus, vc, notes);

    const std::string fw = r.vocab("framework", {"composer-fsdp1", "torchtitan-fsdp2", "megatron", "nemo",
                                                 "megatron-deepspeed", "fairscale", "other"});
    if (fw.empty()) throw Skip{"framework is empty"};
    RunConfig& rc = vc.run;
    rc.source_file = table.file;
    rc.format = ConfigFormat::meshplan_plan;
    rc.cluster = vc.cluster;

    // The order of the sections is the order in which a bad row's first error is reported.
    map_mesh(r, rc, notes);
    map_model_layout(r, fw, rc, notes);
    map_precision(row, r, fw, rc.plan, notes);
    map_sharding(r, fw, rc, notes);
    map_recompute(row, r, fw, rc, notes);
    map_offload(row, r, rc.plan, notes);
    const TpFlags tp_flags = map_switches(row, r, rc.plan, notes);
    map_runtime(fw, vc.source, rc, notes);
    map_expert_dispatch(r, fw, rc, notes);
    map_moe_fusion(r, fw, rc.plan, rc.model, notes);
    map_cuda_graphs(r, fw, rc.plan, notes);
    map_kernels(r, fw, vc.source, rc.plan, notes);
    map_tp_overlap(tp_flags, fw, rc.plan, notes);
    map_batch(r, fw, rc.plan.mesh, rc, notes);

    try {
      resolve_layout(rc, rc.n_gpus);
    } catch (const InputError& e) {
      throw Skip{fmt::format("layout: {}: {}", e.key(), e.reason())};
    }
    for (const auto& w : rc.warnings) notes.push_back(w);
  } catch (const Skip& s) {
    vc.skipped = s.reason;
  }
  return vc;
}

}  // namespace meshplan

#include "spec/pipeline_layout.hpp"

#include <fmt/format.h>

#include <cctype>

#include "spec/limits.hpp"

namespace meshplan {

namespace {

// Expands repeats into a flat string of E, t, m, L and |. Grammar: seq := item*; item := atom
// ('*' count)?; atom := one of E t m L | or '(' seq ')'. The expansion is bounded so a short
// string cannot ask for billions of layers.
class Expander {
public:
  explicit Expander(std::string_view s) : s_(s) {}
  std::optional<std::string> run(std::string* why) {
    std::string out;
    if (!seq(out, 0) || pos_ != s_.size()) {
      if (why != nullptr) *why = err_.empty() ? fmt::format("unexpected '{}' at position {}", s_[pos_], pos_ + 1) : err_;
      return std::nullopt;
    }
    return out;
  }

private:
  static constexpr std::size_t kMaxExpanded = 4 * limits::kMaxLayers;

  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ',' || s_[pos_] == ' ')) ++pos_;
  }
  bool seq(std::string& out, int depth) {
    if (depth > 16) return fail("parentheses nested more than 16 deep");
    for (skip(); pos_ < s_.size() && s_[pos_] != ')'; skip()) {
      std::string atom;
      const char c = s_[pos_];
      if (c == '(') {
        ++pos_;
        if (!seq(atom, depth + 1)) return false;
        if (pos_ >= s_.size() || s_[pos_] != ')') return fail("a '(' is not closed");
        ++pos_;
      } else if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
        atom = c;
        ++pos_;
      } else {
        return fail(fmt::format("'{}' at position {} is not E, t, m, L, |, (, ) or *", c, pos_ + 1));
      }
      std::size_t times = 1;
      skip();
      if (pos_ < s_.size() && s_[pos_] == '*') {
        ++pos_;
        skip();
        std::size_t n = 0, digits = 0;
        for (; pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])); ++pos_, ++digits) {
          n = n * 10 + static_cast<std::size_t>(s_[pos_] - '0');
          if (n > kMaxExpanded) return fail(fmt::format("a repeat count above {}", kMaxExpanded));
        }
        if (digits == 0) return fail("'*' needs a count");
        times = n;
      }
      if (out.size() + atom.size() * times > kMaxExpanded)
        return fail(fmt::format("the layout expands past {} entries", kMaxExpanded));
      for (std::size_t i = 0; i < times; ++i) out += atom;
    }
    return true;
  }
  bool fail(std::string reason) {
    if (err_.empty()) err_ = std::move(reason);
    return false;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
  std::string err_;
};

std::optional<PipelineLayout> refuse(std::string* why, std::string reason) {
  if (why != nullptr) *why = std::move(reason);
  return std::nullopt;
}

}  // namespace

std::optional<PipelineLayout> parse_pipeline_layout(std::string_view text, std::string* why) {
  const std::optional<std::string> flat = Expander(text).run(why);
  if (!flat) return std::nullopt;
  std::vector<std::string> stages(1);
  for (char c : *flat) {
    if (c == '|') stages.emplace_back();
    else stages.back() += c;
  }
  PipelineLayout l;
  int embeddings = 0, losses = 0, decoders = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::string& st = stages[i];
    int layers = 0;
    for (std::size_t k = 0; k < st.size(); ++k) {
      const char c = st[k];
      if (c == 'E') {
        ++embeddings;
        if (i != 0 || k != 0) return refuse(why, "the embedding E must come first, in the first stage");
      } else if (c == 'L') {
        ++losses;
        if (i + 1 != stages.size() || k + 1 != st.size())
          return refuse(why, "the loss L must come last, in the last stage");
      } else if (c == 't') {
        if (l.mtp_layers > 0) return refuse(why, "a decoder layer t after the MTP layers m (they follow every decoder layer)");
        ++layers;
      } else if (c == 'm') {
        if (l.mtp_chunk >= 0 && l.mtp_chunk != static_cast<int>(i))
          return refuse(why, "the MTP layers m must all sit in one stage");
        l.mtp_chunk = static_cast<int>(i);
        ++l.mtp_layers;
      }
    }
    decoders += layers;
    l.chunk_layers.push_back(layers);
  }
  if (embeddings != 1) return refuse(why, fmt::format("needs exactly one embedding E, found {}", embeddings));
  if (losses != 1) return refuse(why, fmt::format("needs exactly one loss L, found {}", losses));
  if (decoders == 0) return refuse(why, "holds no decoder layer t");
  for (std::size_t i = 0; i < stages.size(); ++i)
    if (stages[i].empty()) return refuse(why, fmt::format("stage {} is empty", i));
  return l;
}

std::string format_pipeline_layout(const PipelineLayout& l) {
  const int n = static_cast<int>(l.chunk_layers.size());
  auto stage = [&](int i) {
    std::string s = i == 0 ? "E" : "";
    const int t = l.chunk_layers[static_cast<std::size_t>(i)];
    if (t == 1) s += "t";
    else if (t > 1) s += fmt::format("t*{}", t);
    if (i == l.mtp_chunk) s += l.mtp_layers == 1 ? "m" : fmt::format("m*{}", l.mtp_layers);
    if (i == n - 1) s += "L";
    return s;
  };
  std::string out;
  for (int i = 0; i < n;) {
    const std::string s = stage(i);
    int k = 1;
    while (i + k < n && stage(i + k) == s) ++k;
    const bool last_group = i + k == n;
    // A group that ends the string cannot end in '|': its last stage is written on its own.
    const int repeated = last_group ? k - 1 : k;
    if (repeated > 1) out += fmt::format("({}|)*{}", s, repeated);
    else if (repeated == 1) out += s + "|";
    if (last_group) out += s;
    i += k;
  }
  return out;
}

std::optional<PipelineLayout> ceil_split_layout(int n_layers, int stages, int mtp_layers) {
  if (n_layers <= 0 || stages <= 0) return std::nullopt;
  const int per = (n_layers + stages - 1) / stages;
  const int last = n_layers - per * (stages - 1);
  PipelineLayout l;
  l.chunk_layers.assign(static_cast<std::size_t>(stages), per);
  l.chunk_layers.back() = last;
  if (last <= 0) {
    // The stages cannot all hold a decoder layer at ceil(L / s) each: the last stage holds only
    // the loss (and the MTP layers), the middle ones ceil(L / (s - 1)), the first the rest beside
    // the embedding (Megatron-Bridge's H100 config for 61 layers on 32 stages, "Et|(tt|)*30mL").
    if (stages < 2) return std::nullopt;
    const int middle = (n_layers + stages - 2) / (stages - 1);
    const int first = n_layers - middle * (stages - 2);
    if (first <= 0) return std::nullopt;
    l.chunk_layers.assign(static_cast<std::size_t>(stages), middle);
    l.chunk_layers.front() = first;
    l.chunk_layers.back() = 0;
  }
  if (mtp_layers > 0) {
    l.mtp_chunk = stages - 1;
    l.mtp_layers = mtp_layers;
  }
  return l;
}

}  // namespace meshplan

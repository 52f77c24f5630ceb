// Megatron-LM arguments importer (import_megatron.hpp). Flag names, arities and defaults follow
// Megatron-LM megatron/training/arguments.py at tag core_v0.15.0 (0d7e02bd); what each maps to is in
// docs/importers.md "Megatron-LM arguments".
#include "import/import_megatron.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <set>

#include "import/accepted_settings.hpp"
#include "import/shell_words.hpp"
#include "spec/error.hpp"
#include "spec/framework_defaults.hpp"
#include "spec/limits.hpp"
#include "spec/model_loader.hpp"
#include "spec/offload_modules.hpp"
#include "spec/pipeline_split.hpp"
#include "spec/recompute_modules.hpp"

namespace meshplan {

namespace {

using Word = ShellWord;

bool is_megatron_marker(std::string_view w) {
  return w == "--num-layers" || w == "--tensor-model-parallel-size" || w == "--pipeline-model-parallel-size" ||
         w.starts_with("--num-layers=") || w.starts_with("--tensor-model-parallel-size=") ||
         w.starts_with("--pipeline-model-parallel-size=");
}
bool is_script(std::string_view w) { return w.size() > 3 && w.ends_with(".py"); }

std::vector<Word> command_words(const std::string& path, const std::string& text, std::vector<std::string>* launcher) {
  std::vector<std::vector<Word>> commands = shell_commands(text);
  auto has = [](const std::vector<Word>& c, auto pred) {
    return std::any_of(c.begin(), c.end(), [&](const Word& w) { return pred(w.text); });
  };
  const std::vector<Word>* chosen = nullptr;
  for (const auto& c : commands)
    if (has(c, is_megatron_marker)) { chosen = &c; break; }
  if (chosen == nullptr)
    for (const auto& c : commands)
      if (has(c, is_script)) { chosen = &c; break; }
  if (chosen == nullptr)
    throw InputError(path, "", "no Megatron-LM command found (no --num-layers, --tensor-model-parallel-size or "
                               "script.py word after expanding the file's variables)");
  // The script word splits the launcher (torchrun ... / python -m torch.distributed.run ...) off.
  auto script = std::find_if(chosen->begin(), chosen->end(), [](const Word& w) { return is_script(w.text); });
  std::vector<Word> out;
  if (script != chosen->end()) {
    if (launcher != nullptr)
      for (auto it = chosen->begin(); it != script; ++it) launcher->push_back(it->unresolved.empty() ? it->text : "");
    out.assign(script + 1, chosen->end());
  } else {
    out = *chosen;
  }
  return out;
}

// ---------------------------------------------------------------- flags

enum class Arity { none, one, many };

// Every flag meshplan reads or knowingly ignores, with its argparse arity (arguments.py).
const std::map<std::string, Arity, std::less<>>& known_flags() {
  static const std::map<std::string, Arity, std::less<>> k = [] {
    std::map<std::string, Arity, std::less<>> m;
    for (const char* f :
         {"--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split", "--sequence-parallel",
          "--tp-comm-overlap", "--overlap-grad-reduce", "--overlap-param-gather", "--use-distributed-optimizer",
          "--use-megatron-fsdp", "--use-custom-fsdp", "--use-torch-fsdp2", "--multi-latent-attention",
          "--group-query-attention", "--qk-layernorm", "--moe-pad-expert-input-to-capacity", "--moe-grouped-gemm",
          "--swiglu", "--squared-relu", "--disable-bias-linear", "--use-rope-scaling",
          "--untie-embeddings-and-output-weights", "--enable-cuda-graph", "--external-cuda-graph", "--bf16", "--fp16",
          "--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32", "--recompute-activations",
          "--fp8-param-gather", "--mock-data", "--use-flash-attn", "--use-mcore-models", "--no-masked-softmax-fusion",
          "--no-bias-gelu-fusion", "--no-bias-dropout-fusion", "--no-bias-swiglu-fusion",
          "--no-gradient-accumulation-fusion", "--no-rope-fusion", "--apply-layernorm-1p",
          "--use-rotary-position-embeddings", "--no-position-embedding", "--log-throughput",
          "--log-timers-to-tensorboard", "--log-memory-to-tensorboard", "--log-params-norm", "--log-num-zeros-in-grad",
          "--no-load-optim", "--no-load-rng", "--no-save-optim", "--no-save-rng", "--use-checkpoint-args",
          "--manual-gc", "--moe-router-enable-expert-bias", "--moe-router-pre-softmax", "--moe-permute-fusion",
          "--moe-router-fusion", "--cross-entropy-loss-fusion", "--overlap-p2p-communication",
          "--no-overlap-p2p-communication", "--align-grad-reduce", "--align-param-gather",
          "--no-create-attention-mask-in-dataloader", "--check-for-nan-in-loss-and-grad", "--use-cpu-initialization",
          "--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss", "--add-qkv-bias",
          "--deepspeed", "--no-pipeline-parallel", "--cpu-offloading", "--distribute-saved-activations",
          "--override-opt_param-scheduler", "--use-dist-ckpt", "--async-save", "--moe-enable-deepep",
          "--fine-grained-activation-offloading", "--delay-offload-until-cuda-graph", "--fp8-dot-product-attention",
          "--moe-router-force-load-balancing", "--overlap-moe-expert-parallel-comm"})
      m[f] = Arity::none;
    for (const char* f :
         {"--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--decoder-first-pipeline-num-layers",
          "--decoder-last-pipeline-num-layers", "--num-virtual-stages-per-pipeline-rank",
          "--num-layers-per-virtual-pipeline-stage", "--virtual-pipeline-model-parallel-size",
          "--context-parallel-size", "--expert-model-parallel-size", "--expert-tensor-parallel-size",
          "--data-parallel-sharding-strategy", "--num-layers", "--hidden-size", "--num-attention-heads",
          "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim",
          "--kv-channels", "--num-query-groups", "--mtp-num-layers", "--ffn-hidden-size", "--num-experts",
          "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size", "--moe-layer-freq",
          "--moe-expert-capacity-factor", "--normalization", "--norm-epsilon", "--position-embedding-type",
          "--rotary-base", "--rope-scaling-factor", "--rotary-percent", "--rotary-seq-len-interpolation-factor",
          "--max-position-embeddings", "--attention-dropout", "--hidden-dropout", "--micro-batch-size",
          "--global-batch-size", "--seq-length", "--recompute-granularity", "--recompute-method",
          "--recompute-num-layers", "--fp8-format", "--fp8-recipe", "--fp4-format", "--fp4-recipe", "--optimizer",
          "--adam-beta1", "--adam-beta2", "--adam-eps", "--lr", "--min-lr", "--lr-decay-style", "--lr-warmup-iters",
          "--lr-warmup-fraction", "--lr-warmup-samples", "--lr-decay-iters", "--lr-decay-samples",
          "--weight-decay", "--clip-grad", "--init-method-std", "--train-iters", "--train-samples",
          "--tokenizer-type", "--tokenizer-model", "--vocab-size", "--vocab-file", "--merge-file", "--log-interval",
          "--eval-interval", "--save-interval", "--eval-iters", "--save", "--load", "--split", "--seed",
          "--distributed-backend", "--distributed-timeout-minutes", "--transformer-impl", "--attention-backend",
          "--exit-duration-in-mins", "--exit-interval", "--tensorboard-dir", "--wandb-project", "--wandb-exp-name",
          "--wandb-save-dir", "--ckpt-format", "--moe-router-load-balancing-type", "--moe-aux-loss-coeff",
          "--moe-token-dispatcher-type", "--moe-router-dtype", "--moe-z-loss-coeff", "--moe-router-score-function",
          "--moe-router-topk-scaling-factor", "--moe-token-drop-policy", "--moe-router-num-groups",
          "--moe-router-group-topk", "--make-vocab-size-divisible-by", "--manual-gc-interval", "--timing-log-level",
          "--data-cache-path", "--num-workers", "--dataloader-type", "--zero-stage",
          "--num-distributed-optimizer-instances", "--pipeline-model-parallel-layout", "--mtp-loss-scaling-factor",
          "--cuda-graph-impl", "--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp8-margin",
          "--cpu-offloading-num-layers", "--use-legacy-models", "--moe-flex-dispatcher-backend"})
      m[f] = Arity::one;
    for (const char* f : {"--recompute-modules", "--rampup-batch-size", "--data-path", "--train-data-path", "--valid-data-path",
                          "--test-data-path", "--cuda-graph-modules", "--offload-modules", "--cuda-graph-scope"})
      m[f] = Arity::many;
    return m;
  }();
  return k;
}

// Known flags that change neither the step's time nor its memory, so that not reading them loses
// nothing: optimizer and schedule values, the run's length, data and tokenizer files, logging,
// checkpoint paths and formats, seeds, numerics that do not change a kernel's shape.
const std::set<std::string, std::less<>>& no_effect_flags() {
  static const std::set<std::string, std::less<>> k = {
      "--adam-beta1", "--adam-beta2", "--adam-eps", "--lr", "--min-lr", "--lr-decay-style", "--lr-warmup-iters",
      "--lr-warmup-fraction", "--lr-warmup-samples", "--lr-decay-iters", "--lr-decay-samples", "--weight-decay",
      "--init-method-std", "--seed", "--override-opt_param-scheduler", "--train-iters", "--train-samples",
      "--exit-duration-in-mins", "--exit-interval", "--eval-interval", "--eval-iters", "--split", "--data-path",
      "--train-data-path", "--valid-data-path", "--test-data-path", "--data-cache-path", "--mock-data",
      "--vocab-file", "--merge-file", "--tokenizer-type", "--tokenizer-model", "--num-workers", "--dataloader-type",
      "--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss", "--no-create-attention-mask-in-dataloader",
      "--log-interval", "--log-throughput", "--log-timers-to-tensorboard", "--log-memory-to-tensorboard",
      "--log-params-norm", "--log-num-zeros-in-grad", "--timing-log-level", "--tensorboard-dir", "--wandb-project",
      "--wandb-exp-name", "--wandb-save-dir", "--save", "--load", "--no-load-optim", "--no-load-rng",
      "--no-save-optim", "--no-save-rng", "--use-checkpoint-args", "--use-dist-ckpt", "--ckpt-format", "--async-save",
      "--distributed-backend", "--distributed-timeout-minutes", "--use-mcore-models", "--use-cpu-initialization",
      "--norm-epsilon", "--rotary-base", "--rope-scaling-factor", "--use-rope-scaling", "--rotary-percent",
      "--rotary-seq-len-interpolation-factor", "--max-position-embeddings", "--mtp-loss-scaling-factor",
      "--moe-aux-loss-coeff", "--moe-z-loss-coeff", "--moe-router-topk-scaling-factor", "--fp8-amax-history-len",
      "--fp8-amax-compute-algo", "--fp8-margin", "--clip-grad", "--check-for-nan-in-loss-and-grad",
  };
  return k;
}

// Value flags meshplan does not read, with Megatron's default (arguments.py at core_v0.15.0): the
// behaviour the model assumes, so that a file stating the default has nothing to name.
const std::map<std::string, std::string, std::less<>>& unread_flag_defaults() {
  static const std::map<std::string, std::string, std::less<>> k = {
      {"--transformer-impl", "transformer_engine"},
      {"--num-distributed-optimizer-instances", "1"},
      {"--moe-router-load-balancing-type", "aux_loss"},
      {"--moe-router-score-function", "softmax"},
      {"--moe-token-drop-policy", "probs"},
      {"--manual-gc-interval", "0"},
      {"--cpu-offloading-num-layers", "0"},
  };
  return k;
}

// One flag as given. Of the known flags, those the importer reads below set what meshplan models;
// the others (optimizer values, data, logging, checkpoints, fusions) change neither memory nor time.
struct Given {
  std::vector<std::string> values;  // the last occurrence's (argparse: the last wins)
};

class Args {
public:
  Args(std::string file, std::vector<Word> words, std::vector<std::string>& warnings)
      : file_(std::move(file)), warnings_(warnings) {
    const auto& known = known_flags();
    std::vector<std::string> names;
    for (const auto& [k, _] : known) names.push_back(k);
    for (std::size_t i = 0; i < words.size();) {
      const Word& w = words[i];
      if (!w.unresolved.empty() && !w.text.starts_with("--"))
        fail(fmt::format("${}", w.unresolved.front()),
             fmt::format("'{}' is a shell variable this file does not set, so the arguments it holds cannot be read; "
                         "expand it (e.g. run the script with `bash -x`) or write the arguments out",
                         w.text));
      if (!w.text.starts_with("-") || w.text == "-" || w.text == "--") {
        fail(i > 0 ? last_flag_ : w.text,
             fmt::format("unexpected argument '{}' (not a --flag, and {} takes no more values; Megatron's argparse "
                         "rejects it)", w.text, i > 0 ? last_flag_ : "nothing before it"));
      }
      std::string name = w.text;
      std::vector<Word> values;
      if (const auto eq = name.find('='); eq != std::string::npos) {
        values.push_back({name.substr(eq + 1), w.unresolved});
        name = name.substr(0, eq);
      }
      ++i;
      auto take_following = [&] {
        while (i < words.size() && !(words[i].text.starts_with("--") && words[i].text.size() > 2))
          values.push_back(words[i++]);
      };
      auto it = known.find(name);
      if (it == known.end()) {
        take_following();
        warnings_.push_back(fmt::format("{}: not a Megatron-LM argument meshplan knows; ignored{}", name,
                                        importer::did_you_mean(name, names)));
        last_flag_ = name;
        continue;
      }
      switch (it->second) {
        case Arity::none:
          if (!values.empty()) fail(name, fmt::format("takes no value, got '{}'", values[0].text));
          break;
        case Arity::one:
          if (values.empty()) {
            if (i >= words.size() || (words[i].text.starts_with("--") && words[i].text.size() > 2))
              fail(name, "needs a value");
            values.push_back(words[i++]);
          }
          break;
        case Arity::many:
          take_following();
          if (values.empty()) fail(name, "needs at least one value");
          break;
      }
      for (const Word& v : values)
        if (!v.unresolved.empty())
          fail(name, fmt::format("'{}' uses the shell variable ${} that this file does not set; write the value or "
                                 "expand the script first", v.text, v.unresolved.front()));
      if (given_.count(name) != 0)
        warnings_.push_back(fmt::format("{}: given more than once; the last value wins (argparse)", name));
      Given g;
      for (Word& v : values) g.values.push_back(std::move(v.text));
      given_[name] = std::move(g);
      last_flag_ = name;
    }
  }

  bool has(std::string_view f) const {
    read_.emplace(f);
    return given_.find(f) != given_.end();
  }
  std::optional<std::string> str(std::string_view f) const {
    read_.emplace(f);
    auto it = given_.find(f);
    if (it == given_.end()) return std::nullopt;
    return it->second.values.front();
  }
  std::vector<std::string> list(std::string_view f) const {
    read_.emplace(f);
    auto it = given_.find(f);
    return it == given_.end() ? std::vector<std::string>{} : it->second.values;
  }
  // The flags given that no mapping above read, in name order.
  std::vector<std::string> unread() const {
    std::vector<std::string> out;
    for (const auto& [name, _] : given_)
      if (read_.count(name) == 0) out.push_back(name);
    return out;
  }
  std::optional<std::int64_t> integer(std::string_view f, std::int64_t min, std::int64_t max, const char* what) const {
    auto s = str(f);
    if (!s) return std::nullopt;
    std::int64_t v = 0;
    const auto r = std::from_chars(s->data(), s->data() + s->size(), v);
    if (r.ec == std::errc::result_out_of_range)
      fail(std::string(f), fmt::format("{} is above the maximum {} {} (docs/limits.md)", *s, max, what));
    if (r.ec != std::errc() || r.ptr != s->data() + s->size())
      fail(std::string(f), fmt::format("expected an integer, got '{}'", *s));
    if (v < min) fail(std::string(f), fmt::format("must be at least {}, got {}", min, v));
    return limits::check_count(file_, std::string(f), v, min, max, what);
  }
  std::optional<double> number(std::string_view f) const {
    auto s = str(f);
    if (!s) return std::nullopt;
    double v = 0;
    const auto r = std::from_chars(s->data(), s->data() + s->size(), v);
    if (r.ec != std::errc() || r.ptr != s->data() + s->size() || !std::isfinite(v))
      fail(std::string(f), fmt::format("expected a number, got '{}'", *s));
    return v;
  }
  std::optional<std::string> choice(std::string_view f, std::initializer_list<std::string_view> allowed) const {
    auto s = str(f);
    if (!s) return std::nullopt;
    if (std::find(allowed.begin(), allowed.end(), *s) == allowed.end()) {
      std::string list;
      for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      fail(std::string(f), fmt::format("'{}' is not one of {}", *s, list));
    }
    return s;
  }
  [[noreturn]] void fail(const std::string& flag, const std::string& reason) const {
    throw InputError(file_, flag, importer::one_line(reason));
  }
  const std::string& file() const { return file_; }

private:
  std::string file_;
  std::vector<std::string>& warnings_;
  std::map<std::string, Given, std::less<>> given_;
  mutable std::set<std::string, std::less<>> read_;  // flags the mapping asked about
  std::string last_flag_;
};

// ---------------------------------------------------------------- model

// Same layers, widths, heads, experts and vocabulary: what every FLOP and byte is computed from.
bool same_shape(const ModelSpec& a, const ModelSpec& b, bool compare_vocab) {
  const bool dense_ffn_matters = !a.moe.enabled() || a.moe.n_dense_layers > 0;
  return a.n_layers == b.n_layers && a.d_model == b.d_model && a.n_heads == b.n_heads && a.n_kv_heads == b.n_kv_heads &&
         a.head_dim == b.head_dim && (!dense_ffn_matters || a.ffn_hidden == b.ffn_hidden) && a.mlp == b.mlp &&
         (!compare_vocab || a.vocab == b.vocab) && a.tied_embeddings == b.tied_embeddings && a.pos_emb == b.pos_emb &&
         a.norm == b.norm && a.linear_bias == b.linear_bias && a.norm_bias == b.norm_bias &&
         a.moe.n_experts == b.moe.n_experts && a.moe.top_k == b.moe.top_k && a.moe.expert_ffn == b.moe.expert_ffn &&
         a.moe.n_shared_experts == b.moe.n_shared_experts && a.moe.n_dense_layers == b.moe.n_dense_layers &&
         a.moe.capacity_factor == b.moe.capacity_factor && a.moe.force_balance == b.moe.force_balance &&
         a.attention == b.attention &&
         a.mla.q_lora_rank == b.mla.q_lora_rank && a.mla.kv_lora_rank == b.mla.kv_lora_rank &&
         a.mla.rope_head_dim == b.mla.rope_head_dim && a.mla.v_head_dim == b.mla.v_head_dim &&
         a.qk_norm == b.qk_norm && a.n_mtp_layers == b.n_mtp_layers && a.sliding_window == b.sliding_window &&
         a.full_attention_every == b.full_attention_every;
}

// --moe-layer-freq: an int k (every k-th layer is MoE) or a Python list expression such as
// "([0]*3+[1]*58)" or "[0,0,1,1]". meshplan models leading dense layers only.
int dense_layers_from_freq(const Args& a, int n_layers) {
  const std::string f = "--moe-layer-freq";
  std::string s = *a.str(f);
  std::erase_if(s, [](char c) { return std::isspace(static_cast<unsigned char>(c)); });
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    const std::int64_t k = *a.integer(f, 1, limits::kMaxLayers, "layers");
    if (k != 1)
      a.fail(f, fmt::format("every {}-th layer MoE is not modelled (only leading dense layers, then MoE layers)", k));
    return 0;
  }
  while (s.size() >= 2 && s.front() == '(' && s.back() == ')') s = s.substr(1, s.size() - 2);
  // Terms "[a,b,...]" or "[a,...]*N" joined by '+', each a 0 or 1; parsed by hand (no regex
  // recursion over a long list).
  auto bad = [&]() -> void {
    a.fail(f, fmt::format("'{}' is not an int or a list expression like ([0]*3+[1]*58)",
                          a.str(f)->size() > 80 ? a.str(f)->substr(0, 77) + "..." : *a.str(f)));
  };
  std::vector<int> pattern;
  std::size_t i = 0;
  while (true) {
    if (i >= s.size() || s[i] != '[') bad();
    std::vector<int> items;
    for (++i;; ++i) {
      if (i >= s.size() || (s[i] != '0' && s[i] != '1')) bad();
      items.push_back(s[i] - '0');
      ++i;
      if (i < s.size() && s[i] == ']') break;
      if (i >= s.size() || s[i] != ',') bad();
    }
    ++i;
    std::int64_t times = 1;
    if (i < s.size() && s[i] == '*') {
      ++i;
      if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) bad();
      times = 0;
      for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i)
        times = std::min<std::int64_t>(times * 10 + (s[i] - '0'), limits::kMaxLayers + 1);
    }
    for (std::int64_t r = 0; r < times && static_cast<std::int64_t>(pattern.size()) <= limits::kMaxLayers; ++r)
      pattern.insert(pattern.end(), items.begin(), items.end());
    if (i == s.size()) break;
    if (s[i] != '+') bad();
    ++i;
  }
  if (static_cast<int>(pattern.size()) != n_layers)
    a.fail(f, fmt::format("the pattern lists {} layers, but --num-layers is {}", pattern.size(), n_layers));
  const auto first_moe = std::find(pattern.begin(), pattern.end(), 1);
  if (first_moe == pattern.end()) a.fail(f, "no layer is MoE; drop --num-experts for a dense model");
  if (std::find(first_moe, pattern.end(), 0) != pattern.end())
    a.fail(f, "a dense layer after an MoE layer is not modelled (only leading dense layers, then MoE layers)");
  return static_cast<int>(first_moe - pattern.begin());
}

// Long by the number of Megatron model flags: one read-and-check per flag, in the order of
// Megatron's argument groups, so a flag is found where its documentation puts it.
ModelSpec build_model(const Args& a, std::int64_t seq_len, std::vector<std::string>& warnings) {
  auto need = [&](const char* f, std::int64_t max, const char* what) {
    auto v = a.integer(f, 1, max, what);
    if (!v) a.fail(f, "required (Megatron needs it to build the model)");
    return *v;
  };
  ModelSpec m;
  m.n_layers = static_cast<int>(need("--num-layers", limits::kMaxLayers, "layers"));
  m.d_model = need("--hidden-size", limits::kMaxWidth, "a width");
  m.n_heads = static_cast<int>(need("--num-attention-heads", limits::kMaxHeads, "heads"));
  m.n_kv_heads = m.n_heads;
  if (a.has("--group-query-attention")) {
    m.n_kv_heads = static_cast<int>(a.integer("--num-query-groups", 1, limits::kMaxHeads, "heads").value_or(1));
    if (m.n_heads % m.n_kv_heads != 0)
      a.fail("--num-query-groups", fmt::format("{} heads are not divisible into {} groups", m.n_heads, m.n_kv_heads));
  } else if (a.has("--num-query-groups")) {
    warnings.push_back("--num-query-groups: has no effect without --group-query-attention (multi-head attention)");
  }
  if (m.d_model % m.n_heads != 0 && !a.has("--kv-channels") && !a.has("--multi-latent-attention"))
    a.fail("--num-attention-heads", fmt::format("--hidden-size {} is not divisible by {} heads; set --kv-channels",
                                                m.d_model, m.n_heads));
  m.head_dim = a.integer("--kv-channels", 1, limits::kMaxHeadDim, "a head width").value_or(m.d_model / m.n_heads);
  if (a.has("--multi-latent-attention")) {
    m.attention = AttentionKind::mla;
    m.n_kv_heads = m.n_heads;
    m.mla.q_lora_rank = a.integer("--q-lora-rank", 1, limits::kMaxWidth, "a rank").value_or(0);
    // MLATransformerConfig defaults (DeepSeek-V2/V3 shapes).
    m.mla.kv_lora_rank = a.integer("--kv-lora-rank", 1, limits::kMaxWidth, "a rank").value_or(512);
    m.head_dim = a.integer("--qk-head-dim", 1, limits::kMaxHeadDim, "a head width").value_or(128);
    m.mla.rope_head_dim = a.integer("--qk-pos-emb-head-dim", 1, limits::kMaxHeadDim, "a head width").value_or(64);
    m.mla.v_head_dim = a.integer("--v-head-dim", 1, limits::kMaxHeadDim, "a head width").value_or(128);
  }
  m.qk_norm = a.has("--qk-layernorm");
  m.n_mtp_layers = static_cast<int>(a.integer("--mtp-num-layers", 0, limits::kMaxLayers, "layers").value_or(0));

  if (a.has("--swiglu") && a.has("--squared-relu")) a.fail("--squared-relu", "contradicts --swiglu");
  m.mlp = a.has("--swiglu") ? MlpKind::swiglu : a.has("--squared-relu") ? MlpKind::relu2 : MlpKind::gelu;
  // arguments.py: without --ffn-hidden-size, 4h, or for SwiGLU 2/3 of it rounded down to a multiple of 64.
  const std::int64_t ffn_default = m.mlp == MlpKind::swiglu ? (4 * m.d_model * 2 / 3) / 64 * 64 : 4 * m.d_model;
  m.ffn_hidden = a.integer("--ffn-hidden-size", 1, limits::kMaxWidth, "a width").value_or(ffn_default);

  if (auto n = a.integer("--num-experts", 1, limits::kMaxExperts, "experts")) {
    m.moe.n_experts = static_cast<int>(*n);
    m.moe.top_k = static_cast<int>(a.integer("--moe-router-topk", 1, limits::kMaxExperts, "experts").value_or(2));
    if (m.moe.top_k > m.moe.n_experts)
      a.fail("--moe-router-topk", fmt::format("{} is more than the {} experts", m.moe.top_k, m.moe.n_experts));
    m.moe.expert_ffn = a.integer("--moe-ffn-hidden-size", 1, limits::kMaxWidth, "a width").value_or(m.ffn_hidden);
    if (auto s = a.integer("--moe-shared-expert-intermediate-size", 1, limits::kMaxWidth, "a width")) {
      if (*s % m.moe.expert_ffn != 0)
        a.fail("--moe-shared-expert-intermediate-size",
               fmt::format("{} is not a multiple of the expert width {} (meshplan models shared experts as whole "
                           "experts)", *s, m.moe.expert_ffn));
      m.moe.n_shared_experts = static_cast<int>(*s / m.moe.expert_ffn);
    }
    if (a.has("--moe-layer-freq")) m.moe.n_dense_layers = dense_layers_from_freq(a, m.n_layers);
    // Random router scores for benchmarking (router.py, apply_random_logits): balanced on average.
    m.moe.force_balance = a.has("--moe-router-force-load-balancing");
    if (auto cf = a.number("--moe-expert-capacity-factor")) {
      if (*cf <= 0) a.fail("--moe-expert-capacity-factor", fmt::format("must be positive, got {}", *cf));
      m.moe.capacity_factor = *cf;
      if (!a.has("--moe-pad-expert-input-to-capacity"))
        warnings.push_back("--moe-expert-capacity-factor: without --moe-pad-expert-input-to-capacity Megatron drops "
                           "tokens over capacity but does not pad; modelled as padded to capacity (an upper bound)");
    }
  } else {
    for (const char* f : {"--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size",
                          "--moe-layer-freq", "--moe-expert-capacity-factor", "--moe-router-force-load-balancing"})
      if (a.has(f)) warnings.push_back(fmt::format("{}: has no effect without --num-experts (a dense model)", f));
  }

  const std::string norm = a.choice("--normalization", {"LayerNorm", "RMSNorm"}).value_or("LayerNorm");
  m.norm = norm == "RMSNorm" ? NormKind::rmsnorm : NormKind::layernorm;
  m.norm_bias = m.norm == NormKind::layernorm;  // Megatron's LayerNorm always has a bias
  m.norm_eps = a.number("--norm-epsilon").value_or(1e-5);
  if (m.norm_eps <= 0) a.fail("--norm-epsilon", fmt::format("must be positive, got {}", m.norm_eps));
  m.linear_bias = !a.has("--disable-bias-linear");
  m.tied_embeddings = !a.has("--untie-embeddings-and-output-weights");

  std::string pos = a.choice("--position-embedding-type", {"learned_absolute", "rope", "relative", "none", "mrope", "yarn"})
                        .value_or(a.has("--use-rotary-position-embeddings") ? "rope" : "learned_absolute");
  if (a.has("--no-position-embedding")) pos = "none";
  if (pos == "relative" || pos == "mrope" || pos == "yarn")
    a.fail("--position-embedding-type", fmt::format("'{}' positions are not modelled (rope, learned_absolute, none)", pos));
  m.pos_emb = pos == "rope" ? PosEmb::rope : pos == "none" ? PosEmb::none : PosEmb::learned;
  m.max_seq_len = a.integer("--max-position-embeddings", 1, limits::kMaxSeqLen, "positions").value_or(seq_len);
  if (m.pos_emb == PosEmb::learned && seq_len > m.max_seq_len)
    a.fail("--seq-length", fmt::format("{} exceeds the learned position table of {} rows (--max-position-embeddings)",
                                       seq_len, m.max_seq_len));
  if (m.pos_emb == PosEmb::rope) {
    m.rope.theta = a.number("--rotary-base").value_or(10000);
    if (a.has("--use-rope-scaling")) {
      // Megatron-Core's apply_rope_scaling (Llama 3.1): the factor is an argument, the rest fixed.
      m.rope.scaling = "llama3";
      m.rope.factor = a.number("--rope-scaling-factor").value_or(8);
      m.rope.low_freq_factor = 1;
      m.rope.high_freq_factor = 4;
      m.rope.original_max_position = 8192;
    }
  }
  return m;
}

// The vocabulary: --vocab-size (NullTokenizer), else the shipped model a --tokenizer-model
// Hugging Face id names.
std::optional<std::int64_t> vocab_of(const Args& a) {
  if (auto v = a.integer("--vocab-size", 1, limits::kMaxVocab, "tokens")) return *v;
  if (auto t = a.str("--tokenizer-model"))
    if (auto shipped = shipped_model_for_hf_id(*t)) return load_model(*shipped).vocab;
  return std::nullopt;
}

// The GPU count from a torchrun prefix (--nnodes x --nproc-per-node).
void read_launcher_gpus(const std::string& path, const std::vector<std::string>& launcher, RunConfig& rc) {
  std::optional<std::int64_t> nodes, per_node;
  bool unknown = false;
  for (std::size_t i = 0; i < launcher.size(); ++i) {
    std::string w = launcher[i], v;
    if (const auto eq = w.find('='); w.starts_with("--") && eq != std::string::npos) {
      v = w.substr(eq + 1);
      w = w.substr(0, eq);
    } else if (i + 1 < launcher.size() && w.starts_with("--")) {
      v = launcher[i + 1];
    }
    if (w != "--nnodes" && w != "--nproc-per-node" && w != "--nproc_per_node") continue;
    std::int64_t n = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
    if (r.ec != std::errc() || r.ptr != v.data() + v.size() || n <= 0) {
      unknown = true;
      rc.warnings.push_back(fmt::format("{}: '{}' is not a fixed count (a variable, a range or 'gpu'); the GPU count "
                                        "comes from --gpus", w, v));
      continue;
    }
    (w == "--nnodes" ? nodes : per_node) = limits::check_count(path, w, n, 1, limits::kMaxGpus, "GPUs");
  }
  if (!unknown && per_node) rc.n_gpus = nodes.value_or(1) * *per_node;
  if (rc.n_gpus > limits::kMaxGpus)
    throw InputError(path, "--nnodes", fmt::format("{} GPUs is above the maximum {} (docs/limits.md)", rc.n_gpus,
                                                   limits::kMaxGpus));
  }

// The batch and the sequence.
void read_batch(const Args& a, RunConfig& rc) {
  Job& job = rc.job;
  if (!a.has("--seq-length")) a.fail("--seq-length", "required (the training sequence length)");
  job.seq_len = *a.integer("--seq-length", 1, limits::kMaxSeqLen, "the sequence length");
  if (auto mb = a.integer("--micro-batch-size", 1, limits::kMaxBatch, "sequences per step")) {
  job.micro_batch = *mb;
  } else {
  job.micro_batch = 0;  // resolved as a tuned run would (workload/runtime_choices)
  rc.left_to_runtime.micro_batch = true;
  rc.warnings.push_back("--micro-batch-size: not given; left to the runtime (the largest that fits)");
  }
  if (auto gb = a.integer("--global-batch-size", 1, limits::kMaxBatch, "sequences per step")) {
  job.global_batch = *gb;
  job.grad_accum = 0;
  } else {
  job.grad_accum = 1;  // arguments.py: global = micro x data-parallel
  if (rc.left_to_runtime.micro_batch)
    a.fail("--global-batch-size", "required when --micro-batch-size is not given");
  }
  if (a.has("--rampup-batch-size"))
  rc.warnings.push_back("--rampup-batch-size: modelled at the final --global-batch-size");
  job.pp_microbatches = 0;  // every micro-batch of a step in one pipeline schedule run
}

// The model: a shipped one of the same shape, else the one the flags build.
void read_model(const Args& a, const std::string& path, const ImportOptions& opts, RunConfig& rc) {
  Job& job = rc.job;
  if (opts.model) {
    rc.model = *opts.model;
  } else {
    ModelSpec built = build_model(a, job.seq_len, rc.warnings);
    const std::optional<std::int64_t> vocab = vocab_of(a);
    built.vocab = vocab.value_or(0);
    std::optional<ModelSpec> match;
    for (const std::string& name : list_models()) {
      ModelSpec shipped = load_model(name);
      if (same_shape(built, shipped, vocab.has_value())) {
        match = std::move(shipped);
        break;
      }
    }
    if (match) {
      rc.model = *match;
      if (!vocab) {
        rc.warnings.push_back(fmt::format("--vocab-size: not given and the tokenizer is not a shipped model's; the "
                                          "shape is {}'s, whose vocabulary {} is used", match->name, match->vocab));
        note_default(rc, "--vocab-size", fmt::format("{}", match->vocab),
                     fmt::format("the vocabulary of {}, the shipped model of this shape", match->name));
      }
    } else {
      if (!vocab)
        a.fail("--vocab-size", "required: the tokenizer's vocabulary is not known (no --vocab-size, and "
                               "--tokenizer-model is not the Hugging Face id of a shipped model); or pass --model");
      built.name = "megatron-" + importer::file_stem(path);
      rc.model = built;
    }
  }
}

// The mesh degrees, the MoE dispatcher, sequence parallelism and async TP.
void read_parallelism(const Args& a, RunConfig& rc) {
  Plan& plan = rc.plan;
  Mesh& mesh = plan.mesh;
  auto degree = [&](const char* f) {
    return static_cast<int>(a.integer(f, 1, limits::kMaxGpus, "a mesh degree (the GPU maximum)").value_or(1));
  };
  mesh.tp = degree("--tensor-model-parallel-size");
  mesh.pp = degree("--pipeline-model-parallel-size");
  mesh.cp = degree("--context-parallel-size");
  mesh.ep = degree("--expert-model-parallel-size");
  // The flex dispatcher runs DeepEP (--moe-enable-deepep, the default backend) or HybridEP.
  if (a.choice("--moe-token-dispatcher-type", {"allgather", "alltoall", "flex"}).value_or("allgather") == "flex") {
    const std::string backend = a.choice("--moe-flex-dispatcher-backend", {"deepep", "hybridep"}).value_or("deepep");
    if (!a.has("--moe-flex-dispatcher-backend"))
      note_default(rc, "--moe-flex-dispatcher-backend", "deepep", "Megatron-LM's default, arguments.py");
    plan.moe_dispatcher = backend == "hybridep" ? MoeDispatcher::hybridep : MoeDispatcher::deepep;
  }
  plan.moe_a2a_overlap = a.has("--overlap-moe-expert-parallel-comm");
  plan.moe_permute_fusion = a.has("--moe-permute-fusion");
  plan.moe_router_fusion = a.has("--moe-router-fusion");
  // Without --moe-grouped-gemm Megatron loops over the local experts (SequentialMLP).
  if (rc.model.moe.enabled()) plan.moe_grouped_gemm = a.has("--moe-grouped-gemm");
  if (a.has("--expert-tensor-parallel-size")) {
    const int etp = degree("--expert-tensor-parallel-size");
    mesh.etp = etp == mesh.tp ? 0 : etp;  // Megatron's default is tp
  } else if (mesh.ep > 1 && mesh.tp > 1) {
    note_default(rc, "--expert-tensor-parallel-size", fmt::format("{}, the tensor-parallel degree", mesh.tp),
                 "Megatron-LM's default, arguments.py");
  }
  if (mesh.ep > 1 && !rc.model.moe.enabled())
    rc.warnings.push_back("--expert-model-parallel-size: the model has no experts; EP has no effect");
  plan.sequence_parallel = a.has("--sequence-parallel") && mesh.tp > 1;
  if (a.has("--sequence-parallel") && mesh.tp == 1)
    rc.warnings.push_back("--sequence-parallel: dropped by Megatron at tensor parallel 1");
  plan.async_tp = a.has("--tp-comm-overlap") && plan.sequence_parallel;
  if (a.has("--tp-comm-overlap") && !plan.sequence_parallel)
    rc.warnings.push_back("--tp-comm-overlap: needs --sequence-parallel and tp > 1; no effect");
  plan.tp_style = TpStyle::full;
}

// Megatron pads the vocabulary to a multiple of --make-vocab-size-divisible-by x tp.
void pad_vocab(const Args& a, RunConfig& rc) {
  const int tp = rc.plan.mesh.tp;
  const std::int64_t by = a.integer("--make-vocab-size-divisible-by", 1, limits::kMaxVocab, "tokens").value_or(128);
  const std::int64_t padded = megatron_padded_vocab(rc.model.vocab, by, tp);
  if (padded > limits::kMaxVocab)
    a.fail("--make-vocab-size-divisible-by", fmt::format("the padded vocabulary {} is above the maximum {} "
                                                         "(docs/limits.md)", padded, limits::kMaxVocab));
  if (padded != rc.model.vocab) {
    if (!a.has("--make-vocab-size-divisible-by"))
      note_default(rc, "--make-vocab-size-divisible-by",
                   fmt::format("128: the vocabulary {} padded to {} (128 x tp {})", rc.model.vocab, padded, tp),
                   "Megatron-LM's default, arguments.py; megatron/training/tokenizer vocab_size_with_padding");
    rc.warnings.push_back(fmt::format("--vocab-size: {} padded to {} (a multiple of --make-vocab-size-divisible-by "
                                      "{} x tp {}, as Megatron pads it)", rc.model.vocab, padded, by, tp));
    rc.model.vocab = padded;
  }
}

// The pipeline split, the virtual stages and the schedule.
void read_pipeline(const Args& a, RunConfig& rc) {
  Plan& plan = rc.plan;
  Mesh& mesh = plan.mesh;
  // Pipeline split (TransformerConfig; spec/pipeline_split.hpp).
  PipelineSplit& split = plan.pipeline_split;
  split.embedding_as_layer = a.has("--account-for-embedding-in-pipeline-split");
  split.loss_as_layer = a.has("--account-for-loss-in-pipeline-split");
  for (auto [f, field] : {std::pair{"--decoder-first-pipeline-num-layers", &split.first_stage_layers},
                          std::pair{"--decoder-last-pipeline-num-layers", &split.last_stage_layers}})
    if (auto n = a.integer(f, 0, limits::kMaxLayers, "layers")) *field = static_cast<int>(*n);
  if (auto text = a.str("--pipeline-model-parallel-layout")) {
    // The layout fixes every virtual stage; VPP = stages / PP (arguments.py).
    std::string why;
    const auto pl = parse_pipeline_layout(*text, &why);
    if (!pl) a.fail("--pipeline-model-parallel-layout", fmt::format("'{}': {}", *text, why));
    set_layout(split, *pl);
  }
  mesh.vpp = 1;
  const int given_vpp = static_cast<int>(a.has("--num-virtual-stages-per-pipeline-rank") +
                                         a.has("--num-layers-per-virtual-pipeline-stage") +
                                         a.has("--virtual-pipeline-model-parallel-size"));
  if (given_vpp > 1)
    a.fail("--num-virtual-stages-per-pipeline-rank",
           "give one of --num-virtual-stages-per-pipeline-rank and --num-layers-per-virtual-pipeline-stage (Megatron "
           "raises)");
  if (a.has("--num-virtual-stages-per-pipeline-rank"))
    mesh.vpp = static_cast<int>(*a.integer("--num-virtual-stages-per-pipeline-rank", 1, limits::kMaxLayers, "virtual stages"));
  if (a.has("--virtual-pipeline-model-parallel-size"))
    mesh.vpp = static_cast<int>(*a.integer("--virtual-pipeline-model-parallel-size", 1, limits::kMaxLayers, "virtual stages"));
  if (a.has("--num-layers-per-virtual-pipeline-stage")) {
    // arguments.py: vpp = (layers, + 1 per counted embedding / loss) / pp / layers per virtual stage.
    const std::string f = "--num-layers-per-virtual-pipeline-stage";
    const std::int64_t per = *a.integer(f.c_str(), 1, limits::kMaxLayers, "layers");
    const std::int64_t counted = rc.model.n_layers + split.embedding_as_layer + split.loss_as_layer;
    if (mesh.pp == 1) a.fail(f, "virtual pipeline stages need --pipeline-model-parallel-size > 1");
    if (counted % mesh.pp != 0 || (counted / mesh.pp) % per != 0)
      a.fail(f, fmt::format("{} layers over pp {} do not make whole virtual stages of {} layers", counted, mesh.pp, per));
    mesh.vpp = static_cast<int>(counted / mesh.pp / per);
  }
  if (!split.chunk_layers.empty()) {
    const int stages = static_cast<int>(split.chunk_layers.size());
    const std::string f = "--pipeline-model-parallel-layout";
    if (stages % mesh.pp != 0)
      a.fail(f, fmt::format("{} stages do not divide over --pipeline-model-parallel-size {}", stages, mesh.pp));
    if (given_vpp > 0 && mesh.vpp != stages / mesh.pp)
      a.fail(f, fmt::format("{} stages over pp {} make vpp {}, but the virtual-stage flag gives {}", stages, mesh.pp,
                            stages / mesh.pp, mesh.vpp));
    mesh.vpp = stages / mesh.pp;
  }
  if (mesh.vpp > 1 && mesh.pp == 1)
    a.fail("--num-virtual-stages-per-pipeline-rank", "virtual pipeline stages need --pipeline-model-parallel-size > 1");
  plan.schedule = mesh.vpp > 1 ? PipelineSchedule::interleaved_1f1b : PipelineSchedule::one_f_one_b;
}

// Data-parallel sharding: DDP, the distributed optimizer (ZeRO-1) or Megatron-FSDP.
void read_sharding(const Args& a, RunConfig& rc) {
  Plan& plan = rc.plan;
  Mesh& mesh = plan.mesh;
  const bool mfsdp = a.has("--use-megatron-fsdp") || a.has("--use-custom-fsdp");
  if (a.has("--deepspeed"))
    rc.warnings.push_back("--deepspeed: Megatron-DeepSpeed's engine is not read from arguments (its ZeRO stage is in "
                          "the DeepSpeed JSON); modelled as Megatron-LM");
  if (mfsdp || a.has("--use-torch-fsdp2")) {
    const std::string flag = mfsdp ? "--data-parallel-sharding-strategy" : "--use-torch-fsdp2";
    const std::string strategy =
        mfsdp ? a.choice("--data-parallel-sharding-strategy", {"no_shard", "optim", "optim_grads", "optim_grads_params"})
                    .value_or("no_shard")
              : "optim_grads_params";
    if (strategy == "optim_grads")
      a.fail(flag, "optim_grads (ZeRO-2 under Megatron-FSDP) is not modelled; optim or optim_grads_params");
    if (strategy == "optim_grads_params") {
      plan.sharding = Sharding::zero3;
      plan.reshard_after_forward = true;
      mesh.dp_replicate = 1;
      mesh.dp_shard = -1;
    } else {
      plan.sharding = strategy == "optim" ? Sharding::zero1 : Sharding::none;
      mesh.dp_replicate = -1;
      mesh.dp_shard = 1;
    }
    if (a.has("--use-torch-fsdp2"))
      rc.warnings.push_back("--use-torch-fsdp2: torch FSDP2 under Megatron, modelled as Megatron-FSDP optim_grads_params");
  } else {
    if (a.has("--data-parallel-sharding-strategy"))
      rc.warnings.push_back("--data-parallel-sharding-strategy: has no effect without --use-megatron-fsdp");
    plan.sharding = a.has("--use-distributed-optimizer") ? Sharding::zero1 : Sharding::none;
    plan.reshard_after_forward = false;
    mesh.dp_replicate = -1;
    mesh.dp_shard = 1;
  }
  if (a.has("--overlap-param-gather") && !a.has("--use-distributed-optimizer"))
    rc.warnings.push_back("--overlap-param-gather: requires --use-distributed-optimizer (Megatron raises)");
  if (a.has("--overlap-param-gather") && !a.has("--overlap-grad-reduce"))
    rc.warnings.push_back("--overlap-param-gather: requires --overlap-grad-reduce (Megatron raises)");
  if (!a.has("--overlap-grad-reduce") && plan.sharding != Sharding::zero3)
    rc.warnings.push_back("--overlap-grad-reduce: not given, so Megatron reduces gradients after the backward pass; "
                          "meshplan overlaps the reduction with backward as this flag does (the step time is a "
                          "lower bound)");
}

// Params, gradients and the low-precision recipes.
void read_precision(const Args& a, RunConfig& rc) {
  Plan& plan = rc.plan;
  if (a.has("--bf16") && a.has("--fp16")) a.fail("--fp16", "contradicts --bf16");
  if (a.has("--bf16")) {
    plan.param_dtype = plan.compute_dtype = Dtype::bf16;
    // bf16 forces fp32 gradient accumulation and reduction unless --grad-reduce-in-bf16.
    plan.reduce_dtype = a.has("--grad-reduce-in-bf16") ? Dtype::bf16 : Dtype::fp32;
  } else if (a.has("--fp16")) {
    plan.param_dtype = plan.compute_dtype = Dtype::fp16;
    plan.reduce_dtype = a.has("--accumulate-allreduce-grads-in-fp32") ? Dtype::fp32 : Dtype::fp16;
  } else {
    plan.param_dtype = plan.compute_dtype = plan.reduce_dtype = Dtype::fp32;
  }
  plan.state_dtype = Dtype::fp32;  // fp32 main params and Adam moments
  plan.mixed_precision_name = "";
  if (auto fmt8 = a.choice("--fp8-format", {"e4m3", "hybrid"})) {
    const std::string recipe = a.choice("--fp8-recipe", {"delayed", "tensorwise", "mxfp8", "blockwise"}).value_or("delayed");
    if (recipe == "blockwise") a.fail("--fp8-recipe", "blockwise FP8 scaling is not modelled (delayed, tensorwise, mxfp8)");
    plan.fp8 = recipe == "delayed" ? Fp8Recipe::te_delayed : recipe == "tensorwise" ? Fp8Recipe::te_current : Fp8Recipe::mxfp8;
  } else if (a.has("--fp8-recipe")) {
    rc.warnings.push_back("--fp8-recipe: has no effect without --fp8-format");
  }
  if (a.has("--fp4-format")) {
    if (plan.fp8 != Fp8Recipe::none) a.fail("--fp4-format", "contradicts --fp8-format");
    plan.fp8 = Fp8Recipe::nvfp4;
  }
  plan.fp8_all_gather = a.has("--fp8-param-gather") && plan.fp8 != Fp8Recipe::none;
  if (a.has("--fp8-dot-product-attention")) {
    // Transformer Engine runs DotProductAttention in FP8 only inside an FP8 autocast region.
    if (plan.fp8 == Fp8Recipe::none)
      rc.warnings.push_back("--fp8-dot-product-attention: has no effect without --fp8-format");
    else if (!supports_fp8_attention(plan.fp8))
      a.fail("--fp8-dot-product-attention", fmt::format("FP8 attention under the {} recipe is not modelled "
                                                        "(delayed, tensorwise, mxfp8)", to_string(plan.fp8)));
    else
      plan.fp8_attention = true;
  }
  if (a.has("--fp8-param-gather") && plan.fp8 == Fp8Recipe::none)
    rc.warnings.push_back("--fp8-param-gather: has no effect without --fp8-format");
}

// Activation recompute and offload.
void read_recompute(const Args& a, RunConfig& rc) {
  Plan& plan = rc.plan;
  const auto granularity = a.choice("--recompute-granularity", {"full", "selective"});
  if (granularity == "full") {
    const std::string method = a.choice("--recompute-method", {"uniform", "block"}).value_or("uniform");
    const std::int64_t n = a.integer("--recompute-num-layers", 1, limits::kMaxLayers, "layers").value_or(1);
    plan.ac = AcMode::full;
    if (method == "block")
      rc.warnings.push_back(fmt::format("--recompute-method: block recomputes only the first {} layers of each stage; "
                                        "modelled as full recompute of every layer (memory an upper bound)", n));
    else if (n > 1)
      rc.warnings.push_back(fmt::format("--recompute-num-layers: uniform groups of {} layers are modelled as one layer "
                                        "per checkpoint (the recompute working set a lower bound)", n));
  } else if (granularity == "selective" || a.has("--recompute-activations")) {
    std::vector<std::string> mods = a.list("--recompute-modules");
    if (mods.empty()) mods = {"core_attn"};  // arguments.py default
    for (const std::string& name : mods) {
      switch (apply_recompute_module(name, plan.recompute_modules)) {
        case RecomputeModuleName::core_attn: plan.ac = AcMode::selective_attn; break;
        case RecomputeModuleName::modeled: break;
        case RecomputeModuleName::known_unmodeled:
          rc.warnings.push_back(fmt::format("--recompute-modules: '{}' is not recomputed separately by meshplan's model; "
                                            "modelled as kept (memory an upper bound)", name));
          break;
        case RecomputeModuleName::unknown:
          a.fail("--recompute-modules", fmt::format("'{}' is not a Megatron module name (core_attn, moe_act, layernorm, "
                                                    "mla_up_proj, mlp, moe, shared_experts)", name));
      }
    }
  } else if (a.has("--recompute-method") || a.has("--recompute-num-layers") || a.has("--recompute-modules")) {
    rc.warnings.push_back("--recompute-granularity: not given, so --recompute-method/-num-layers/-modules have no effect");
  }
  if (a.has("--fine-grained-activation-offloading")) {
    // The listed submodules' saved tensors go to pinned host memory on a side stream.
    const std::vector<std::string> mods = a.list("--offload-modules");
    if (mods.empty())
      a.fail("--offload-modules", "--fine-grained-activation-offloading needs the modules to offload");
    plan.act_offload = true;
    for (const std::string& name : mods)
      if (!apply_offload_module(name, plan.offload_modules))
        a.fail("--offload-modules", fmt::format("'{}' is not a Megatron offload module ({})", name, offload_module_list()));
  } else if (a.has("--offload-modules")) {
    rc.warnings.push_back("--offload-modules: has no effect without --fine-grained-activation-offloading");
  }
  if (a.has("--cpu-offloading")) {
    rc.warnings.push_back("--cpu-offloading: Transformer Engine's activation offload is not modelled for Megatron");
    rc.unmodelled_settings.push_back("--cpu-offloading");
  }
}

// Kernels, dropout, the optimizer and checkpoints.
void read_kernels(const Args& a, RunConfig& rc) {
  Plan& plan = rc.plan;
  plan.flash_attention = a.str("--attention-backend").value_or("auto") != "unfused";
  // --cuda-graph-impl (core_v0.14 on) names the implementation the older switches turned on.
  const std::string impl = a.choice("--cuda-graph-impl", {"none", "local", "transformer_engine"}).value_or("none");
  plan.cuda_graphs = impl != "none" || a.has("--enable-cuda-graph") || a.has("--external-cuda-graph");
  if (a.has("--cuda-graph-scope")) {
    std::string bad;
    const auto scope = parse_cuda_graph_scope(a.list("--cuda-graph-scope"), &bad);
    if (!scope)
      a.fail("--cuda-graph-scope",
             fmt::format("'{}' is not a scope meshplan's layers have ({})", bad, cuda_graph_scope_choices()));
    plan.cuda_graph_scope = *scope;
  }
  // Megatron's GPT defaults: hidden and attention dropout 0.1.
  const double attn_drop = a.number("--attention-dropout").value_or(0.1);
  const double hidden_drop = a.number("--hidden-dropout").value_or(0.1);
  plan.dropout = attn_drop > 0 || hidden_drop > 0;
  plan.fused_cross_entropy = a.has("--cross-entropy-loss-fusion");
  const std::string opt = a.choice("--optimizer", {"adam", "sgd"}).value_or("adam");
  plan.optimizer = opt == "sgd" ? Optimizer::sgd : Optimizer::adamw;  // Megatron's adam is AdamW
  if (auto s = a.integer("--save-interval", 1, limits::kMaxBatch, "steps")) rc.checkpoint_interval_steps = *s;
}

// Every flag given is modelled above, changes nothing meshplan computes, or is named here.
void name_unmodelled(const Args& a, RunConfig& rc) {
  for (const std::string& f : a.unread()) {
    if (no_effect_flags().count(f) != 0) continue;
    if (auto d = unread_flag_defaults().find(f); d != unread_flag_defaults().end() && a.str(f) == d->second) continue;
    rc.unmodelled_settings.push_back(f);
    rc.warnings.push_back(fmt::format("{}: accepted but not modelled; the step is simulated as if it were not given "
                                      "(docs/importers.md, \"Accepted but not modelled\")", f));
  }
  std::sort(rc.unmodelled_settings.begin(), rc.unmodelled_settings.end());
}

}  // namespace

std::vector<std::string> megatron_known_flags() {
  std::vector<std::string> out;
  for (const auto& [name, _] : known_flags()) out.push_back(name);
  return out;
}

std::vector<std::string> megatron_no_effect_flags() {
  return {no_effect_flags().begin(), no_effect_flags().end()};
}

bool looks_like_megatron_args(std::string_view text) {
  if (text.find("pretrain_gpt.py") != std::string_view::npos) return true;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  for (std::string_view flag : {"--num-layers", "--tensor-model-parallel-size", "--pipeline-model-parallel-size"})
    for (std::size_t at = text.find(flag); at != std::string_view::npos; at = text.find(flag, at + 1)) {
      const std::size_t end = at + flag.size();
      if ((at == 0 || space(text[at - 1])) && (end == text.size() || space(text[end]) || text[end] == '='))
        return true;
    }
  return false;
}

std::vector<std::string> megatron_words(const std::string& path, const std::string& text,
                                        std::vector<std::string>* launcher) {
  std::vector<std::string> out;
  for (const Word& w : command_words(path, text, launcher)) out.push_back(w.text);
  return out;
}

RunConfig import_megatron_args(const std::string& path, const std::string& text, const ImportOptions& opts) {
  RunConfig rc;
  rc.source_file = path;
  rc.format = ConfigFormat::megatron_args;
  std::vector<std::string> launcher;
  const Args a(path, command_words(path, text, &launcher), rc.warnings);

  read_launcher_gpus(path, launcher, rc);
  Plan& plan = rc.plan;
  plan.runtime = Runtime::megatron;
  plan.backward_prefetch = BackwardPrefetch::none;  // Megatron's DDP / distributed optimizer: no FSDP prefetch
  plan.limit_all_gathers = false;
  read_batch(a, rc);
  read_model(a, path, opts, rc);
  read_parallelism(a, rc);
  pad_vocab(a, rc);
  read_pipeline(a, rc);
  read_sharding(a, rc);
  read_precision(a, rc);
  read_recompute(a, rc);
  read_kernels(a, rc);
  name_unmodelled(a, rc);
  return rc;
}

}  // namespace meshplan

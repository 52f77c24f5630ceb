#include "spec/pipeline_split.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <tuple>

namespace meshplan {

std::optional<std::vector<int>> split_layers(int n_layers, int n_chunks) {
  if (n_chunks <= 0 || n_layers <= 0) return std::nullopt;
  if (n_layers % n_chunks == 0) return std::vector<int>(static_cast<std::size_t>(n_chunks), n_layers / n_chunks);
  if (n_chunks < 2 || (n_layers + 2) % n_chunks != 0) return std::nullopt;
  const int per = (n_layers + 2) / n_chunks;
  if (per < 2) return std::nullopt;
  std::vector<int> layers(static_cast<std::size_t>(n_chunks), per);
  layers.front() -= 1;
  layers.back() -= 1;
  return layers;
}

std::optional<std::vector<int>> torchtitan_stage_layers(int n_layers, int n_stages, int first_less, int last_less,
                                                        std::string* why) {
  auto refuse = [&](std::string reason) -> std::optional<std::vector<int>> {
    if (why != nullptr) *why = std::move(reason);
    return std::nullopt;
  };
  if (n_layers <= 0 || n_stages <= 0 || first_less < 0 || last_less < 0)
    return refuse("layers and stages must be positive and the weights not negative");
  if (n_stages == 1) return std::vector<int>{n_layers};
  const int weighted = n_layers + first_less + last_less;
  if (n_stages > weighted)
    return refuse(fmt::format("{} stages for {} weighted layers ({} + {} + {})", n_stages, weighted, n_layers,
                              first_less, last_less));
  const int per = weighted / n_stages;
  const int extra = weighted % n_stages;
  if (first_less > per || last_less > per)
    return refuse(fmt::format("a weight of {} is above the {} layers per stage", std::max(first_less, last_less), per));
  std::vector<int> layers(static_cast<std::size_t>(n_stages));
  int placed = 0;
  for (int s = 0; s < n_stages; ++s) {
    int share = per + (s < extra ? 1 : 0);
    if (s == 0) share -= first_less;
    if (s == n_stages - 1) share -= last_less;
    const int n = std::min(share, n_layers - placed);
    layers[static_cast<std::size_t>(s)] = n;
    placed += n;
  }
  return layers;
}

namespace {

std::optional<std::vector<int>> fail(SplitError* error, std::string field, std::string reason) {
  if (error != nullptr) *error = SplitError{std::move(field), std::move(reason)};
  return std::nullopt;
}

// Megatron's --decoder-first/last-pipeline-num-layers: per-rank counts, then each rank's chunks.
std::optional<std::vector<int>> split_first_last(int n_layers, int pp, int vpp, const PipelineSplit& r,
                                                 SplitError* error) {
  const bool first = r.first_stage_layers >= 0, last = r.last_stage_layers >= 0;
  if (pp < 2) {
    return fail(error, first ? "first_stage_layers" : "last_stage_layers",
                "fixing the first or last pipeline stage's layers needs pipeline parallelism (pp > 1)");
  }
  for (auto [given, field, n, which] : {std::tuple{first, "first_stage_layers", r.first_stage_layers, "first"},
                                        std::tuple{last, "last_stage_layers", r.last_stage_layers, "last"}}) {
    if (!given) continue;
    // Megatron: num_layers_in_{first,last}_pipeline_stage must be larger than 0.
    if (n == 0) return fail(error, field, fmt::format("0 layers leaves the {} pipeline stage empty", which));
    if (n > n_layers)
      return fail(error, field, fmt::format("{} layers on the {} stage, but the model has {}", n, which, n_layers));
    if (n % vpp != 0)
      return fail(error, field, fmt::format("{} layers on the {} stage do not divide into vpp {} chunks", n, which, vpp));
  }
  int rest = n_layers - (first ? r.first_stage_layers : 0) - (last ? r.last_stage_layers : 0);
  const int middle_ranks = pp - (first ? 1 : 0) - (last ? 1 : 0);
  if (rest < 0)
    return fail(error, first ? "first_stage_layers" : "last_stage_layers",
                fmt::format("the first and last stages take {} layers, more than the model's {}",
                            n_layers - rest, n_layers));
  if (middle_ranks == 0 && rest != 0)
    return fail(error, first ? "first_stage_layers" : "last_stage_layers",
                fmt::format("pp {}: the first and last stages are all the stages but take {} of {} layers", pp,
                            n_layers - rest, n_layers));
  int per_rank = 0;
  if (middle_ranks > 0) {
    if (rest % middle_ranks != 0)
      return fail(error, first ? "first_stage_layers" : "last_stage_layers",
                  fmt::format("the other {} layers do not divide evenly over the other {} stages", rest, middle_ranks));
    per_rank = rest / middle_ranks;
    if (per_rank == 0)
      return fail(error, first ? "first_stage_layers" : "last_stage_layers",
                  fmt::format("no layer is left for the other {} stages (a pipeline stage would be empty)", middle_ranks));
    if (per_rank % vpp != 0)
      return fail(error, "vpp", fmt::format("{} layers per middle stage do not divide into vpp {} chunks", per_rank, vpp));
  }
  std::vector<int> chunks(static_cast<std::size_t>(pp * vpp));
  for (int k = 0; k < vpp; ++k)
    for (int rank = 0; rank < pp; ++rank) {
      int n = per_rank;
      if (rank == 0 && first) n = r.first_stage_layers;
      if (rank == pp - 1 && last) n = r.last_stage_layers;
      chunks[static_cast<std::size_t>(k * pp + rank)] = n / vpp;
    }
  return chunks;
}

}  // namespace

std::optional<std::vector<int>> split_pipeline(int n_layers, int pp, int vpp, const PipelineSplit& rule,
                                               SplitError* error) {
  if (pp <= 0 || vpp <= 0 || n_layers <= 0) return fail(error, "pp", "degrees and layers must be positive");
  const int n_chunks = pp * vpp;
  if (!rule.given()) {
    if (auto s = split_layers(n_layers, n_chunks)) return s;
    return fail(error, pp > 1 ? "pp" : "vpp",
                fmt::format("{} layers are not divisible by pp x vpp = {} x {} (nor are {} counting the embedding "
                            "and head as one layer each, torchtitan's uneven split)",
                            n_layers, pp, vpp, n_layers + 2));
  }
  const bool first_last = rule.first_stage_layers >= 0 || rule.last_stage_layers >= 0;
  if (!rule.chunk_layers.empty()) {
    // Megatron asserts the layout excludes the other split options.
    if (first_last || rule.embedding_as_layer || rule.loss_as_layer)
      return fail(error, "layout", "cannot be combined with the first/last stage layer counts or with counting the "
                                   "embedding or loss as layers (Megatron raises)");
    if (static_cast<int>(rule.chunk_layers.size()) != n_chunks)
      return fail(error, "layout", fmt::format("{} stages in the layout, but pp x vpp = {} x {} = {}",
                                               rule.chunk_layers.size(), pp, vpp, n_chunks));
    long total = 0;
    for (int n : rule.chunk_layers) {
      if (n < 0) return fail(error, "layout", "a stage with a negative layer count");
      total += n;
    }
    if (total != n_layers)
      return fail(error, "layout", fmt::format("the layout places {} decoder layers, but the model has {}", total, n_layers));
    for (int c = 1; c + 1 < n_chunks; ++c)
      if (rule.chunk_layers[static_cast<std::size_t>(c)] == 0 && rule.mtp_chunk != c)
        return fail(error, "layout", fmt::format("the layout leaves pipeline stage {} (chunk {}) without a layer",
                                                 c % pp, c / pp));
    return rule.chunk_layers;
  }
  if (first_last && (rule.embedding_as_layer || rule.loss_as_layer))
    return fail(error, rule.embedding_as_layer ? "embedding_as_layer" : "loss_as_layer",
                "cannot be combined with a fixed first/last stage layer count (Megatron raises)");
  std::vector<int> chunks;
  if (first_last) {
    auto s = split_first_last(n_layers, pp, vpp, rule, error);
    if (!s) return s;
    chunks = std::move(*s);
  } else {
    const int counted = n_layers + (rule.embedding_as_layer ? 1 : 0) + (rule.loss_as_layer ? 1 : 0);
    const std::string what = rule.embedding_as_layer && rule.loss_as_layer ? "embedding and loss"
                             : rule.embedding_as_layer                      ? "embedding"
                                                                            : "loss";
    if (counted % n_chunks != 0)
      return fail(error, rule.embedding_as_layer ? "embedding_as_layer" : "loss_as_layer",
                  fmt::format("{} layers with the {} counted as layers ({}) are not divisible by pp x vpp = {} x {}",
                              n_layers, what, counted, pp, vpp));
    chunks.assign(static_cast<std::size_t>(n_chunks), counted / n_chunks);
    if (rule.embedding_as_layer) chunks.front() -= 1;
    if (rule.loss_as_layer) chunks.back() -= 1;
  }
  // A chunk may hold only the embedding or only the loss; one with nothing is a stage with no work.
  for (int c = 0; c < n_chunks; ++c) {
    const bool holds_embedding = c == 0, holds_loss = c == n_chunks - 1;
    if (chunks[static_cast<std::size_t>(c)] > 0 || holds_embedding || holds_loss) continue;
    return fail(error, first_last ? (rule.first_stage_layers >= 0 ? "first_stage_layers" : "last_stage_layers")
                                  : (rule.embedding_as_layer ? "embedding_as_layer" : "loss_as_layer"),
                fmt::format("the split leaves pipeline stage {} (chunk {}) without a layer", c % pp, c / pp));
  }
  return chunks;
}

std::optional<PipelineSplit> megatron_split_for(int n_layers, int pp, int vpp, int mtp_layers, std::string* how) {
  const int chunks = pp * vpp;
  PipelineSplit s;
  if (n_layers <= 0 || chunks <= 0) return std::nullopt;
  if (chunks == 1 || n_layers % chunks == 0) {
    if (how != nullptr) *how = "an even split";
    return s;
  }
  if ((n_layers + 2) % chunks == 0) {
    s.embedding_as_layer = s.loss_as_layer = true;
    if (split_pipeline(n_layers, pp, vpp, s)) {
      if (how != nullptr)
        *how = "embedding and loss counted as layers (Megatron's --account-for-embedding/loss-in-pipeline-split, "
               "the only split that runs it)";
      return s;
    }
    s = {};
  }
  const auto l = ceil_split_layout(n_layers, chunks, mtp_layers);
  if (!l) return std::nullopt;
  set_layout(s, *l);
  if (!split_pipeline(n_layers, pp, vpp, s)) return std::nullopt;
  if (how != nullptr)
    *how = fmt::format("Megatron-Bridge's layout rule, ceil(L / stages) layers per stage and the remainder last{}: "
                       "--pipeline-model-parallel-layout \"{}\"",
                       l->chunk_layers.back() == 0 ? " (here the loss alone last and the remainder first)" : "",
                       format_pipeline_layout(*l));
  return s;
}

int mtp_chunk_of(const PipelineSplit& rule, int n_chunks, int n_mtp_layers) {
  if (n_mtp_layers <= 0 || n_chunks <= 0) return -1;
  if (!rule.chunk_layers.empty() && rule.mtp_chunk >= 0 && rule.mtp_chunk < n_chunks) return rule.mtp_chunk;
  return n_chunks - 1;
}

PipelineLayout layout_of(const PipelineSplit& s) { return {s.chunk_layers, s.mtp_chunk, s.mtp_layers}; }

void set_layout(PipelineSplit& s, const PipelineLayout& l) {
  s.chunk_layers = l.chunk_layers;
  s.mtp_chunk = l.mtp_chunk;
  s.mtp_layers = l.mtp_layers;
}

std::vector<std::vector<LayerRange>> chunks_of_ranks(const std::vector<int>& chunk_layers, int pp) {
  std::vector<std::vector<LayerRange>> out(static_cast<std::size_t>(std::max(1, pp)));
  int first = 0;
  for (std::size_t c = 0; c < chunk_layers.size(); ++c) {
    out[c % out.size()].push_back({first, chunk_layers[c]});
    first += chunk_layers[c];
  }
  return out;
}

}  // namespace meshplan

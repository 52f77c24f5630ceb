#include "sim/max_min_share.hpp"

#include <algorithm>
#include <limits>

namespace meshplan::sim {

void max_min_share(const std::vector<Link>& links, const std::vector<FlowDemand>& flows,
                   std::vector<double>& rates) {
  const std::size_t nf = flows.size();
  rates.assign(nf, 0.0);
  if (nf == 0) return;
  std::vector<double> capacity(links.size());
  std::vector<int> unfrozen_on_link(links.size(), 0);
  for (std::size_t l = 0; l < links.size(); ++l) capacity[l] = links[l].bandwidth_bytes_per_s;
  for (const auto& f : flows)
    for (LinkId l : *f.links) ++unfrozen_on_link[static_cast<std::size_t>(l)];
  std::vector<bool> frozen(nf, false);
  std::size_t remaining = nf;
  constexpr double inf = std::numeric_limits<double>::infinity();
  while (remaining > 0) {
    // The tightest constraint: the smallest fair share on any link, or a flow's own cap.
    double level = inf;
    for (std::size_t l = 0; l < links.size(); ++l)
      if (unfrozen_on_link[l] > 0) level = std::min(level, capacity[l] / unfrozen_on_link[l]);
    for (std::size_t i = 0; i < nf; ++i)
      if (!frozen[i]) level = std::min(level, flows[i].cap_bytes_per_s);
    if (level == inf) {  // flows crossing no link and uncapped: nothing limits them
      for (std::size_t i = 0; i < nf; ++i)
        if (!frozen[i]) rates[i] = inf;
      return;
    }
    level = std::max(level, 0.0);
    // Freeze every flow that this level saturates: capped ones, and all flows on a tight link.
    std::vector<bool> tight(links.size(), false);
    for (std::size_t l = 0; l < links.size(); ++l)
      tight[l] = unfrozen_on_link[l] > 0 && capacity[l] / unfrozen_on_link[l] <= level * (1 + 1e-12);
    for (std::size_t i = 0; i < nf; ++i) {
      if (frozen[i]) continue;
      bool freeze = flows[i].cap_bytes_per_s <= level * (1 + 1e-12);
      for (LinkId l : *flows[i].links) freeze = freeze || tight[static_cast<std::size_t>(l)];
      if (!freeze) continue;
      frozen[i] = true;
      --remaining;
      rates[i] = level;
      for (LinkId l : *flows[i].links) {
        capacity[static_cast<std::size_t>(l)] -= level;
        --unfrozen_on_link[static_cast<std::size_t>(l)];
      }
    }
  }
}

}  // namespace meshplan::sim

#include "sim/max_min_share.hpp"

#include <algorithm>
#include <limits>

namespace meshplan::sim {

void max_min_share(const std::vector<Link>& links, const std::vector<FlowDemand>& flows,
                   std::vector<double>& rates) {
  const std::size_t nf = flows.size();
  rates.assign(nf, 0.0);
  if (nf == 0) return;
  // Work only on the links these flows cross (a few among possibly thousands).
  std::vector<LinkId> used;
  for (const auto& f : flows) used.insert(used.end(), f.links->begin(), f.links->end());
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  auto local = [&](LinkId l) {
    return static_cast<std::size_t>(std::lower_bound(used.begin(), used.end(), l) - used.begin());
  };
  std::vector<double> capacity(used.size());
  std::vector<int> unfrozen_on_link(used.size(), 0);
  for (std::size_t i = 0; i < used.size(); ++i)
    capacity[i] = links[static_cast<std::size_t>(used[i])].bandwidth_bytes_per_s;
  std::vector<std::vector<std::size_t>> flow_links(nf);
  for (std::size_t i = 0; i < nf; ++i)
    for (LinkId l : *flows[i].links) {
      flow_links[i].push_back(local(l));
      ++unfrozen_on_link[flow_links[i].back()];
    }
  std::vector<bool> frozen(nf, false);
  std::vector<bool> tight(used.size(), false);
  std::size_t remaining = nf;
  constexpr double inf = std::numeric_limits<double>::infinity();
  while (remaining > 0) {
    // The tightest constraint: the smallest fair share on any link, or a flow's own cap.
    double level = inf;
    for (std::size_t l = 0; l < used.size(); ++l)
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
    for (std::size_t l = 0; l < used.size(); ++l)
      tight[l] = unfrozen_on_link[l] > 0 && capacity[l] / unfrozen_on_link[l] <= level * (1 + 1e-12);
    for (std::size_t i = 0; i < nf; ++i) {
      if (frozen[i]) continue;
      bool freeze = flows[i].cap_bytes_per_s <= level * (1 + 1e-12);
      for (std::size_t l : flow_links[i]) freeze = freeze || tight[l];
      if (!freeze) continue;
      frozen[i] = true;
      --remaining;
      rates[i] = level;
      for (std::size_t l : flow_links[i]) {
        capacity[l] -= level;
        --unfrozen_on_link[l];
      }
    }
  }
}

}  // namespace meshplan::sim

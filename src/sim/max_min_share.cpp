#include "sim/max_min_share.hpp"

#include <algorithm>
#include <limits>

namespace meshplan::sim {

void max_min_share(const std::vector<Link>& links, const std::vector<FlowDemand>& flows,
                   std::vector<double>& rates) {
  MaxMinShare solver;
  for (const auto& f : flows) solver.add_flow(*f.links, f.cap_bytes_per_s);
  solver.solve(links, rates);
}

double lone_flow_rate(const Link* link, double cap_bytes_per_s) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  double level = inf;
  if (link != nullptr) level = std::min(level, link->bandwidth_bytes_per_s / 1);
  level = std::min(level, cap_bytes_per_s);
  return level == inf ? inf : std::max(level, 0.0);
}

void MaxMinShare::add_flow(std::span<const LinkId> links, double cap_bytes_per_s) {
  flow_links_.push_back(links);
  caps_.push_back(cap_bytes_per_s);
}

void MaxMinShare::solve(const std::vector<Link>& links, std::vector<double>& rates) {
  const std::size_t nf = flow_links_.size();
  rates.assign(nf, 0.0);
  if (nf == 0) return;
  if (nf == 1 && flow_links_[0].size() <= 1) {
    rates[0] = lone_flow_rate(flow_links_[0].empty() ? nullptr : &links[static_cast<std::size_t>(flow_links_[0][0])],
                              caps_[0]);
  } else {
    index_links(links);
    fill(rates);
  }
  flow_links_.clear();
  caps_.clear();
}

// Work only on the links these flows cross (a few among possibly thousands): number them
// 0 .. used_.size(), take their capacities, and rewrite each flow's links in those numbers.
void MaxMinShare::index_links(const std::vector<Link>& links) {
  used_.clear();
  for (const auto& fl : flow_links_) used_.insert(used_.end(), fl.begin(), fl.end());
  std::sort(used_.begin(), used_.end());
  used_.erase(std::unique(used_.begin(), used_.end()), used_.end());
  if (local_of_.size() < links.size()) local_of_.resize(links.size(), -1);
  const std::size_t nl = used_.size();
  capacity_.resize(nl);
  unfrozen_on_link_.assign(nl, 0);
  for (std::size_t i = 0; i < nl; ++i) {
    local_of_[static_cast<std::size_t>(used_[i])] = static_cast<std::int32_t>(i);
    capacity_[i] = links[static_cast<std::size_t>(used_[i])].bandwidth_bytes_per_s;
  }
  local_links_.clear();
  local_begin_.clear();
  for (const auto& fl : flow_links_) {
    local_begin_.push_back(static_cast<std::uint32_t>(local_links_.size()));
    for (LinkId l : fl) {
      const auto li = static_cast<std::uint32_t>(local_of_[static_cast<std::size_t>(l)]);
      local_links_.push_back(li);
      ++unfrozen_on_link_[li];
    }
  }
  local_begin_.push_back(static_cast<std::uint32_t>(local_links_.size()));
  for (LinkId l : used_) local_of_[static_cast<std::size_t>(l)] = -1;
}

std::span<const std::uint32_t> MaxMinShare::flow_local(std::size_t i) const {
  const std::uint32_t* base = local_links_.data();
  return {base + local_begin_[i], base + local_begin_[i + 1]};
}

// Progressive filling: raise every unfrozen flow's rate to the tightest level left, freeze the
// flows that level saturates, take their rate off their links, repeat until all are frozen.
void MaxMinShare::fill(std::vector<double>& rates) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  const std::size_t nf = flow_links_.size(), nl = used_.size();
  frozen_.assign(nf, 0);
  tight_.assign(nl, 0);
  std::size_t remaining = nf;
  while (remaining > 0) {
    // The tightest constraint: the smallest fair share on any link, or a flow's own cap.
    double level = inf;
    for (std::size_t l = 0; l < nl; ++l)
      if (unfrozen_on_link_[l] > 0) level = std::min(level, capacity_[l] / unfrozen_on_link_[l]);
    for (std::size_t i = 0; i < nf; ++i)
      if (!frozen_[i]) level = std::min(level, caps_[i]);
    if (level == inf) {  // flows crossing no link and uncapped: nothing limits them
      for (std::size_t i = 0; i < nf; ++i)
        if (!frozen_[i]) rates[i] = inf;
      break;
    }
    level = std::max(level, 0.0);
    // Freeze every flow that this level saturates: capped ones, and all flows on a tight link.
    for (std::size_t l = 0; l < nl; ++l)
      tight_[l] = unfrozen_on_link_[l] > 0 && capacity_[l] / unfrozen_on_link_[l] <= level * (1 + 1e-12);
    for (std::size_t i = 0; i < nf; ++i) {
      if (frozen_[i]) continue;
      bool freeze = caps_[i] <= level * (1 + 1e-12);
      for (std::uint32_t l : flow_local(i)) freeze = freeze || tight_[l];
      if (!freeze) continue;
      frozen_[i] = 1;
      --remaining;
      rates[i] = level;
      for (std::uint32_t l : flow_local(i)) {
        capacity_[l] -= level;
        --unfrozen_on_link_[l];
      }
    }
  }
}

}  // namespace meshplan::sim

#pragma once
// Max-min fair sharing of link bandwidth among flows (progressive filling): every flow gets the
// largest rate such that no link is oversubscribed and no flow could go faster without slowing
// a flow that already has less. A flow's own cap (e.g. what its NCCL algorithm can reach) acts
// as a private link.
#include <cstdint>
#include <span>
#include <vector>

#include "sim/engine.hpp"

namespace meshplan::sim {

struct FlowDemand {
  const std::vector<LinkId>* links = nullptr;
  double cap_bytes_per_s = 0;
};

// rates[i] receives flow i's share in bytes/s.
void max_min_share(const std::vector<Link>& links, const std::vector<FlowDemand>& flows,
                   std::vector<double>& rates);

// The share of one flow alone on at most one link (nullptr: none), capped at its own cap: the
// first round of the progressive filling, which always freezes it, with the same operations in
// the same order. The common event, which the engine answers without the solver's arrays.
double lone_flow_rate(const Link* link, double cap_bytes_per_s);

// The same solver with its working arrays kept between problems: the engine solves one at
// almost every event, and allocating them each time cost more than the solve itself.
class MaxMinShare {
public:
  // Flows of the next problem, in order; `links` must stay valid until solve().
  void add_flow(std::span<const LinkId> links, double cap_bytes_per_s);
  // rates[i] receives the share of the i-th added flow; the flows are then cleared.
  void solve(const std::vector<Link>& links, std::vector<double>& rates);

private:
  void index_links(const std::vector<Link>& links);
  std::span<const std::uint32_t> flow_local(std::size_t i) const;  // flow i's links, as indices in used_
  void fill(std::vector<double>& rates);

  std::vector<std::span<const LinkId>> flow_links_;
  std::vector<double> caps_;
  std::vector<LinkId> used_;                  // links the flows cross, ascending
  std::vector<std::int32_t> local_of_;        // global link -> index in used_ (-1: unused)
  std::vector<double> capacity_;
  std::vector<int> unfrozen_on_link_;
  std::vector<std::uint32_t> local_links_;    // every flow's links as indices in used_, flow after flow
  std::vector<std::uint32_t> local_begin_;    // flow i's are [local_begin_[i], local_begin_[i + 1])
  std::vector<char> frozen_, tight_;
};

}  // namespace meshplan::sim

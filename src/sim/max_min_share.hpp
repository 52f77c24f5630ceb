#pragma once
// Max-min fair sharing of link bandwidth among flows (progressive filling): every flow gets the
// largest rate such that no link is oversubscribed and no flow could go faster without slowing
// a flow that already has less. A flow's own cap (e.g. what its NCCL algorithm can reach) acts
// as a private link.
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

}  // namespace meshplan::sim

#pragma once
// The cluster's graph (spec/topology.hpp): GPUs, switches and NICs as vertices, links as edges with
// their bandwidth and latency. Apart from topology.hpp so that only the files that build, walk or
// print it parse Boost.Graph.
#include <boost/graph/adjacency_list.hpp>
#include <type_traits>

#include "spec/topology.hpp"

namespace meshplan {

struct TopoGraph {
  using Adjacency = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, TopoVertex, TopoEdge>;
  Adjacency adjacency;
};
static_assert(std::is_same_v<TopoGraph::Adjacency::vertex_descriptor, TopoVertexId>);

}  // namespace meshplan

#pragma once
// One self-contained HTML page (inline CSS, SVG and a few lines of JS; nothing fetched) for a
// what-if report: the side-by-side table, the explanations, and three charts: stacked step-time
// breakdown per variant, stacked peak-memory breakdown against the GPU's capacity, and tokens/s
// vs peak memory with the Pareto front.
#include <cstddef>
#include <string>
#include <vector>

#include "report/whatif.hpp"

namespace meshplan {

std::string whatif_html(const WhatIfReport& r);

// Indices (into r.variants) of the evaluated variants no other variant beats on both tokens/s
// (higher) and peak memory (lower), ordered by peak memory.
std::vector<std::size_t> pareto_front(const WhatIfReport& r);

}  // namespace meshplan

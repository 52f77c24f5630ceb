// Self-contained HTML what-if report (html_report.hpp). The charts are drawn here as SVG so the
// page needs no script to show them; the script only checks them and reports on the page.
#include "report/html_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "report/memory_report.hpp"
#include "spec/units.hpp"

namespace meshplan {

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char ch : s) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}

// Colour-blind-safe palette (Okabe-Ito), then greys.
const char* colour(std::size_t i) {
  static const char* kColours[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9",
                                   "#D55E00", "#F0E442", "#999999", "#555555"};
  return kColours[i % (sizeof(kColours) / sizeof(kColours[0]))];
}

// A "nice" axis maximum (1, 2, 2.5 or 5 x 10^k) at or above v.
double nice_max(double v) {
  if (v <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= v) return m * p;
  return 10 * p;
}

std::string label(const WhatIfReport& r, std::size_t i) {
  // The values only: the table above names the keys, and long labels would not fit.
  std::string s = fmt::format("#{}", i + 1);
  for (std::size_t k = 0; k < r.variants[i].settings.size(); ++k)
    s += (k == 0 ? " " : ", ") + r.variants[i].settings[k].second;
  return s;
}

struct Part {
  std::string name;
  double value = 0;
};

// The stacked charts' geometry (pixels).
struct BarLayout {
  double label_w = 200, plot_w = 560, bar_h = 22, gap = 10, top = 30, legend_row_h = 20;
  // A legend entry's width: its swatch and its text.
  static double legend_w(const std::string& n) { return 26 + 7.6 * static_cast<double>(n.size()); }
  // Rows the legend takes: entries wrap to the plot's width.
  int legend_rows(const std::vector<std::string>& part_names) const {
    int rows = 1;
    double x = 0;
    for (const auto& n : part_names) {
      if (x + legend_w(n) > plot_w && x > 0) {
        ++rows;
        x = 0;
      }
      x += legend_w(n);
    }
    return rows;
  }
};

// One bar per variant, its parts in order, each part coloured by its place in `part_names`.
std::string stacked_bars(const WhatIfReport& r, const BarLayout& g, const std::string& unit,
                         const std::vector<std::string>& part_names, const std::vector<std::vector<Part>>& bars,
                         const std::vector<std::size_t>& which, double sx) {
  std::string o;
  for (std::size_t row = 0; row < which.size(); ++row) {
    const std::size_t i = which[row];
    const double y = g.top + row * (g.bar_h + g.gap);
    o += fmt::format("<g class=\"bar\" data-variant=\"{}\"><text class=\"label\" x=\"{:.0f}\" y=\"{:.1f}\">{}</text>",
                     i + 1, g.label_w - 8, y + g.bar_h * 0.7, esc(label(r, i)));
    double x = g.label_w;
    double total = 0;
    for (std::size_t k = 0; k < bars[row].size(); ++k) {
      const Part& p = bars[row][k];
      total += p.value;
      if (p.value <= 0) continue;
      const std::size_t ci =
          static_cast<std::size_t>(std::find(part_names.begin(), part_names.end(), p.name) - part_names.begin());
      o += fmt::format("<rect class=\"seg\" data-part=\"{}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.0f}\" "
                       "fill=\"{}\"><title>{}: {:.3f} {}</title></rect>",
                       esc(p.name), x, y, p.value * sx, g.bar_h, colour(ci), esc(p.name), p.value, esc(unit));
      x += p.value * sx;
    }
    o += fmt::format("<text class=\"value\" x=\"{:.1f}\" y=\"{:.1f}\">{:.2f}</text></g>\n", x + 4, y + g.bar_h * 0.7,
                     total);
  }
  return o;
}

std::string stacked_legend(const BarLayout& g, const std::vector<std::string>& part_names, double h, int legend_rows) {
  std::string o;
  double lx = g.label_w;
  double ly = h - legend_rows * g.legend_row_h;
  for (std::size_t k = 0; k < part_names.size(); ++k) {
    if (lx + BarLayout::legend_w(part_names[k]) > g.label_w + g.plot_w && lx > g.label_w) {
      lx = g.label_w;
      ly += g.legend_row_h;
    }
    o += fmt::format("<g class=\"legend\"><rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"12\" height=\"12\" fill=\"{}\"/>"
                     "<text x=\"{:.0f}\" y=\"{:.0f}\">{}</text></g>",
                     lx, ly, colour(k), lx + 16, ly + 10, esc(part_names[k]));
    lx += BarLayout::legend_w(part_names[k]);
  }
  return o;
}

// Horizontal stacked bars, one per evaluated variant; `limit` > 0 draws a dashed capacity line.
std::string stacked_chart(const WhatIfReport& r, const std::string& id, const std::string& unit,
                          const std::vector<std::string>& part_names,
                          const std::vector<std::vector<Part>>& bars, const std::vector<std::size_t>& which,
                          double limit, const std::string& limit_label) {
  const BarLayout g;
  const int legend_rows = g.legend_rows(part_names);
  const double h = g.top + which.size() * (g.bar_h + g.gap) + 46 + legend_rows * g.legend_row_h;
  double vmax = limit;
  for (const auto& b : bars) {
    double s = 0;
    for (const auto& p : b) s += p.value;
    vmax = std::max(vmax, s);
  }
  const double axis = nice_max(vmax * 1.02);
  const double sx = g.plot_w / axis;
  const double bottom = g.top + which.size() * (g.bar_h + g.gap);
  std::string o = fmt::format(
      "<svg id=\"{}\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "role=\"img\">\n",
      id, g.label_w + g.plot_w + 40, h);
  for (int t = 0; t <= 5; ++t) {
    const double x = g.label_w + t * g.plot_w / 5;
    o += fmt::format("<line class=\"grid\" x1=\"{:.1f}\" y1=\"{:.0f}\" x2=\"{:.1f}\" y2=\"{:.0f}\"/>"
                     "<text class=\"tick\" x=\"{:.1f}\" y=\"{:.0f}\">{:g}</text>\n",
                     x, g.top - 6, x, bottom, x, bottom + 14, axis * t / 5);
  }
  o += fmt::format("<text class=\"axis\" x=\"{:.0f}\" y=\"{:.0f}\">{}</text>\n", g.label_w + g.plot_w / 2,
                   bottom + 30, esc(unit));
  o += stacked_bars(r, g, unit, part_names, bars, which, sx);
  if (limit > 0) {
    const double lx = g.label_w + limit * sx;
    o += fmt::format("<line class=\"limit\" x1=\"{:.1f}\" y1=\"{:.0f}\" x2=\"{:.1f}\" y2=\"{:.0f}\"/>"
                     "<text class=\"limit-label\" x=\"{:.1f}\" y=\"{:.0f}\">{}</text>\n",
                     lx, g.top - 10, lx, bottom, lx, g.top - 14, esc(limit_label));
  }
  o += stacked_legend(g, part_names, h, legend_rows);
  o += "\n</svg>\n";
  return o;
}

// The scatter's geometry: memory on x, throughput on y, both axes rounded up to nice values.
struct ScatterAxes {
  double left = 70, plot_w = 600, plot_h = 320, top = 20;
  double xmax = 0, ymax = 0, cap = 0;
  double px(double gib) const { return left + gib / xmax * plot_w; }
  double py(double tps) const { return top + plot_h - tps / ymax * plot_h; }
};

// Each point with its label beside it, on the first side where the label overlaps no label or
// point already placed (points that coincide share one label position in turn).
std::string scatter_points(const WhatIfReport& r, const ScatterAxes& a, const std::vector<std::size_t>& which,
                           const std::vector<std::size_t>& front) {
  struct Box {
    double x0, y0, x1, y1;
  };
  std::vector<Box> taken;
  for (std::size_t i : which)
    taken.push_back({a.px(r.variants[i].peak_bytes / kGiB) - 6, a.py(r.variants[i].result.tokens_per_s_per_gpu) - 6,
                     a.px(r.variants[i].peak_bytes / kGiB) + 6, a.py(r.variants[i].result.tokens_per_s_per_gpu) + 6});
  auto overlaps = [&](const Box& b) {
    return std::any_of(taken.begin(), taken.end(),
                       [&](const Box& t) { return b.x0 < t.x1 && t.x0 < b.x1 && b.y0 < t.y1 && t.y0 < b.y1; });
  };
  std::string o;
  for (std::size_t i : which) {
    const Variant& v = r.variants[i];
    const bool on_front = std::find(front.begin(), front.end(), i) != front.end();
    const double x = a.px(v.peak_bytes / kGiB), y = a.py(v.result.tokens_per_s_per_gpu);
    const double label_w = 7.0 * static_cast<double>(fmt::format("#{}", i + 1).size()), label_h = 11;
    // (dx, dy) of the text's baseline start: right-above, right-below, left-above, left-below,
    // then further out above and below.
    const std::array<std::pair<double, double>, 6> sides{
        {{8, -6}, {8, 16}, {-8 - label_w, -6}, {-8 - label_w, 16}, {8, -20}, {8, 30}}};
    double lx = x + sides[0].first, ly = y + sides[0].second;
    for (const auto& [dx, dy] : sides) {
      const Box b{x + dx, y + dy - label_h, x + dx + label_w, y + dy};
      if (!overlaps(b)) {
        lx = x + dx;
        ly = y + dy;
        break;
      }
    }
    taken.push_back({lx, ly - label_h, lx + label_w, ly});
    o += fmt::format("<g class=\"point{}\" data-variant=\"{}\"><circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"6\" fill=\"{}\">"
                     "<title>{}: {:.1f} tokens/s/GPU, {:.2f} GiB{}</title></circle>"
                     "<text class=\"plabel\" x=\"{:.1f}\" y=\"{:.1f}\">#{}</text></g>\n",
                     on_front ? " front" : "", i + 1, x, y, v.fits ? (on_front ? "#D55E00" : "#0072B2") : "#999999",
                     esc(label(r, i)), v.result.tokens_per_s_per_gpu, v.peak_bytes / kGiB,
                     v.fits ? "" : " (does not fit)", lx, ly, i + 1);
  }
  return o;
}

std::string scatter_chart(const WhatIfReport& r, const std::vector<std::size_t>& which,
                          const std::vector<std::size_t>& front) {
  ScatterAxes a;
  for (std::size_t i : which) {
    a.xmax = std::max(a.xmax, r.variants[i].peak_bytes / kGiB);
    a.ymax = std::max(a.ymax, r.variants[i].result.tokens_per_s_per_gpu);
    a.cap = std::max(a.cap, r.variants[i].gpu_memory_bytes / kGiB);
  }
  a.xmax = nice_max(std::max(a.xmax, a.cap) * 1.02);
  a.ymax = nice_max(a.ymax * 1.05);
  const double left = a.left, plot_w = a.plot_w, plot_h = a.plot_h, top = a.top;
  std::string o = fmt::format(
      "<svg id=\"chart-scatter\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" "
      "height=\"{:.0f}\" role=\"img\">\n",
      left + plot_w + 40, top + plot_h + 50);
  for (int t = 0; t <= 5; ++t) {
    o += fmt::format("<line class=\"grid\" x1=\"{0:.1f}\" y1=\"{1:.0f}\" x2=\"{0:.1f}\" y2=\"{2:.0f}\"/>"
                     "<text class=\"tick\" x=\"{0:.1f}\" y=\"{3:.0f}\">{4:g}</text>\n",
                     left + t * plot_w / 5, top, top + plot_h, top + plot_h + 14, a.xmax * t / 5);
    o += fmt::format("<line class=\"grid\" x1=\"{0:.0f}\" y1=\"{1:.1f}\" x2=\"{2:.0f}\" y2=\"{1:.1f}\"/>"
                     "<text class=\"tick ytick\" x=\"{3:.0f}\" y=\"{4:.1f}\">{5:g}</text>\n",
                     left, top + plot_h - t * plot_h / 5, left + plot_w, left - 6, top + plot_h - t * plot_h / 5 + 4,
                     a.ymax * t / 5);
  }
  o += fmt::format("<text class=\"axis\" x=\"{:.0f}\" y=\"{:.0f}\">peak memory per GPU (GiB)</text>\n",
                   left + plot_w / 2, top + plot_h + 34);
  o += fmt::format("<text class=\"axis\" transform=\"translate(16 {:.0f}) rotate(-90)\">tokens/s per GPU</text>\n",
                   top + plot_h / 2);
  if (a.cap > 0)
    o += fmt::format("<line class=\"limit\" x1=\"{0:.1f}\" y1=\"{1:.0f}\" x2=\"{0:.1f}\" y2=\"{2:.0f}\"/>"
                     "<text class=\"limit-label\" x=\"{0:.1f}\" y=\"{3:.0f}\">GPU memory {4:.1f} GiB</text>\n",
                     a.px(a.cap), top, top + plot_h, top + 12, a.cap);
  if (!front.empty()) {
    std::string pts;
    for (std::size_t i : front)
      pts += fmt::format("{:.1f},{:.1f} ", a.px(r.variants[i].peak_bytes / kGiB), a.py(r.variants[i].result.tokens_per_s_per_gpu));
    o += fmt::format("<polyline class=\"pareto\" points=\"{}\"/>\n", pts);
  }
  o += scatter_points(r, a, which, front);
  o += "</svg>\n";
  return o;
}

const char* kStyle = R"(body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}tr.setting td{background:#f3f6fa;font-weight:600}
.chart text{font-size:12px;fill:#222}.chart .label{text-anchor:end}.chart .tick{text-anchor:middle;fill:#666;font-size:11px}
.chart .ytick{text-anchor:end}.chart .axis{text-anchor:middle;fill:#444}.chart .grid{stroke:#e4e4e4}
.chart .limit{stroke:#c00;stroke-width:2;stroke-dasharray:6 4}.chart .limit-label{fill:#c00;text-anchor:middle;font-size:11px}
.chart .pareto{fill:none;stroke:#D55E00;stroke-width:2}.chart .bar:hover rect{opacity:.75}
.chart .point circle{stroke:#fff;stroke-width:1.5}.chart .plabel{font-size:11px}
ul.why li{margin:4px 0;font-size:13px}#status{color:#666;font-size:12px}.err{color:#c00}
)";

// Counts what the SVGs drew and says so on the page (the headless-browser test reads it).
const char* kScript = R"(window.addEventListener('error',function(e){var s=document.getElementById('status');
if(s){s.className='err';s.textContent='script error: '+e.message;}});
document.addEventListener('DOMContentLoaded',function(){
var n=function(q){return document.querySelectorAll(q).length;};
var s=document.getElementById('status');
var t=n('#chart-time g.bar'),m=n('#chart-memory g.bar'),p=n('#chart-scatter g.point'),f=n('#chart-scatter g.point.front');
s.dataset.timeBars=t;s.dataset.memoryBars=m;s.dataset.points=p;s.dataset.front=f;
s.textContent='charts ok: '+t+' time bars, '+m+' memory bars, '+p+' points, '+f+' on the Pareto front';});
)";

}  // namespace

std::vector<std::size_t> pareto_front(const WhatIfReport& r) {
  // A plan that does not fit is not a trade-off anyone can choose: it is drawn, grey, but never
  // on the front (and never dominates a plan that fits).
  std::vector<std::size_t> ok;
  for (std::size_t i = 0; i < r.variants.size(); ++i)
    if (r.variants[i].ok() && r.variants[i].fits) ok.push_back(i);
  std::vector<std::size_t> front;
  for (std::size_t i : ok) {
    const Variant& a = r.variants[i];
    bool dominated = false;
    for (std::size_t j : ok) {
      const Variant& b = r.variants[j];
      const bool no_worse = b.result.tokens_per_s_per_gpu >= a.result.tokens_per_s_per_gpu && b.peak_bytes <= a.peak_bytes;
      const bool better = b.result.tokens_per_s_per_gpu > a.result.tokens_per_s_per_gpu || b.peak_bytes < a.peak_bytes;
      if (j != i && no_worse && better) dominated = true;
    }
    if (!dominated) front.push_back(i);
  }
  std::sort(front.begin(), front.end(), [&](std::size_t a, std::size_t b) {
    return r.variants[a].peak_bytes != r.variants[b].peak_bytes ? r.variants[a].peak_bytes < r.variants[b].peak_bytes : a < b;
  });
  return front;
}

namespace {

// The step-time breakdown of each evaluated variant, in report order.
std::vector<std::vector<Part>> time_bars(const WhatIfReport& r, const std::vector<std::size_t>& ok,
                                         const std::vector<std::string>& time_parts) {
  std::vector<std::vector<Part>> bars;
  for (std::size_t i : ok) {
    std::vector<Part> b;
    for (const auto& k : time_parts) {
      const auto& m = r.variants[i].result.breakdown_s;
      b.push_back({k, m.count(k) ? m.at(k) : 0.0});
    }
    bars.push_back(b);
  }
  return bars;
}

const std::vector<std::string> kMemoryParts = {"params", "grads", "optimizer", "gathered params", "reduce buffers",
                                               "activations", "recompute", "comm buffers", "framework"};

// The peak-memory breakdown of each evaluated variant (GiB, kMemoryParts order); `cap` becomes
// the largest GPU memory among them.
std::vector<std::vector<Part>> memory_bars(const WhatIfReport& r, const std::vector<std::size_t>& ok, double& cap) {
  std::vector<std::vector<Part>> bars;
  cap = 0;
  for (std::size_t i : ok) {
    const MemoryBreakdown& b = r.variants[i].peak_breakdown;
    cap = std::max(cap, r.variants[i].gpu_memory_bytes / kGiB);
    bars.push_back({{"params", b.params / kGiB},
                    {"grads", b.grads / kGiB},
                    {"optimizer", b.optimizer / kGiB},
                    {"gathered params", b.unsharded_params / kGiB},
                    {"reduce buffers", b.reduce_buffers / kGiB},
                    {"activations", b.activations / kGiB},
                    {"recompute", b.recompute / kGiB},
                    {"comm buffers", b.comm_buffers / kGiB},
                    {"framework", b.framework / kGiB}});
  }
  return bars;
}

std::string side_by_side_table(const WhatIfReport& r) {
  std::string o = "<h2>Side by side</h2>\n<table><tr><th></th>";
  for (std::size_t i = 0; i < r.variants.size(); ++i) o += fmt::format("<th>#{}</th>", i + 1);
  o += "</tr>\n";
  for (std::size_t k = 0; k < r.variations.size(); ++k) {
    o += "<tr class=\"setting\"><td>" + esc(r.variations[k].key) + "</td>";
    for (const auto& v : r.variants) o += "<td>" + esc(v.settings[k].second) + "</td>";
    o += "</tr>\n";
  }
  auto row = [&](const std::string& name, auto cell) {
    o += "<tr><td>" + esc(name) + "</td>";
    for (const auto& v : r.variants) o += "<td>" + (v.ok() ? esc(cell(v)) : std::string("error")) + "</td>";
    o += "</tr>\n";
  };
  row("tokens/s/GPU", [](const Variant& v) { return fmt::format("{:.1f}", v.result.tokens_per_s_per_gpu); });
  row("MFU", [](const Variant& v) { return fmt::format("{:.1f}%", 100 * v.result.mfu); });
  row("step time (s)", [](const Variant& v) { return fmt::format("{:.3f}", v.result.step_time_s); });
  row("peak memory", [](const Variant& v) { return format_gib(v.peak_bytes); });
  row("fits", [](const Variant& v) { return std::string(v.fits ? "yes" : "no"); });
  o += "</table>\n";
  return o;
}

std::string why_list(const WhatIfReport& r) {
  std::string o = "<h2>What changes and why</h2>\n<ul class=\"why\">\n";
  for (std::size_t i = 0; i < r.variants.size(); ++i)
    if (!r.variants[i].ok()) o += fmt::format("<li class=\"err\">#{}: {}</li>\n", i + 1, esc(r.variants[i].error));
  for (const auto& e : r.explanations) o += "<li>" + esc(e) + "</li>\n";
  for (const auto& n : r.notes) o += "<li>note: " + esc(n) + "</li>\n";
  o += "</ul>\n";
  return o;
}

}  // namespace

std::string whatif_html(const WhatIfReport& r) {
  std::vector<std::size_t> ok;
  for (std::size_t i = 0; i < r.variants.size(); ++i)
    if (r.variants[i].ok()) ok.push_back(i);
  const std::vector<std::string> time_parts(kBreakdownKeys.begin(), kBreakdownKeys.end());
  double cap = 0;
  const std::vector<std::vector<Part>> mem_bars = memory_bars(r, ok, cap);
  const auto front = pareto_front(r);

  std::string title = "meshplan whatif: " + r.config;
  std::string o = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + esc(title) +
                  "</title>\n<style>" + kStyle + "</style>\n<script>" + kScript + "</script></head><body>\n";
  o += "<h1>" + esc(title) + "</h1>\n";
  if (!ok.empty()) {
    const Variant& v = r.variants[ok.front()];
    o += fmt::format("<p>{} on {} x {} ({} GiB per GPU). Each variant re-imports the edited config with the runtime's "
                     "own semantics and simulates one optimizer step.</p>\n",
                     esc(v.run.model.name), v.run.n_gpus, esc(v.cluster_name), fmt::format("{:.1f}", v.gpu_memory_bytes / kGiB));
  }
  o += "<p id=\"status\">charts not checked (script did not run)</p>\n";
  o += side_by_side_table(r);
  o += "<h2>Step time per variant (seconds, stacked)</h2>\n";
  o += stacked_chart(r, "chart-time", "seconds per optimizer step", time_parts, time_bars(r, ok, time_parts), ok, 0, "");
  o += "<h2>Peak memory per GPU against capacity (GiB, stacked)</h2>\n";
  o += stacked_chart(r, "chart-memory", "GiB per GPU at the simulated peak", kMemoryParts, mem_bars, ok, cap,
                     fmt::format("GPU memory {:.1f} GiB", cap));
  o += "<h2>Tokens/s per GPU vs peak memory (Pareto front in orange)</h2>\n";
  o += scatter_chart(r, ok, front);
  o += why_list(r);
  o += "</body></html>\n";
  return o;
}

}  // namespace meshplan

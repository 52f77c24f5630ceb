// meshplan whatif: the cross product of setting changes, side by side, with explanations.
#include <fmt/format.h>

#include <fstream>
#include <memory>

#include "cli/command.hpp"
#include "cli/output_path.hpp"
#include "spec/atomic_file.hpp"
#include <algorithm>
#include "cli/run_inputs.hpp"
#include "cli/run_source.hpp"
#include "report/html_report.hpp"
#include "report/whatif.hpp"
#include "spec/error.hpp"

namespace meshplan::cli {

Command add_whatif_command(CLI::App& root) {
  struct Options {
    RunInputOptions in;
    std::vector<std::string> vary;
    bool json = false, md = false;
    std::string html;
  };
  auto o = std::make_shared<Options>();
  Command c;
  c.app = root.add_subcommand(
      "whatif",
      "Apply the cross product of --vary KEY=V1,V2 changes to the config file (KEY in the file's own names, e.g. "
      "fsdp_config.mixed_precision, parallelism.tensor_parallel_degree, device_train_microbatch_size), re-import "
      "each variant with the runtime's semantics and simulate it: tokens/s, MFU, step-time breakdown, peak memory "
      "and fit, bytes communicated per step, and what each difference comes from. A value the config cannot take "
      "(an unknown name, a layout that does not divide) is shown as an error column, named on stderr, and exits 2.");
  add_run_input_options(*c.app, o->in);
  add_nccl_version_option(*c.app, o->in.nccl_version);
  c.app->add_option("--vary", o->vary, "KEY=V1,V2[,...]; repeat for a cross product")->required();
  auto* j = c.app->add_flag("--json", o->json, "machine-readable output");
  auto* m = c.app->add_flag("--md", o->md, "Markdown table and explanations");
  j->excludes(m);
  c.app->add_option("--html", o->html, "also write a self-contained HTML report with charts to this file");
  c.run = [o] {
    check_nccl_version(o->in.nccl_version);
    const RunSource src = run_source(o->in);
    check_output_path(o->html, "--html");
    std::vector<Variation> vary;
    for (const auto& v : o->vary) vary.push_back(parse_variation(v));
    const WhatIfReport r = run_whatif(src, vary);
    const bool any_ok = std::any_of(r.variants.begin(), r.variants.end(), [](const Variant& v) { return v.ok(); });
    if (!any_ok && !r.variants.empty()) {
      // Every variant is an input error: say which, and write no report.
      const Variant& v = r.variants.front();
      throw InputError(o->in.config, v.error_key.empty() ? "--vary" : v.error_key,
                       v.error_reason.empty() ? v.error : v.error_reason);
    }
    if (!o->html.empty()) write_file_atomic(o->html, whatif_html(r), "--html");
    if (o->json) fmt::print("{}\n", whatif_json(r).dump(2));
    else if (o->md) fmt::print("{}", whatif_markdown(r));
    else fmt::print("{}", whatif_text(r));
    // A value the config cannot take is bad input whether or not other values work: the table
    // shows what could be evaluated, stderr names each variant that could not, and the exit
    // status is 2 (as for a single bad value).
    int status = 0;
    for (std::size_t i = 0; i < r.variants.size(); ++i) {
      const Variant& v = r.variants[i];
      if (v.ok()) continue;
      std::string set;
      for (const auto& [k, val] : v.settings) set += (set.empty() ? "" : ", ") + k + "=" + val;
      fmt::print(stderr, "meshplan: error: variant #{} ({}): {}\n", i + 1, set, v.error);
      status = 2;
    }
    return status;
  };
  return c;
}

}  // namespace meshplan::cli

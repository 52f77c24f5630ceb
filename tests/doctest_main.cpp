// The test main of every doctest binary: doctest's own, except that a run in which every selected
// case was skipped by its decorator (SKIP_UNLESS_SHARED, tests/test_paths.hpp) exits 77, which meson
// reports as SKIP rather than as a pass that tested nothing. MESHPLAN_TEST_EXCLUDE (doctest name
// patterns, comma-separated) leaves cases out of every binary: the sanitizer run of `./dev sanitize
// ci` names there the few cases too slow under ASan for CI, and says which and why.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cstdlib>

#include <doctest/doctest.h>

namespace {

int g_cases_run = 0;
int g_cases_skipped = 0;

// Counts the cases that ran and those skipped by a decorator (not those a filter left out).
struct SkipCounter : doctest::IReporter {
  explicit SkipCounter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override { ++g_cases_run; }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData& tc) override {
    if (tc.m_skip) ++g_cases_skipped;
  }
};

}  // namespace

DOCTEST_REGISTER_LISTENER("skip_counter", 1, SkipCounter);

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  if (const char* exclude = std::getenv("MESHPLAN_TEST_EXCLUDE"); exclude != nullptr && *exclude != '\0')
    context.addFilter("test-case-exclude", exclude);
  const int failed = context.run();
  if (context.shouldExit()) return failed;
  constexpr int kMesonSkip = 77;
  if (failed == 0 && g_cases_run == 0 && g_cases_skipped > 0) return kMesonSkip;
  return failed;
}

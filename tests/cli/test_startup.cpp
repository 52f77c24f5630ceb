// The meshplan binary links no CUDA library (issue 18): its ELF DT_NEEDED entries are read here
// directly (no binutils needed), and it runs with an empty LD_LIBRARY_PATH. The CUDA code lives in
// the calibration plugin, whose own dependencies are checked when this build has one.
#include <doctest/doctest.h>
#include <elf.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../test_paths.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<char> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

template <typename T>
T at(const std::vector<char>& b, std::size_t offset) {
  REQUIRE(offset + sizeof(T) <= b.size());
  T v;
  std::memcpy(&v, b.data() + offset, sizeof(T));
  return v;
}

struct Dynamic {
  std::vector<std::string> needed;  // DT_NEEDED
  std::vector<std::string> paths;   // DT_RPATH and DT_RUNPATH
};

// The dynamic section of a 64-bit little-endian ELF file: its entries' strings are in the
// section DT_STRTAB points to, located through the section headers.
Dynamic dynamic_section(const fs::path& file) {
  const std::vector<char> b = read_file(file);
  const auto eh = at<Elf64_Ehdr>(b, 0);
  REQUIRE(std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0);
  REQUIRE(eh.e_ident[EI_CLASS] == ELFCLASS64);
  std::vector<Elf64_Shdr> sections;
  for (int i = 0; i < eh.e_shnum; ++i)
    sections.push_back(at<Elf64_Shdr>(b, eh.e_shoff + static_cast<std::size_t>(i) * eh.e_shentsize));
  Dynamic d;
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_type != SHT_DYNAMIC) continue;
    REQUIRE(s.sh_link < sections.size());
    const Elf64_Shdr& strtab = sections[s.sh_link];
    auto str = [&](std::uint64_t off) {
      REQUIRE(strtab.sh_offset + off < b.size());
      return std::string(b.data() + strtab.sh_offset + off);
    };
    for (std::uint64_t off = 0; off + sizeof(Elf64_Dyn) <= s.sh_size; off += sizeof(Elf64_Dyn)) {
      const auto e = at<Elf64_Dyn>(b, s.sh_offset + off);
      if (e.d_tag == DT_NULL) break;
      if (e.d_tag == DT_NEEDED) d.needed.push_back(str(e.d_un.d_val));
      if (e.d_tag == DT_RPATH || e.d_tag == DT_RUNPATH) d.paths.push_back(str(e.d_un.d_val));
    }
  }
  return d;
}

bool is_cuda_library(const std::string& name) {
  for (const char* prefix : {"libcuda.", "libcudart", "libcublas", "libcublasLt", "libnccl", "libnvrtc", "libcudnn"})
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

struct Run {
  int exit_code = -1;
  std::string output;
};

Run run(const std::string& cmd) {
  Run r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) r.output += buf.data();
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace

TEST_CASE("the meshplan binary needs no CUDA library and names no CUDA directory to search") {
  const Dynamic d = dynamic_section(meshplan::test::meshplan_bin());
  // A dynamically linked C++ program needs at least libc and libstdc++: an empty list would mean
  // the reader is broken, not that the binary is clean.
  CHECK(std::find(d.needed.begin(), d.needed.end(), "libc.so.6") != d.needed.end());
  for (const std::string& n : d.needed) {
    CAPTURE(n);
    CHECK_FALSE(is_cuda_library(n));
  }
  for (const std::string& p : d.paths) {
    CAPTURE(p);
    CHECK(p.find("cuda") == std::string::npos);
  }
}

TEST_CASE("the calibration plugin, when this build has one, is where the CUDA libraries are needed") {
  const char* plugin = std::getenv("MESHPLAN_CALIBRATE_PLUGIN");
  if (plugin == nullptr || *plugin == '\0') {
    MESSAGE("this build has no CUDA calibration plugin");
    return;
  }
  const Dynamic d = dynamic_section(plugin);
  for (const char* lib : {"libcublasLt", "libcudart"}) {
    CAPTURE(lib);
    CHECK(std::any_of(d.needed.begin(), d.needed.end(), [&](const std::string& n) { return n.rfind(lib, 0) == 0; }));
  }
}

TEST_CASE("meshplan --version and model --list run with an empty LD_LIBRARY_PATH") {
  const std::string bin = meshplan::test::meshplan_bin().string();
  const Run v = run("env LD_LIBRARY_PATH= " + bin + " --version");
  CHECK(v.exit_code == 0);
  CHECK(v.output == "meshplan 0.1.0\n");
  const Run m = run("env LD_LIBRARY_PATH= " + bin + " model --list");
  CHECK(m.exit_code == 0);
  CHECK(m.output.find("llama3.1-405b") != std::string::npos);
}

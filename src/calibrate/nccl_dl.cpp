#include "calibrate/nccl_dl.hpp"

#include <dlfcn.h>

#include <stdexcept>

namespace meshplan::calibrate {
namespace {

template <typename F>
bool bind(void* handle, F& fn, const char* name) {
  fn = reinterpret_cast<F>(::dlsym(handle, name));
  return fn != nullptr;
}

}  // namespace

Nccl load_nccl() {
  Nccl n;
  n.handle = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (n.handle == nullptr) {
    const char* e = ::dlerror();
    n.error = std::string("libnccl.so.2 not loadable: ") + (e != nullptr ? e : "unknown dlopen error");
    return n;
  }
  bool all = bind(n.handle, n.GetVersion, "ncclGetVersion") && bind(n.handle, n.GetUniqueId, "ncclGetUniqueId") &&
             bind(n.handle, n.CommInitRank, "ncclCommInitRank") && bind(n.handle, n.CommInitAll, "ncclCommInitAll") &&
             bind(n.handle, n.CommDestroy, "ncclCommDestroy") && bind(n.handle, n.AllReduce, "ncclAllReduce") &&
             bind(n.handle, n.AllGather, "ncclAllGather") && bind(n.handle, n.ReduceScatter, "ncclReduceScatter") &&
             bind(n.handle, n.Send, "ncclSend") && bind(n.handle, n.Recv, "ncclRecv") &&
             bind(n.handle, n.GroupStart, "ncclGroupStart") && bind(n.handle, n.GroupEnd, "ncclGroupEnd") &&
             bind(n.handle, n.GetErrorString, "ncclGetErrorString");
  if (!all) {
    n.error = "libnccl.so.2 lacks a required symbol (NCCL older than 2.7?)";
    return n;
  }
  bind(n.handle, n.CommSplit, "ncclCommSplit");  // optional
  int code = 0;
  if (n.GetVersion(&code) == 0) {
    // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
    n.version = std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." + std::to_string(code % 100);
  }
  return n;
}

void nccl_check(const Nccl& n, ncclResult_t r, const char* what) {
  if (r != 0) throw std::runtime_error(std::string("NCCL ") + what + ": " + (n.GetErrorString ? n.GetErrorString(r) : "error"));
}

}  // namespace meshplan::calibrate

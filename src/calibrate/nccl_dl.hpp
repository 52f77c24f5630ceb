#pragma once
// NCCL loaded at run time with dlopen("libnccl.so.2"): the binary runs where NCCL is absent (the
// collectives are then skipped with a note). The types below are NCCL's ABI (nccl.h, stable
// since 2.x); only what calibration calls is declared.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace meshplan::calibrate {

using ncclComm_t = struct ncclComm*;
using ncclResult_t = int;  // 0 = ncclSuccess
struct ncclUniqueId {
  char internal[128];
};
enum ncclDataType_t : int { ncclFloat32 = 7 };
enum ncclRedOp_t : int { ncclSum = 0 };

struct Nccl {
  void* handle = nullptr;
  ncclResult_t (*GetVersion)(int*) = nullptr;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*CommInitAll)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t*, void*) = nullptr;  // optional (2.18+)
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*AllReduce)(const void*, void*, std::size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*AllGather)(const void*, void*, std::size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*ReduceScatter)(const void*, void*, std::size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Send)(const void*, std::size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Recv)(void*, std::size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*GroupStart)() = nullptr;
  ncclResult_t (*GroupEnd)() = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  std::string version;  // "2.21.5"
  std::string error;    // why it is not usable (empty when loaded)
  bool ok() const { return handle != nullptr && error.empty(); }
};

// Loads libnccl.so.2 (the process keeps it loaded); `error` says why when it cannot.
Nccl load_nccl();
// Throws std::runtime_error with NCCL's message when r != 0.
void nccl_check(const Nccl& n, ncclResult_t r, const char* what);

}  // namespace meshplan::calibrate

#pragma once
// A small TCP rendezvous for multi-node calibration runs: rank 0 listens on MASTER_ADDR:MASTER_PORT,
// every other rank connects, and rank 0 hands out the NCCL unique id (any byte payload), gathers
// host names and serves barriers. POSIX sockets only, so it is built and tested without a GPU.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace meshplan::calibrate {

struct RendezvousConfig {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;              // which local GPU this process drives
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::seconds timeout{300};
  std::string launcher;            // "torchrun" or "srun", for the notes
};

// torchrun / torch.distributed.run: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
// srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; MASTER_ADDR if exported, else the first host
// of SLURM_JOB_NODELIST; MASTER_PORT if exported, else 29500. nullopt when neither launcher's
// variables say WORLD_SIZE > 1. `env` maps variable -> value (the CLI passes the process env).
std::optional<RendezvousConfig> rendezvous_from_env(const std::map<std::string, std::string>& env);
std::map<std::string, std::string> process_environment(const std::vector<std::string>& names);

// First host of a Slurm node list: "gpu[03-05,9],cpu1" -> "gpu03".
std::string first_slurm_host(const std::string& nodelist);

class Rendezvous {
public:
  // Rank 0 binds and accepts world_size - 1 peers; others connect (retrying until the timeout).
  explicit Rendezvous(const RendezvousConfig& cfg);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Rank 0's `payload` arrives at every rank (others pass anything; it is ignored).
  std::vector<std::uint8_t> broadcast(const std::vector<std::uint8_t>& payload);
  // Every rank's string, indexed by rank, at every rank.
  std::vector<std::string> all_gather(const std::string& mine);
  void barrier();
  int rank() const { return cfg_.rank; }
  int world_size() const { return cfg_.world_size; }

private:
  RendezvousConfig cfg_;
  int listen_fd_ = -1;
  std::vector<int> peers_;  // rank 0: fd of rank i at [i] (index 0 unused); others: [0] = rank 0
};

}  // namespace meshplan::calibrate

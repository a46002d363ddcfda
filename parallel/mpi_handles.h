// Private to parallel/: RAII owners for MPI handles (MPI_Comm, MPI_Datatype).
//
// Each owner frees its handle in the destructor unless MPI has already been finalized (handles
// outliving MpiEnvironment are a caller bug, but must not crash the exit path). Copy is deleted;
// move transfers ownership.
// Thread-safety: as the MPI thread level allows; one owner is used by one thread at a time.
#pragma once

#include <mpi.h>

#include <utility>

namespace sy::internal {

inline bool MpiIsLive() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

// Owns an MPI_Comm created by dup or split (never MPI_COMM_WORLD or MPI_COMM_SELF themselves).
class MpiCommHandle {
 public:
  MpiCommHandle() = default;
  explicit MpiCommHandle(MPI_Comm comm) : comm_(comm) {}
  ~MpiCommHandle() { Reset(); }
  MpiCommHandle(const MpiCommHandle&) = delete;
  MpiCommHandle& operator=(const MpiCommHandle&) = delete;
  MpiCommHandle(MpiCommHandle&& other) noexcept
      : comm_(std::exchange(other.comm_, MPI_COMM_NULL)) {}
  MpiCommHandle& operator=(MpiCommHandle&& other) noexcept {
    if (this != &other) {
      Reset();
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    }
    return *this;
  }

  MPI_Comm get() const { return comm_; }

 private:
  void Reset() {
    if (comm_ != MPI_COMM_NULL && MpiIsLive()) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Owns a committed derived MPI_Datatype, or holds a predefined one without owning it.
class MpiTypeHandle {
 public:
  explicit MpiTypeHandle(MPI_Datatype type, bool owned) : type_(type), owned_(owned) {}
  ~MpiTypeHandle() {
    if (owned_ && MpiIsLive()) MPI_Type_free(&type_);
  }
  MpiTypeHandle(const MpiTypeHandle&) = delete;
  MpiTypeHandle& operator=(const MpiTypeHandle&) = delete;

  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_;
  bool owned_;
};

}  // namespace sy::internal

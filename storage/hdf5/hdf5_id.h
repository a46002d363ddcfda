// Hdf5Id: the owner of one HDF5 identifier (hid_t): a file, group, dataset, dataspace, datatype,
// attribute or property list, closed with the matching H5?close on destruction.
//
// Internal to storage/hdf5: it includes <hdf5.h>, so only .cc files of this folder and their tests
// include it; the public checkpoint headers do not.
//
// Ownership: sole owner of the id; move-only (copy deleted). A moved-from or default Hdf5Id holds
// no id. Thread-safety: HDF5 (serial build) is not thread-safe: hold Hdf5Mutex()
// (storage/hdf5/hdf5_library.h) while creating, using or destroying ids.
#pragma once

#include <hdf5.h>

#include <utility>

namespace sy {

class Hdf5Id {
 public:
  using Closer = herr_t (*)(hid_t);

  Hdf5Id() = default;
  // Takes ownership of `id` (a negative id, as HDF5 returns on failure, is held as invalid).
  Hdf5Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Hdf5Id() { Close(); }

  Hdf5Id(Hdf5Id&& other) noexcept
      : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Hdf5Id& operator=(Hdf5Id&& other) noexcept {
    if (this != &other) {
      Close();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  Hdf5Id(const Hdf5Id&) = delete;
  Hdf5Id& operator=(const Hdf5Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }

  // Closes now and returns HDF5's result (>= 0 on success); 0 when nothing is held. Closing a file
  // flushes it, so a writer checks this result instead of relying on the destructor.
  herr_t Close() {
    herr_t result = 0;
    if (id_ >= 0 && closer_ != nullptr) result = closer_(id_);
    id_ = H5I_INVALID_HID;
    return result;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

inline Hdf5Id Hdf5File(hid_t id) { return Hdf5Id(id, &H5Fclose); }
inline Hdf5Id Hdf5Group(hid_t id) { return Hdf5Id(id, &H5Gclose); }
inline Hdf5Id Hdf5Dataset(hid_t id) { return Hdf5Id(id, &H5Dclose); }
inline Hdf5Id Hdf5Dataspace(hid_t id) { return Hdf5Id(id, &H5Sclose); }
inline Hdf5Id Hdf5Datatype(hid_t id) { return Hdf5Id(id, &H5Tclose); }
inline Hdf5Id Hdf5Attribute(hid_t id) { return Hdf5Id(id, &H5Aclose); }
inline Hdf5Id Hdf5PropertyList(hid_t id) { return Hdf5Id(id, &H5Pclose); }
inline Hdf5Id Hdf5Object(hid_t id) { return Hdf5Id(id, &H5Oclose); }

}  // namespace sy

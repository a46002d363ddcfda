// CheckpointWriter and CheckpointReader for builds without HDF5: every entry point says how to get
// a build that has it. Compiled instead of the HDF5 implementation (see hdf5.cmake).
#include "storage/hdf5/checkpoint_reader.h"
#include "storage/hdf5/checkpoint_writer.h"

namespace sy {
namespace {

Status NoHdf5(const std::string& path) {
  return UnavailableError("checkpoint " + path +
                          ": this build has no HDF5 support; install libhdf5-dev "
                          "(scripts/install-deps.sh), reconfigure with -DSY_ENABLE_HDF5=ON and "
                          "rebuild");
}

}  // namespace

struct CheckpointWriter::File {};
struct CheckpointReader::File {};

CheckpointWriter::CheckpointWriter(std::string path, std::string temp_path,
                                   std::unique_ptr<File> file,
                                   const CheckpointWriterOptions& options)
    : path_(std::move(path)),
      temp_path_(std::move(temp_path)),
      file_(std::move(file)),
      options_(options) {}
CheckpointWriter::~CheckpointWriter() = default;
Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Create(const std::string& path,
                                                                   const CheckpointWriterOptions&) {
  return NoHdf5(path);
}
Status CheckpointWriter::AddTensor(std::string_view, const Tensor&) { return NoHdf5(path_); }
Status CheckpointWriter::AddTensor(std::string_view, DType, const Shape&, const void*) {
  return NoHdf5(path_);
}
Status CheckpointWriter::SetText(std::string_view, std::string_view) { return NoHdf5(path_); }
Status CheckpointWriter::SetBytes(std::string_view, std::span<const uint8_t>) {
  return NoHdf5(path_);
}
Status CheckpointWriter::Commit() { return NoHdf5(path_); }
Status CheckpointWriter::CheckOpen() const { return NoHdf5(path_); }
void CheckpointWriter::Discard() {}

CheckpointReader::CheckpointReader(std::string path, std::unique_ptr<File> file)
    : path_(std::move(path)), file_(std::move(file)) {}
CheckpointReader::~CheckpointReader() = default;
Result<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(const std::string& path) {
  return NoHdf5(path);
}
Status CheckpointReader::LoadIndex() { return NoHdf5(path_); }
Status CheckpointReader::NotFoundTensor(std::string_view) const { return NoHdf5(path_); }
std::vector<std::string> CheckpointReader::TensorNames() const { return {}; }
const CheckpointTensorInfo* CheckpointReader::FindTensor(std::string_view) const { return nullptr; }
Status CheckpointReader::ReadTensor(std::string_view, DType, const Shape&, void*) const {
  return NoHdf5(path_);
}
Status CheckpointReader::ReadTensor(std::string_view, const Tensor&) const { return NoHdf5(path_); }
bool CheckpointReader::HasMetadata(std::string_view) const { return false; }
Result<std::vector<uint8_t>> CheckpointReader::ReadBytes(std::string_view) const {
  return NoHdf5(path_);
}
Result<std::string> CheckpointReader::ReadText(std::string_view) const { return NoHdf5(path_); }

}  // namespace sy
